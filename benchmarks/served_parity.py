"""The experience model served by ``transformers serve`` beside the same model in process (issue 54's table).

    python benchmarks/served_parity.py --model DIR --store STORE --steps EVAL_STORE [--limit 35] [--parity 10]
        [--rows in_process,served,...] [--out NAME]

One ``transformers serve`` on 127.0.0.1 (started here, offline, on the CPU,
without a model on its command line: it loads each directory a request
names) answers the experience model's prompts for the first ``--limit``
held-out real steps of ``--steps`` (whole episodes), with retrieval from
``--store``, scored one step teacher-forced as ``dreamgym sim eval`` scores
them. Rows:

- ``in_process``: the model in this process (``LocalBackend``), 3 attempts;
- ``served``: the same directory served, 3 attempts: the server does not
  sample, so its retries repeat the first answer (``repeated_retries``);
- ``served_sampling``: a copy of the directory whose ``generation_config.json``
  says ``"do_sample": true, "top_k": 0`` (what ``transformers serve`` needs to
  sample at a temperature above 0, with no top-k, as in process), 3 attempts;
- ``served_no_retries`` and ``in_process_no_retries``: 1 attempt each (the
  greedy answer alone): the two must agree.

Then :func:`~dreamgym.simulator.backends.check_server` on ``--parity``
prompts (greedy answers beside the in-process model, sampling, seed, stop,
structured output). Sampled rows differ from in process by chance (another
random stream), not by kind. Prints a JSON line per row and writes
``benchmarks/results/<out>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import commit, emit, provenance

ROWS = ("in_process", "in_process_no_retries", "served", "served_sampling", "served_no_retries")
BASELINE = {"served_no_retries": "in_process_no_retries", "in_process_no_retries": "in_process_no_retries"}
"""Each row's same-run baseline: the model in process with as many attempts (``in_process`` otherwise)."""
FIGURES = (("salvaged", "salvaged answers", "answers"), ("done_accuracy", "end of episode right", "share"),
           ("exact_match", "exact page", "share"), ("repeated_retries", "retries that repeated the attempt before",
           "retries"))  # fmt: skip
SAMPLE = {"do_sample": True, "top_k": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="the experience model's directory")
    parser.add_argument("--store", type=Path, required=True, help="the store it retrieves from")
    parser.add_argument("--steps", type=Path, required=True, help="the store of held-out real steps to predict")
    parser.add_argument("--limit", type=int, default=35, help="steps (whole episodes of the first N)")
    parser.add_argument("--parity", type=int, default=10, help="prompts of the parity check (0: none)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"rows to run, of {', '.join(ROWS)}")
    parser.add_argument("--out", default="served_parity", help="results file name (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    if unknown := set(rows) - set(ROWS):
        parser.error(f"--rows: unknown {sorted(unknown)}")
    commit()
    import anyio

    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "serve.log") as url:
        sampling_dir = Path(tmp) / "sampling"
        shutil.copytree(args.model, sampling_dir)
        config = json.loads((sampling_dir / "generation_config.json").read_text())
        (sampling_dir / "generation_config.json").write_text(json.dumps({**config, **SAMPLE}))
        results = anyio.run(measure, args, rows, url, sampling_dir)
    out = Path(__file__).resolve().parent / "results" / f"{args.out}.json"
    out.write_text(json.dumps({**provenance(), **results}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


async def measure(args: argparse.Namespace, rows: list[str], url: str, sampling_dir: Path) -> dict[str, Any]:
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import ServedModel, TemplateConfig, load_experience_model, one_step_fidelity, read_metadata
    from dreamgym.simulator.backends import LocalBackend, check_server

    meta = read_metadata(args.model)
    template = TemplateConfig(**meta["template"])
    held_out = [(task, seed) for task, seed in meta.get("held_out", [])]
    sources = {
        "in_process": (args.model, 3),
        "served": (ServedModel(model=str(args.model), url=url, template=template), 3),
        "served_sampling": (ServedModel(model=str(sampling_dir), url=url, template=template), 3),
        "served_no_retries": (ServedModel(model=str(args.model), url=url, template=template), 1),
        "in_process_no_retries": (args.model, 1),
    }
    figures: dict[str, Any] = {}
    emitted: list[dict[str, Any]] = []
    async with (
        LmdbReplayStore(args.store, readonly=True) as store,
        LmdbReplayStore(args.steps, readonly=True) as real,
    ):
        steps = _first_episodes(real, args.limit)
        for row in rows:
            source, attempts = sources[row]
            model = load_experience_model(source, max_attempts=attempts)
            # a server is not told the page's lines, so the model in process decodes unguarded too: like with like
            model.config = dataclasses.replace(model.config, copy_page_lines=False)
            started = time.perf_counter()
            results = await one_step_fidelity(model, steps, store=store, neighbours=template.neighbours,
                                              exclude_task_seeds=held_out)  # fmt: skip
            figures[row] = _row(results["model"], model, time.perf_counter() - started)
            await model.backend.aclose()
            baseline = BASELINE.get(row, "in_process")
            base = figures.get(baseline, figures[row])
            for key, name, unit in FIGURES:
                emitted.append(emit(f"{row}: {name}", figures[row][key], unit, baseline, base[key], row=row))
        check = None
        if args.parity:
            served = load_experience_model(sources["served"][0])
            prompts = [template.messages(q) for _, q in await _queries(steps[: args.parity], store, template, held_out)]
            local = LocalBackend.load(args.model)
            found = await check_server(served.backend, prompts, local=local, max_new_tokens=384)
            check = found.as_dict()
            emitted.append(emit("parity: greedy answers identical to in process", found.identical_share or 0.0,
                                "share", "all of them", 1.0, **check))  # fmt: skip
    return {"steps": len(steps), "limit": args.limit, "model": str(args.model), "figures": emitted, "rows": figures,
            "parity": check}  # fmt: skip


def _first_episodes(real: Any, limit: int) -> list[Any]:
    from dreamgym.core.types import Step, decode_record

    steps = [decode_record(data, Step) for _, data in real.iter_records("steps")]
    steps = [s for s in steps if s.source == "real"]
    keep = {s.episode_id for s in steps[:limit]}
    return [s for s in steps if s.episode_id in keep]


async def _queries(steps: list[Any], store: Any, template: Any, held_out: list[Any]) -> list[Any]:
    from dreamgym.simulator import teacher_forced_queries

    return await teacher_forced_queries(steps, store=store, neighbours=template.neighbours,
                                        exclude_task_seeds=held_out)  # fmt: skip


def _row(summary: Any, model: Any, seconds: float) -> dict[str, Any]:
    figures = summary.as_dict()
    keep = ("n", "reward_accuracy", "done_accuracy", "exact_match", "similarity", "failures", "salvaged")
    return {**{k: figures[k] for k in keep}, "repeated_retries": model.stats.repeated_retries,
            "calls": model.stats.calls, "seconds": round(seconds, 1)}  # fmt: skip


@contextmanager
def serve(log: Path) -> Iterator[str]:
    """``transformers serve`` on a free port of 127.0.0.1, on the CPU, offline; yields its /v1 URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [str(Path(sys.executable).with_name("transformers")), "serve", "--host", "127.0.0.1", "--port", str(port),
            "--device", "cpu", "--log-level", "warning"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 180
            while not _healthy(f"http://127.0.0.1:{port}"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"transformers serve did not start:\n{log.read_text()}")
                time.sleep(0.5)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            process.terminate()
            process.wait(timeout=30)


def _healthy(root: str) -> bool:
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


if __name__ == "__main__":
    main()
