"""Probe: how often does a two-rank Gloo run abort at exit, by what it still holds when the group goes?

    python benchmarks/probes/gloo_exit.py [--runs 30] [--variant alive] [--variant barrier+released]

Each run starts ``torchrun --nproc-per-node 2`` (CPU, Gloo) on a bare loop of
this file's own: a small ``DistributedDataParallel`` model takes five
optimizer steps, rank 0 broadcasts an object, then the process group is
destroyed and the rank exits. Variants differ only in what happens before the
group goes:

- ``alive``: nothing; the DDP wrapper is alive at exit (as it was in
  :meth:`dreamgym.trainer.Trainer.end` before it released it);
- ``barrier``: a barrier first, the wrapper still alive;
- ``released``: the wrapper and its optimizer dropped and collected first;
- ``barrier+released``: both (what ``Trainer.end`` does now).

A run fails when torchrun exits non-zero; the probe counts the failures whose
output holds "terminate called" (a rank aborted in the interpreter's
teardown, after both ranks printed that their work was done). One JSON line
per variant. A one-off probe: no results file.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

VARIANTS = ("alive", "barrier", "released", "barrier+released")


def rank_main(variant: str) -> None:
    """One rank's run (started by torchrun with ``--rank-of VARIANT``)."""
    import gc

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    model = DistributedDataParallel(layers, find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        model(torch.randn(8, 64)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    shared: list[object] = [{"rows": list(range(1000))}] if dist.get_rank() == 0 else [None]
    dist.broadcast_object_list(shared, src=0)
    if "barrier" in variant:
        dist.barrier()
    if "released" in variant:
        del model, optimizer
        gc.collect()
    dist.destroy_process_group()
    print("work done", flush=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="torchrun starts per variant")
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="repeatable; default: all")
    parser.add_argument("--rank-of", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of:
        rank_main(args.rank_of)
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for variant in args.variant or VARIANTS:
        failed = aborted = 0
        for _ in range(args.runs):
            command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                       "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
                       str(Path(__file__).resolve()), "--rank-of", variant]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
            if done.returncode != 0:
                failed += 1
                aborted += "terminate called" in done.stdout + done.stderr
        row = {"variant": variant, "runs": args.runs, "failed": failed, "aborted_in_teardown": aborted}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
