"""The command line on a site that is not MiniWoB++: WebArena-format configs with a placeholder of their own."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from helpers import dreamgym

from dreamgym.core.types import Episode, decode_record
from dreamgym.replay import LmdbReplayStore

CONFIGS = Path(__file__).parent / "site" / "shop" / "tasks.json"


def test_collect_runs_webarena_format_tasks_on_a_users_own_site(tmp_path: Path, site_url: str) -> None:
    store = tmp_path / "store"
    argv = ("collect", "--store", str(store), "--tasks", f"webarena:{CONFIGS}", "--site", f"shop={site_url}",
            "--policy", "random", "--group-size", "2", "--max-steps", "3", "--embedder", "hashing-64")  # fmt: skip
    out = dreamgym(*argv).stdout
    assert "2 groups, 4 episodes" in out  # one group per task: these tasks have no seeds

    async def stored() -> list[Episode]:
        async with LmdbReplayStore(store, readonly=True) as opened:
            episodes = [decode_record(raw, Episode) for _, raw in opened.iter_records("episodes")]
            for episode in episodes:
                steps = await opened.episode_steps(episode.episode_id)
                assert steps and all(s.observation.url.startswith(site_url) for s in steps)
            return episodes

    episodes = anyio.run(stored)
    assert sorted(e.task_id for e in episodes) == ["webarena/1", "webarena/1", "webarena/2", "webarena/2"]
    assert not any(e.error for e in episodes)
    again = dreamgym(*argv).stdout  # idempotent here too: by task, there being no seed
    assert "skipped 2 groups" in again
    assert json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)["episodes"] == 4


def test_an_unfilled_placeholder_names_the_flag_that_fills_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = dreamgym("collect", "--store", str(store), "--tasks", f"webarena:{CONFIGS}", "--policy", "random",
                      check=False, env={"SHOP": ""})  # fmt: skip
    assert result.returncode == 2 and "uses __SHOP__" in result.stderr and "--site shop=URL" in result.stderr
    result = dreamgym("collect", "--store", str(store), "--tasks", f"webarena:{CONFIGS}", "--site", "shop",
                      "--policy", "random", check=False)  # fmt: skip
    assert result.returncode == 2 and "write NAME=URL" in result.stderr
    result = dreamgym("collect", "--store", str(store), "--tasks", f"webarena:{CONFIGS}", "--site",
                      "shop=http://127.0.0.1:9", check=False)  # fmt: skip
    assert result.returncode == 2 and "no scripted demonstrator" in result.stderr
    assert not store.exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_on_a_users_own_site_holds_out_other_tasks(
    tmp_path: Path, site_url: str, tiny_models: tuple[Path, Path]
) -> None:
    """Real-only GRPO, one update, on the shop's tasks 1-2, evaluated on its task 3: tasks without seeds are
    held out by task id."""
    policy, _ = tiny_models
    common = ("train", "--mode", "mixed", "--real-share", "1", "--store", str(tmp_path / "store"),
              "--out", str(tmp_path / "run"), "--tasks", f"webarena:{CONFIGS}", "--site", f"shop={site_url}",
              "--policy-model", str(policy), "--lora-r", "0", "--max-steps", "2")  # fmt: skip
    for extra, says in (
        ((), "give --eval-tasks"),
        (("--eval-tasks", f"webarena:{CONFIGS}"), "shares webarena/1 with --tasks"),
    ):
        refused = dreamgym(*common, *extra, check=False)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    assert not (tmp_path / "store").exists()
    result = json.loads(dreamgym(*common, "--eval-tasks", f"webarena:{CONFIGS.parent / 'eval.json'}", "--updates",
                                 "1", "--group-size", "2", "--groups-per-update", "1", "--json").stdout)  # fmt: skip
    assert result["update"] == 1 and result["real_steps"] > 0 and result["real_groups"] == 1
    assert [(e["update"], e["episodes"] + e["cut"]) for e in result["evaluations"]] == [(0, 1), (1, 1)]

    async def tasks_of(path: Path) -> set[str]:
        async with LmdbReplayStore(path, readonly=True) as opened:
            return {decode_record(raw, Episode).task_id for _, raw in opened.iter_records("episodes")}

    assert anyio.run(tasks_of, tmp_path / "run" / "eval-store") == {"webarena/3"}
    assert anyio.run(tasks_of, tmp_path / "store") <= {"webarena/1", "webarena/2"}
