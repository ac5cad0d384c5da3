"""``dreamgym sim train``, ``sim eval`` and ``sim check`` end to end, with tiny settings."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import toy_form
from helpers import dreamgym
from openai_server import ServerState, openai_server
from sim_helpers import fill_toy_store, open_store

from dreamgym.simulator import read_metadata


def make_stores(root: Path) -> tuple[Path, Path]:
    async def fill() -> None:
        async with open_store(root / "train") as store:
            await fill_toy_store(store, range(4))
        async with open_store(root / "held") as store:
            await store.put_task(toy_form.TASK)
            for steps in toy_form.episodes(range(10, 12)):
                await store.append(steps)

    anyio.run(fill)
    return root / "train", root / "held"


@pytest.mark.timeout(300)
def test_sim_train_then_eval_beside_the_baselines(tmp_path: Path) -> None:
    train, held = make_stores(tmp_path)
    out = dreamgym("sim", "train", str(train), "--out", str(tmp_path / "model"), "--max-steps", "2",
                   "--hold-out", "toy/form:3", "--device", "cpu", "--dtype", "float32", "--past-actions",
                   "--target-line", "--target-alias", "--split", "whitespace", "--max-length", "1536",
                   "--relabel-ids", "0.5").stdout  # fmt: skip
    assert "on 12 examples" in out and "experience/v1:h1:k2:direct:diff:acts:tgt:alias" in out
    meta = read_metadata(tmp_path / "model")
    assert meta["template"]["past_actions"] is True  # and eval, below, prompts with it (loaded from the metadata)
    assert meta["template"]["target_line"] is True and meta["template"]["target_alias"] is True
    assert meta["held_out"] == [["toy/form", 3]] and meta["trained_with_reasoning"] is False
    assert (meta["config"]["device"], meta["config"]["dtype"]) == ("cpu", "float32")
    assert meta["config"]["max_length"] == 1536 and meta["config"]["relabel_ids"] == 0.5
    assert meta["config"]["scratch"]["split"] == "whitespace"
    lines = dreamgym("sim", "eval", str(train), "--steps", str(held), "--model", str(tmp_path / "model"),
                     "--json").stdout.splitlines()  # fmt: skip
    rows = {row["name"]: row for row in map(json.loads, lines)}
    assert set(rows) == {"model", "copy_top_retrieved", "unchanged"}
    assert all(row["n"] == 8 for row in rows.values())
    # The toy page changes only when typing, which the typed-text rule writes: "unchanged" gets every page right
    # and the end of none of the Submits.
    assert rows["unchanged"]["exact_match"] == 1.0 and rows["unchanged"]["done_accuracy"] == 0.5
    assert "one-step fidelity" in dreamgym("sim", "eval", str(train), "--steps", str(held), "--model",
                                           str(tmp_path / "model"), "--limit", "2").stdout  # fmt: skip
    # the same store twice is opened once and shared (LMDB refuses a second open in one process)
    same = dreamgym("sim", "eval", str(train), "--steps", str(train), "--model", str(tmp_path / "model"), "--json",
                    "--held-out", "toy/form:0", "--limit", "1")  # fmt: skip
    assert {json.loads(line)["name"] for line in same.stdout.splitlines()} == set(rows)
    _eval_takes_its_steps_only_from_what_it_is_given(tmp_path, train, held, str(tmp_path / "model"))
    _check_asks_the_store_it_trained_on(tmp_path, train, held, str(tmp_path / "model"))


def _check_asks_the_store_it_trained_on(tmp_path: Path, train: Path, held: Path, model: str) -> None:
    # two optimizer steps answer nothing clean: the build fails the bar, exit 3 (1 is an error's)
    failed = dreamgym("sim", "check", str(train), "--model", model, "--json", check=False)
    assert failed.returncode == 3, failed.stderr
    result = json.loads(failed.stdout)
    # the model's held-out seed 3 is neither asked nor retrieved: the other six episodes, two steps each
    assert result["tasks"] == {
        "toy/form": {"asked": 12, "clean": 0, "unusable": result["tasks"]["toy/form"]["unusable"]}
    }
    assert result["passed"] is False and result["min_clean"] == 0.975
    passed = dreamgym("sim", "check", str(train), "--model", model, "--min-clean", "0", "--every", "1",
                      "--steps-per-task", "3")  # fmt: skip
    assert "toy/form" in passed.stdout and "passed: worst task 0.000" in passed.stderr
    unseen = dreamgym("sim", "check", str(train), "--model", model, "--episodes", str(held), "--json", check=False)
    assert json.loads(unseen.stdout)["tasks"]["toy/form"]["asked"] == 8  # the held store's four episodes
    for argv, says, code in (
        (("--model", model, "--min-clean", "2"), "min_clean must be within [0, 1]", 1),
        (("--model", str(tmp_path / "nope")), "no model directory", 2),
    ):
        result = dreamgym("sim", "check", str(train), *argv, check=False)
        assert result.returncode == code, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr, result.stderr


def _eval_takes_its_steps_only_from_what_it_is_given(tmp_path: Path, train: Path, held: Path, model: str) -> None:
    async def empty() -> None:
        async with open_store(tmp_path / "empty") as store:
            await store.put_task(toy_form.TASK)

    anyio.run(empty)
    for argv, says in (
        ((str(train), "--model", model), "give --steps STORE"),
        (("--model", model, "--steps", str(held)), "give the STORE the simulator retrieves from"),
        ((str(train), "--model", model, "--held-out", str(held)), "the store of steps to predict is --steps"),
        ((str(train), "--model", model, "--steps", str(tmp_path / "empty")), "holds no real steps"),
        ((str(train), "--model", str(tmp_path / "nope"), "--steps", str(held)), "no model directory"),
    ):
        result = dreamgym("sim", "eval", *argv, check=False)
        assert result.returncode == 2, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr, result.stderr


def test_sim_eval_of_a_served_experience_model(tmp_path: Path) -> None:
    """``sim eval --sim-url``: the experience model answers from a real OpenAI-compatible server on 127.0.0.1."""
    train, held = make_stores(tmp_path)
    state = ServerState(chat_reply=lambda body: "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>")
    with openai_server(state) as (url, _):
        out = dreamgym("sim", "eval", str(train), "--steps", str(held), "--model", "served-sim", "--sim-url", url,
                       "--sim-max-new-tokens", "100", "--sim-structured", "sglang", "--json").stdout  # fmt: skip
    lines = out.splitlines()
    rows = {row["name"]: row for row in map(json.loads, lines)}
    assert rows["model"]["n"] == 8 and rows["model"]["failures"] == 0
    # it answered "unchanged, reward 0, not done" to every step: the unchanged baseline's figures exactly
    assert rows["model"]["exact_match"] == rows["unchanged"]["exact_match"] == 1.0
    asked = [r for r in state.requests if r.get("model") == "served-sim"]
    assert len(asked) == 8 and all(r["max_tokens"] == 100 and "regex" in r for r in asked)
    result = dreamgym("sim", "eval", str(train), "--steps", str(held), "--sim-url", url, check=False)
    assert result.returncode == 2 and "--sim-url needs --model NAME" in result.stderr


def test_sim_train_refuses_a_missing_base(tmp_path: Path) -> None:
    train, _ = make_stores(tmp_path)
    result = dreamgym("sim", "train", str(train), "--out", str(tmp_path / "m"), "--base", str(tmp_path / "nope"),
                      check=False)  # fmt: skip
    assert result.returncode == 1 and "local model directory" in result.stderr
    for flag, value, says in (("--device", "tpu", "'cuda:N' or 'mps', not 'tpu'"),
                              ("--dtype", "float8", "'bfloat16', 'float16', not 'float8'"),
                              ("--max-length", "5000", "scratch model's 4096 positions, got 5000"),
                              ("--relabel-ids", "2", "in [0, 1], got 2.0")):  # fmt: skip
        result = dreamgym("sim", "train", str(train), "--out", str(tmp_path / "m"), flag, value, check=False)
        field = flag[2:].replace("-", "_")
        assert result.returncode == 1 and f"SimTrainConfig.{field} must be" in result.stderr, result.stderr
        assert says in result.stderr
    result = dreamgym("sim", "train", str(train), "--out", str(tmp_path / "m"), "--base", "smollm2", "--split",
                      "whitespace", check=False)  # fmt: skip
    assert result.returncode == 2 and "--base smollm2 brings its own" in result.stderr, result.stderr


@pytest.mark.slow
def test_collect_then_mixed_rollout_with_shadow_mode(tmp_path: Path, tiny_sim_dir: Path) -> None:
    store = str(tmp_path / "store")
    common = ("--store", store, "--tasks", "click-button", "--embedder", "hashing-64", "--max-steps", "3")
    out = dreamgym("collect", *common, "--seeds", "0-1", "--group-size", "2").stdout
    assert "2 groups, 4 episodes; real: 4/4 episodes succeeded" in out
    out = dreamgym("rollout", *common, "--seeds", "2-5", "--real-share", "0.5", "--shadow", "--policy", "random",
                   "--sim-model", str(tiny_sim_dir)).stdout  # fmt: skip
    assert "4 groups" in out and "real:" in out and "synthetic:" in out
    stats = json.loads(dreamgym("replay", "stats", store, "--json").stdout)
    assert stats["steps"]["real"] > 0 and stats["steps"]["synthetic"] > 0
