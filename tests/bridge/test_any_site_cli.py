"""The command line on a site that is not MiniWoB++: WebArena-format configs with a placeholder of their own."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
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
