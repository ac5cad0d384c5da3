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
    assert [e.error for e in episodes if e.error] == []
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


def test_a_reset_command_runs_before_every_real_episode_one_at_a_time(tmp_path: Path, site_url: str) -> None:
    log = tmp_path / "resets.log"
    reset = f"echo start >> {log}; sleep 0.2; echo end >> {log}"
    argv = ("collect", "--store", str(tmp_path / "store"), "--tasks", f"webarena:{CONFIGS}", "--site",
            f"shop={site_url}", "--policy", "random", "--group-size", "2", "--max-steps", "2", "--embedder",
            "hashing-64")  # fmt: skip
    out = dreamgym(*argv, "--reset-command", reset, "--concurrency", "4").stdout
    assert "2 groups, 4 episodes" in out
    assert log.read_text().split() == ["start", "end"] * 4  # one per episode, never two at once

    broken = dreamgym("collect", "--store", str(tmp_path / "broken"), *argv[3:], "--reset-command",
                      "echo the database is locked >&2; exit 3", check=False)  # fmt: skip
    assert broken.returncode == 1, broken.stderr
    assert "the reset command exited with status 3 before task webarena/" in broken.stderr + broken.stdout
    assert "the database is locked" in broken.stderr + broken.stdout
    refused = dreamgym("collect", "--store", str(tmp_path / "mw"), "--tasks", "click-button", "--reset-command",
                       "true", check=False)  # fmt: skip
    assert refused.returncode == 2 and "--reset-command is for webarena: tasks" in refused.stderr, refused.stderr


def test_a_fuzzy_match_task_without_an_answer_judge_is_refused_before_anything_runs(tmp_path: Path) -> None:
    store, fuzzy = (
        tmp_path / "store",
        f"webarena:{Path(__file__).parent / 'fuzzy_task.json'}",
    )  # not in shop/: a folder of it is collected
    site = ("--site", "shop=http://127.0.0.1:9")
    for command in (("collect", "--store", str(store)), ("rollout", "--store", str(store))):
        result = dreamgym(*command, "--tasks", fuzzy, *site, "--policy", "random", check=False)
        assert result.returncode == 2, result.stderr
        assert "task webarena/4 scores its answer by fuzzy_match" in result.stderr
        assert "--answer-judge-url URL --answer-judge-model NAME" in result.stderr
    result = dreamgym("collect", "--store", str(store), "--tasks", fuzzy, *site, "--policy", "random",
                      "--answer-judge-url", "http://127.0.0.1:9/v1", check=False)  # fmt: skip
    assert result.returncode == 2 and "--answer-judge-url needs --answer-judge-model" in result.stderr
    result = dreamgym("train", "--tasks", fuzzy, *site, "--eval-seeds", "", "--output-dir", str(tmp_path / "run"),
                      "--store", str(store), check=False)  # fmt: skip
    assert result.returncode == 2 and "fuzzy_match" in result.stderr
    assert not store.exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_job_on_a_users_own_site_with_the_same_task_arguments(
    tmp_path: Path, site_url: str, tiny_models: tuple[Path, Path]
) -> None:
    """collect (all three shop tasks), sim train (tasks 1-2), validate (task 3) and train (tasks 1-2, evaluated on
    task 3), each with the same --tasks/--site grammar: tasks without seeds are held out by task id throughout."""
    policy, _ = tiny_models
    site, store = ("--site", f"shop={site_url}"), tmp_path / "store"
    train_tasks, eval_tasks = f"webarena:{CONFIGS}", f"webarena:{CONFIGS.parent / 'eval.json'}"
    dreamgym("collect", "--store", str(store), "--tasks", f"webarena:{CONFIGS.parent}", *site, "--policy", "random",
             "--group-size", "2", "--max-steps", "2", "--embedder", "hashing-64")  # fmt: skip
    assert anyio.run(tasks_of, store) == {"webarena/1", "webarena/2", "webarena/3"}

    model = tmp_path / "sim"
    refused = dreamgym("sim", "train", str(store), "-o", str(model), "--tasks", "webarena:/nowhere.json", *site,
                       check=False)  # fmt: skip
    assert refused.returncode == 2 and "no config file" in refused.stderr and not model.exists()
    out = dreamgym("sim", "train", str(store), "-o", str(model), "--tasks", train_tasks, *site, "--epochs", "1",
                   "--max-steps", "1").stdout  # fmt: skip
    assert "on 8 examples" in out  # two episodes of two steps for each of tasks 1 and 2, none of task 3
    assert json.loads((model / "dreamgym_model.json").read_text())["held_out"] == [["webarena/3", None]]

    report = tmp_path / "validation"
    refused = dreamgym("validate", "--store", str(store), "--model", str(model), "--tasks", "click-button",
                       "--out", str(report), check=False)  # fmt: skip
    assert refused.returncode == 2 and "holds no real step of miniwob/click-button" in refused.stderr
    dreamgym("validate", "--store", str(store), "--model", str(model), "--tasks", eval_tasks, *site,
             "--max-new-tokens", "16", "--out", str(report))  # fmt: skip
    validation = json.loads((report / "validation.json").read_text())
    assert (validation["tasks"], validation["episodes"]) == (1, 2)
    assert validation["settings"]["exclude_task_seeds"] == [["webarena/3", None]]

    live_store, live_report = tmp_path / "live-store", tmp_path / "live-validation"
    live_argv = ("validate", "--live", "--store", str(live_store), "--model", str(model), "--tasks", eval_tasks,
                 *site, "--policy", "random", "--episodes", "2", "--max-steps", "2", "--max-new-tokens", "16",
                 "--out", str(live_report))  # fmt: skip
    out = dreamgym(*live_argv).stdout  # plays task 3 on the live site, then validates on what it played
    assert "live: 1 groups, 2 episodes" in out
    live = json.loads((live_report / "validation.json").read_text())
    assert (live["tasks"], live["episodes"]) == (1, 2)
    assert live["steps"] > 0
    assert live["settings"]["exclude_task_seeds"] == [["webarena/3", None]]  # never retrieved
    assert "copy_top_retrieved" in live["one_step"] and "unchanged" in live["one_step"]  # both baselines
    assert (live_report / "report.html").is_file()
    again = dreamgym(*live_argv, check=False)
    assert again.returncode == 2 and "already holds one" in again.stderr
    # the same live run on a Ray rollout worker: the WebArena-format site travels to the worker by pickle
    on_worker = ("validate", "--live", "--store", str(tmp_path / "worker-store"), "--model", str(model), "--tasks",
                 eval_tasks, *site, "--policy", "random", "--episodes", "2", "--max-steps", "2", "--max-new-tokens",
                 "16", "--out", str(tmp_path / "worker-validation"), "--workers", "1")  # fmt: skip
    played = dreamgym(*on_worker)
    assert "live: 1 groups, 2 episodes" in played.stdout
    assert "on 1 Ray rollout workers" in " ".join(played.stderr.split())  # rich may wrap the log line

    common = ("train", "--mode", "mixed", "--real-share", "1", "--store", str(tmp_path / "train-store"),
              "--out", str(tmp_path / "run"), "--tasks", train_tasks, *site,
              "--policy-model", str(policy), "--lora-r", "0", "--max-steps", "2")  # fmt: skip
    for extra, says in (
        ((), "give --eval-tasks"),
        (("--eval-tasks", train_tasks), "shares webarena/1 with --tasks"),
    ):
        refused = dreamgym(*common, *extra, check=False)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    assert not (tmp_path / "train-store").exists()
    result = json.loads(dreamgym(*common, "--eval-tasks", eval_tasks, "--updates", "1", "--group-size", "2",
                                 "--groups-per-update", "1", "--json").stdout)  # fmt: skip
    assert result["update"] == 1 and result["real_steps"] > 0 and result["real_groups"] == 1
    assert [(e["update"], e["episodes"] + e["cut"]) for e in result["evaluations"]] == [(0, 1), (1, 1)]
    assert anyio.run(tasks_of, tmp_path / "run" / "eval-store") == {"webarena/3"}
    assert anyio.run(tasks_of, tmp_path / "train-store") <= {"webarena/1", "webarena/2"}


async def tasks_of(path: Path) -> set[str]:
    async with LmdbReplayStore(path, readonly=True) as opened:
        return {decode_record(raw, Episode).task_id for _, raw in opened.iter_records("episodes")}
