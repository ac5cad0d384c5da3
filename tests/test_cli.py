"""The command line, end to end, as a user runs it (a real process each time)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import dreamgym, make_step
from openai_server import ServerState, openai_server

from dreamgym.core import Episode, Task
from dreamgym.core.types import decode_record
from dreamgym.replay import HashingEmbedder, LmdbReplayStore


def _make_store(path: Path) -> None:
    async def fill() -> None:
        async with LmdbReplayStore(path, embedder=HashingEmbedder(32)) as store:
            await store.put_task(Task(task_id="task-a", instruction="click"))
            await store.append([make_step(i) for i in range(5)] + [make_step(5, source="synthetic")])
            await store.flush()

    anyio.run(fill)


def test_help_lists_the_commands() -> None:
    out = dreamgym("--help").stdout
    for command in ("demo", "replay"):
        assert command in out
    assert "reindex" in dreamgym("replay", "--help").stdout


def test_replay_stats_export_import_and_reindex(tmp_path: Path) -> None:
    store, copy = tmp_path / "store", tmp_path / "copy"
    _make_store(store)
    stats = json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)
    assert stats["steps"] == {"real": 5, "synthetic": 1}
    assert (stats["tasks"], stats["vectors"], stats["embedder"]) == (1, 5, "hashing-32")
    assert "embedded_upto" in dreamgym("replay", "stats", str(store)).stdout

    assert "wrote 7 records" in dreamgym("replay", "export", str(store), "-o", str(tmp_path / "x.jsonl")).stdout
    out = dreamgym("replay", "import", str(copy), str(tmp_path / "x.jsonl"), "--embedder", "hashing-16").stdout
    assert "6 steps" in out
    copied = json.loads(dreamgym("replay", "stats", str(copy), "--json").stdout)
    assert (copied["steps"], copied["vectors"], copied["embedder"]) == (stats["steps"], 5, "hashing-16")

    assert (
        "reindexed 5 steps with hashing-64"
        in dreamgym("replay", "reindex", str(store), "--embedder", "hashing-64").stdout
    )
    assert json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)["dim"] == 64


def test_cli_errors_are_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    import os

    locked = tmp_path / "locked"  # a folder a new store cannot be made in (root writes anywhere but /proc)
    locked.mkdir(mode=0o500)
    result = dreamgym("replay", "stats", str(tmp_path / "missing"), check=False)
    assert result.returncode == 2  # a user's mistake
    assert result.stderr.strip().startswith("dreamgym: error: no store at")
    (tmp_path / "a-file").write_text("not a store")
    result = dreamgym("collect", "--store", str(tmp_path / "a-file"), "--tasks", "click-test", "--seeds", "0",
                      check=False)  # fmt: skip
    assert result.returncode == 2 and result.stderr.strip().endswith("is a file, not a store directory")
    assert (tmp_path / "a-file").read_text() == "not a store"
    (tmp_path / "bad.jsonl").write_text("not json\n")
    result = dreamgym("replay", "import", str(tmp_path / "s"), str(tmp_path / "bad.jsonl"), check=False)
    assert result.returncode == 1 and "bad.jsonl:1" in result.stderr
    assert not (tmp_path / "s").exists()  # refused before any store was created
    result = dreamgym("collect", "--store", "/proc/dreamgym-test/store" if os.geteuid() == 0 else str(locked / "s"),
                      "--tasks", "click-test", "--seeds", "0", check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot open the store" in result.stderr


def test_a_store_another_process_writes_is_refused_in_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    import os

    store = tmp_path / "store"
    _make_store(store)
    dreamgym("replay", "export", str(store), "-o", str(tmp_path / "x.jsonl"))

    async def beside_a_writer() -> list[Any]:
        async with LmdbReplayStore(store, embedder=HashingEmbedder(32)) as held:
            runs = [
                await anyio.to_thread.run_sync(lambda argv=argv: dreamgym(*argv, check=False))
                for argv in (
                    ("collect", "--store", str(store), "--tasks", "click-test", "--seeds", "0"),
                    ("replay", "import", str(store), str(tmp_path / "x.jsonl")),
                )
            ]
            assert (await held.stats()).steps == {"real": 5, "synthetic": 1}
        return runs

    for result in anyio.run(beside_a_writer):
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dreamgym: error: the store at"), result.stderr
        assert f"open for writing in process {os.getpid()}" in lines[0]
    assert json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)["steps"] == {"real": 5, "synthetic": 1}


def test_bad_run_arguments_are_one_line_exit_2_and_open_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for argv, says in (
        (("--seeds", "5-1"), "the range 5-1 runs backwards"),
        (("--seeds", ","), "names no seed"),
        (("--tasks", ""), "names no task"),
        (("--tasks", "click-buton"), "no MiniWoB task 'click-buton'"),
        (("--tasks", "webarena:tasks.json"), "no config file or folder at tasks.json"),
        (("--tasks", "gym:click-button"), "give MiniWoB++ tasks (miniwob:NAME or bare names)"),
        (("--tasks", "all"), "no scripted demonstrator for"),  # the default policy is the demonstrator
        (("--tasks", "miniwob:click-button,book-flight"), "no scripted demonstrator for book-flight"),
    ):
        for command in ("collect", "rollout"):
            result = dreamgym(command, "--store", str(store), *argv, check=False)
            assert result.returncode == 2, (argv, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("dreamgym: error: --") and says in lines[0], lines
            assert not store.exists()  # checked before anything was opened


def test_rollout_on_a_served_experience_model(tmp_path: Path) -> None:
    """``rollout --sim-url``: synthetic episodes predicted by a real OpenAI-compatible server on 127.0.0.1."""
    store = tmp_path / "store"
    dreamgym("collect", "--store", str(store), "--tasks", "click-test", "--seeds", "0", "--embedder", "hashing-64")
    state = ServerState(chat_reply=lambda body: "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>")
    with openai_server(state) as (url, _):
        out = dreamgym("rollout", "--store", str(store), "--tasks", "click-test", "--seeds", "0", "--policy", "random",
                       "--max-steps", "2", "--sim-url", url, "--sim-model", "served-sim", "--sim-structured",
                       "vllm").stdout  # fmt: skip
    assert "synthetic: 0/1 episodes succeeded, 2 steps" in out
    asked = [r for r in state.requests if r.get("model") == "served-sim"]
    assert len(asked) == 2 and all("structured_outputs" in r for r in asked)


def test_a_served_experience_model_needs_its_name_and_cannot_be_refit(tmp_path: Path) -> None:
    store, url = tmp_path / "store", "http://127.0.0.1:9/v1"
    result = dreamgym("rollout", "--store", str(store), "--tasks", "click-button", "--sim-url", url, check=False)
    assert result.returncode == 2 and "--sim-url needs --sim-model NAME" in result.stderr
    result = dreamgym("rollout", "--store", str(store), "--tasks", "click-button", "--sim-url", url, "--sim-model",
                      "m", *("--sim-stop", "a") * 5, check=False)  # fmt: skip
    assert result.returncode == 2 and "--sim-stop given at most four times" in result.stderr
    result = dreamgym("train", "--mode", "synthetic", "--store", str(store), "--tasks", "click-button",
                      "--sim-url", url, "--sim-model", "m", "--sim-refit-every", "2", "--output-dir",
                      str(tmp_path / "run"), check=False)  # fmt: skip
    assert result.returncode == 2 and "needs a local model, not --sim-url" in result.stderr
    assert not store.exists()


def test_every_command_takes_a_config_file_of_its_flags_and_flags_override_it(tmp_path: Path) -> None:
    store, config = tmp_path / "store", tmp_path / "collect.toml"
    config.write_text('tasks = "click-button"\nseeds = "5-1"\nmax-steps = 2\nembedder = "hashing-64"\n')
    result = dreamgym("collect", "--store", str(store), "--config", str(config), check=False)
    assert result.returncode == 2 and "the range 5-1 runs backwards" in result.stderr  # the file's value reached it
    out = dreamgym("collect", "--store", str(store), "--config", str(config), "--seeds", "0-1").stdout  # overridden
    assert "2 groups, 2 episodes" in out  # one group per (task, seed), group size 1
    config.write_text('sedes = "0-1"\n')
    result = dreamgym("collect", "--store", str(store), "--config", str(config), check=False)
    assert result.returncode == 2 and "'sedes' is no flag of this command" in result.stderr and "seeds" in result.stderr
    (tmp_path / "validate.json").write_text(json.dumps({"out": str(tmp_path / "report"), "limit": 3}))
    result = dreamgym("validate", "--model", str(tmp_path / "m"), "--config", str(tmp_path / "validate.json"),
                      check=False)  # fmt: skip
    assert result.returncode == 1 and "--store is required" in result.stderr  # --out came from the file


def test_the_task_grammar() -> None:
    from dreamgym.bridge.demonstrators import DEMONSTRATORS
    from dreamgym.bridge.miniwob import EXCLUDED, text_tasks
    from dreamgym.cli._common import task_names

    assert task_names("miniwob:click-button, enter-text,miniwob/click-tab") == [
        "click-button",
        "enter-text",
        "click-tab",
    ]
    everything = task_names("all")
    assert everything == task_names("miniwob:all") == list(text_tasks()) and len(everything) > len(DEMONSTRATORS)
    assert not set(everything) & set(EXCLUDED)
    assert task_names("demonstrated,click-button") == sorted(DEMONSTRATORS)  # each once


def test_a_collect_killed_inside_an_episode_commit_leaves_no_episode_without_its_record(tmp_path: Path) -> None:
    """SIGKILL (through the store's test hook) inside the third episode's commit: the two episodes
    committed before it are whole, the third left nothing, and ``replay stats`` sees no gap."""
    import signal

    store = tmp_path / "store"
    argv = ("collect", "--store", str(store), "--tasks", "click-test,click-button", "--seeds", "0-2")
    killed = dreamgym(*argv, "--concurrency", "1", check=False, env={"DREAMGYM_TEST_FAULT": "kill:episode-commit@3"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    stats = json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)
    assert stats["episodes"] == 2
    assert (stats["unfinished_episodes"], stats["empty_episodes"]) == (0, 0)

    async def whole() -> None:
        async with LmdbReplayStore(store, readonly=True) as opened:
            episodes = [decode_record(raw, Episode) for _, raw in opened.iter_records("episodes")]
            assert len(episodes) == 2
            for episode in episodes:
                steps = await opened.episode_steps(episode.episode_id)
                assert [s.step_index for s in steps] == list(range(episode.num_steps))
            assert sum(e.num_steps for e in episodes) == sum(stats["steps"].values())

    anyio.run(whole)


def test_replay_stats_counts_unfinished_and_empty_episodes(tmp_path: Path) -> None:
    store = tmp_path / "store"

    async def fill() -> None:
        async with LmdbReplayStore(store, embedder=HashingEmbedder(32)) as opened:
            await opened.append(
                [make_step(0, episode_id="done"), make_step(1, episode_id="done")],
                episodes=[Episode(episode_id="done", task_id="t", source="real", num_steps=2)],
            )
            await opened.append([make_step(0, episode_id="cut-short")])  # its record never came
            await opened.append([make_step(0, episode_id="done/shadow", source="synthetic")])  # none by design
            await opened.put_episode(Episode(episode_id="no-steps", task_id="t", source="real", num_steps=1))

    anyio.run(fill)
    stats = json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)
    assert (stats["episodes"], stats["unfinished_episodes"], stats["empty_episodes"]) == (2, 1, 1)


@pytest.mark.slow
def test_collect_again_skips_the_groups_the_store_holds_unless_told_again(tmp_path: Path) -> None:
    store = tmp_path / "store"
    argv = ("collect", "--store", str(store), "--tasks", "click-test")

    def episodes() -> int:
        return int(json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)["episodes"])

    assert "2 groups, 4 episodes" in dreamgym(*argv, "--seeds", "0-1", "--group-size", "2").stdout
    assert episodes() == 4
    rerun = dreamgym(*argv, "--seeds", "0-1", "--group-size", "2").stdout
    assert "0 groups, 0 episodes" in rerun and "skipped 2 groups" in rerun
    assert episodes() == 4
    more = dreamgym(*argv, "--seeds", "0-2", "--group-size", "2").stdout
    assert "1 groups, 2 episodes" in more and "skipped 2 groups" in more
    assert episodes() == 6
    dreamgym(*argv, "--seeds", "0", "--group-size", "2", "--again")
    assert episodes() == 8
    topped = dreamgym(*argv, "--seeds", "1", "--group-size", "3").stdout  # seed 1 holds 2 of 3: one more
    assert "1 groups, 1 episodes" in topped
    assert episodes() == 9


def test_a_store_whose_files_cannot_be_written_is_still_read(tmp_path: Path) -> None:
    """A read-only copy: LMDB's readers normally write to lock.mdb. ``chattr +i`` makes the file
    unwritable even to root (skipped where the filesystem or the container does not allow it)."""
    store = tmp_path / "store"
    _make_store(store)
    lock = store / "lock.mdb"
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(lock)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        stats = json.loads(dreamgym("replay", "stats", str(store), "--json").stdout)
        assert stats["steps"] == {"real": 5, "synthetic": 1}
        assert dreamgym("replay", "check", str(store)).returncode == 0
        dreamgym("replay", "export", str(store), "-o", str(tmp_path / "out.jsonl"))
        assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 7
    finally:
        subprocess.run(["chattr", "-i", str(lock)], check=True)


def test_two_collect_processes_on_one_store_the_second_is_refused_and_the_first_stores_everything_once(
    tmp_path: Path,
) -> None:
    import sys
    import time

    store = tmp_path / "store"
    argv = ["collect", "--store", str(store), "--tasks", "click-test,click-button", "--seeds", "0-5",
            "--concurrency", "1"]  # fmt: skip
    first = subprocess.Popen([sys.executable, "-m", "dreamgym.cli", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lock = store / "writer.lock"
        deadline = time.monotonic() + 120
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, "the first collect never took the store"
            time.sleep(0.05)
        second = dreamgym(*argv, check=False)
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 1 and f"open for writing in process {first.pid}" in second.stderr
    assert first.returncode == 0, err
    assert "12 groups, 12 episodes" in out

    async def stored() -> None:
        async with LmdbReplayStore(store, readonly=True) as opened:
            stats = await opened.stats()
            steps = await opened.get_steps(list(range(1, stats.last_seq + 1)))
            episodes = [decode_record(raw, Episode) for _, raw in opened.iter_records("episodes")]
            assert len(episodes) == 12 and stats.unfinished_episodes == stats.empty_episodes == 0
            keys = [(step.episode_id, step.step_index) for step in steps]
            assert len(keys) == len(set(keys)) == sum(e.num_steps for e in episodes)  # each step once
            for episode in episodes:  # every episode's steps are its own
                mine = await opened.episode_steps(episode.episode_id)
                assert {s.episode_id for s in mine} == {episode.episode_id} and len(mine) == episode.num_steps

    anyio.run(stored)


def test_a_job_whose_every_episode_failed_exits_non_zero_saying_why(tmp_path: Path) -> None:
    """A chat policy whose server is not there (nothing listens on port 9): every episode ends on a
    backend error; the job says so and exits 1 instead of reporting 0 steps as success."""
    result = dreamgym("collect", "--store", str(tmp_path / "store"), "--tasks", "click-test", "--seeds", "0-1",
                      "--policy", "chat", "--policy-model", "x", "--openai-url", "http://127.0.0.1:9/v1",
                      check=False)  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "every one of the 2 episodes was ended by the infrastructure" in last and "2 backend" in last
    assert "Connection error" in last


def test_a_served_policy_takes_its_settings_and_the_servers_error_reaches_the_user(tmp_path: Path) -> None:
    """A real OpenAI-compatible server on 127.0.0.1: the chat policy's budget, stop strings and timeout come from
    the command line; a refusal in the server's own words (FastAPI's ``detail``) is what the user reads."""
    from openai_server import ServerState, openai_server

    store = tmp_path / "store"
    common = ("collect", "--store", str(store), "--tasks", "click-test", "--seeds", "0", "--policy", "chat",
              "--policy-model", "smollm2", "--max-steps", "1", "--embedder", "hashing-64")  # fmt: skip
    refused = dreamgym(*common, "--stop", "a", "--stop", "b", "--stop", "c", "--stop", "d", "--stop", "e",
                       check=False)  # fmt: skip
    assert refused.returncode == 2 and "at most 4 stop strings" in refused.stderr and not store.exists()

    state = ServerState(chat_replies=["<action>click [e1]</action>"])
    with openai_server(state) as (url, _):
        dreamgym(*common, "--openai-url", url, "--max-new-tokens", "77", "--stop", "</action>", "--stop", "END",
                 "--timeout", "30")  # fmt: skip
    request = state.requests[0]
    assert (request["max_tokens"], request["stop"]) == (77, ["</action>", "END"])

    pinned = "Server is pinned to HuggingFaceTB/SmolLM2-135M-Instruct; requested 'smollm2'"
    state = ServerState(fail_next=[400], error_body={"detail": pinned})
    with openai_server(state) as (url, _):
        result = dreamgym(*common, "--seeds", "1", "--openai-url", url, check=False)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "every one of the 1 episodes" in last and f"HTTP 400: {pinned}" in last
