"""Training under two ranks (torchrun, CPU): one rank plays every rank's episodes and writes the one store;
both train on their share, anchored to demonstrations, and end with the same weights."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from runtime_helpers import open_store

from dreamgym.core import Episode, Step, decode_record

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.timeout(600)
def test_two_ranks_train_on_episodes_only_the_first_plays_and_stores_each_once(tmp_path: Path) -> None:
    paths = [str(HERE.parent), str(HERE.parent / "runtime"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(_free_port()), str(HERE / "two_ranks.py"), str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=540, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    ranks = [json.loads((tmp_path / f"rank-{n}.json").read_text()) for n in (0, 1)]
    opened = sorted(tmp_path.glob("opened-*"))
    assert [path.name for path in opened] == [f"opened-{ranks[0]['pid']}"]  # only rank 0 opened browsers and store
    assert [rank["update"] for rank in ranks] == [2, 2]
    assert [rank["completions"] for rank in ranks] == [2, 2]  # each rank trained on its own group
    assert ranks[0]["real_groups"] == 2 * 2  # rank 0 played both ranks' group of each update
    assert ranks[0]["weights"] == ranks[1]["weights"]  # one model, kept in step across ranks
    assert ranks[0]["weights"] != ranks[0]["weights_before"]  # ...and trained
    # the anchor's extra forward pass per update runs under DDP (its loss logged at each update)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    anchored = [line["train/anchor_loss"] for line in lines if "train/anchor_loss" in line]
    assert len(anchored) == 2 and all(loss > 0 for loss in anchored)
    # Trainer.end destroyed the process group before exit (a rank exiting with it up can abort in teardown)
    assert [(rank["group_before_end"], rank["group_after_end"]) for rank in ranks] == [(True, False)] * 2
    # ...let go of the DDP wrapper first (alive at exit, it can abort a rank: benchmarks/probes/gloo_exit.py)
    assert [rank["wrappers_after_end"] for rank in ranks] == [0, 0]
    # ...and waited for the other rank: rank 1 left end() only after rank 0, still busy a second longer, came to it
    assert ranks[1]["left_end"] >= ranks[0]["entered_end"]

    async def read() -> tuple[list[Episode], list[Step]]:
        async with open_store(tmp_path / "store") as store:
            episodes = [decode_record(data, Episode) for _, data in store.iter_records("episodes")]
            steps = [decode_record(data, Step) for _, data in store.iter_records("steps")]
        return episodes, steps

    episodes, steps = anyio.run(read)
    assert len(episodes) == 2 * 2 * 2  # updates x ranks x group size, each once
    assert len({episode.episode_id for episode in episodes}) == len(episodes)
    by_episode = {episode.episode_id: episode for episode in episodes}
    for episode_id, episode in by_episode.items():
        mine = [step for step in steps if step.episode_id == episode_id]
        assert len(mine) == episode.num_steps
        assert sorted(step.step_index for step in mine) == list(range(episode.num_steps))
