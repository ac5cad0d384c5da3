"""``dreamgym validate`` end to end: a real trained model, real stores, the report files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import dreamgym
from openai_server import ServerState, openai_server
from validate_helpers import fill_store, open_store

from dreamgym.bridge import BrowserPool
from dreamgym.simulator import TemplateConfig, answer_pattern
from dreamgym.validate import RUBRIC


def held_out_store(path: Path) -> Path:
    async def fill() -> None:
        async with open_store(path) as store:
            await fill_store(store, range(10, 12))

    anyio.run(fill)
    return path


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_validate_a_tiny_trained_model_with_ablations_and_open_loop(tmp_path: Path, toy_model_dir: Path) -> None:
    held = held_out_store(tmp_path / "held")
    out = dreamgym("validate", "--store", str(held), "--model", str(toy_model_dir), "--open-loop", "2", "--ablations",
                   "--limit", "5", "--max-new-tokens", "96", "--out", str(tmp_path / "report")).stdout  # fmt: skip
    assert "one step on 5 real steps (2 episodes, 1 tasks)" in out and "report.html" in out
    data = json.loads((tmp_path / "report" / "validation.json").read_text())
    assert data["template_id"] == "experience/v1:h1:k2:direct:diff"
    assert set(data["one_step"]) == {"model", "copy_top_retrieved", "unchanged"}
    assert all(row["n"] == 5 for row in data["one_step"].values())
    assert list(data["ablations"]) == ["full", "no_retrieval", "no_history", "no_reasoning"]
    assert data["ablations"]["no_reasoning"] == {"n/a": "the model was trained without reasoning"}
    assert data["ablations"]["no_retrieval"]["n"] == 5
    assert [p["n"] for p in data["open_loop"]["model"]] == [2, 2]
    assert data["action_errors"]["model"]["n"] == 1
    # Retrieval read the model's training store, with the metadata's held-out pairs kept out.
    assert data["settings"]["exclude_task_seeds"] == [["toy/name", 10], ["toy/name", 11]]
    assert data["settings"]["neighbours"] == 2
    assert (tmp_path / "report" / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_validate_explains_a_missing_store(tmp_path: Path) -> None:
    result = dreamgym("validate", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "x"), check=False)
    assert result.returncode == 1 and "--store is required" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_validate_only_the_held_out_pairs_given(tmp_path: Path, toy_model_dir: Path) -> None:
    held = held_out_store(tmp_path / "held")
    dreamgym("validate", "--store", str(held), "--model", str(toy_model_dir), "--held-out", "toy/name:11",
             "--limit", "3", "--out", str(tmp_path / "r"))  # fmt: skip
    data = json.loads((tmp_path / "r" / "validation.json").read_text())
    assert data["steps"] == 3 and data["episodes"] == 1  # the first of seed 11's episodes fits the limit
    assert all(case["seed"] == 11 for case in data["worst_cases"])


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(900)
async def test_validate_on_miniwob_with_a_model_trained_on_it(tmp_path: Path, pool: BrowserPool) -> None:
    """Collect real MiniWoB++ episodes, train an experience model on them, validate it on other seeds."""
    train, held = str(tmp_path / "train"), str(tmp_path / "held")
    common = ["--tasks", "click-button,enter-text", "--embedder", "hashing-64", "--max-steps", "3"]
    common += ["--policy", "random"]
    model, report = str(tmp_path / "model"), str(tmp_path / "report")
    commands = [
        ["collect", "--store", train, *common, "--seeds", "0-3", "--group-size", "2"],
        ["collect", "--store", held, *common, "--seeds", "100"],
        ["sim", "train", train, "--out", model, "--max-steps", "4"],
        ["validate", "--store", held, "--retrieval", train, "--model", model, "--open-loop", "2", "--ablations",
         "--max-new-tokens", "48", "--out", report],
    ]  # fmt: skip
    for command in commands:
        out = (await anyio.to_thread.run_sync(lambda command=command: dreamgym(*command))).stdout
    assert "one step on" in out and "2 tasks" in out
    data = json.loads((tmp_path / "report" / "validation.json").read_text())
    assert data["tasks"] == 2 and set(data["by_task"]["model"]) == {"miniwob/click-button", "miniwob/enter-text"}
    assert data["open_loop"]["model"][0]["n"] == data["episodes"] == 2
    problems: list[str] = []
    async with pool.context() as lease:
        page = await lease.context.new_page()
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        await page.goto((tmp_path / "report" / "report.html").as_uri())
        assert await page.locator("svg").count() >= 9
    assert problems == []

    live = ["validate", "--live", "--store", str(tmp_path / "live"), "--model", model, "--retrieval", train,
            "--tasks", "click-button", "--seeds", "200-201", "--episodes", "1", "--policy", "demonstrator",
            "--max-steps", "3", "--max-new-tokens", "48", "--out", str(tmp_path / "live-report")]  # fmt: skip
    out = (await anyio.to_thread.run_sync(lambda: dreamgym(*live))).stdout  # MiniWoB++ live: seeds played now
    assert "live: 2 groups, 2 episodes" in out
    played = json.loads((tmp_path / "live-report" / "validation.json").read_text())
    assert (played["tasks"], played["episodes"]) == (1, 2)
    excluded = played["settings"]["exclude_task_seeds"]
    assert ["miniwob/click-button", 200] in excluded and ["miniwob/click-button", 201] in excluded
    assert ["miniwob/click-button", None] not in excluded  # its other seeds stay retrievable


def test_validate_a_served_experience_model_with_its_server_settings(tmp_path: Path) -> None:
    held = held_out_store(tmp_path / "held")
    rubric = json.dumps(dict.fromkeys(RUBRIC, 2))

    def reply(body: dict[str, Any]) -> str:
        return rubric if body["model"] == "judge" else "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"

    state = ServerState(chat_reply=reply)
    with openai_server(state) as (url, _):
        out = dreamgym("validate", "--store", str(held), "--model", "served-sim", "--sim-url", url,
                       "--sim-max-new-tokens", "200", "--sim-stop", "</done>", "--sim-timeout", "30", "--limit", "3",
                       "--sim-structured", "vllm",
                       "--judge-url", url, "--judge-model", "judge", "--judge-max-new-tokens", "64",
                       "--judge-episodes", "1", "--out", str(tmp_path / "report")).stdout  # fmt: skip
    assert "one step on 3 real steps" in out
    data = json.loads((tmp_path / "report" / "validation.json").read_text())
    assert data["one_step"]["model"]["n"] == 3 and data["template_id"] == TemplateConfig().template_id  # default
    asked = [r for r in state.requests if r.get("model") == "served-sim"]
    assert len(asked) == 3 and all(r["max_tokens"] == 200 and r["stop"] == ["</done>"] for r in asked)
    pattern = answer_pattern(TemplateConfig())  # vLLM's structured output keeps the answer to the template's form
    assert all(r["structured_outputs"] == {"regex": pattern} for r in asked)
    assert re.fullmatch(pattern, reply({"model": "served-sim"}))  # what the scripted server answers is of it
    judged = [r for r in state.requests if r.get("model") == "judge"]
    assert len(judged) == 1 and judged[0]["max_tokens"] == 64
    assert data["judge"]["scores"] == dict.fromkeys(RUBRIC, 2.0)
    refused = dreamgym("validate", "--store", str(held), "--sim-url", url, "--out", str(tmp_path / "x"), check=False)
    assert refused.returncode == 2 and "--sim-url needs --model NAME" in refused.stderr
