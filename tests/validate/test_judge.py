"""The LLM judge's rubric, through the real local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import ServerState
from validate_helpers import INVENTED, OracleModel, WrongModel, all_steps, fill_store, open_store

from dreamgym.core import ModelOutputError
from dreamgym.simulator import OpenAIBackend
from dreamgym.validate import RUBRIC, ValidationConfig, parse_rubric, validate

pytestmark = pytest.mark.anyio


def strict_judge(body: dict[str, Any]) -> str:
    """Scores hallucination 0 when the simulator's changes add an invented element, else 2."""
    prompt = body["messages"][-1]["content"]
    invented = any(line == "+ " + INVENTED for line in prompt.splitlines())
    return json.dumps({"causal_consistency": 2, "diversity": 1, "informativeness": 2,
                       "hallucination": 0 if invented else 2, "failure_feedback": 1})  # fmt: skip


@pytest.mark.parametrize(("model", "hallucination"), [(OracleModel, 2.0), (WrongModel, 0.0)])
async def test_the_judge_scores_each_episode_and_counts_unusable_answers(
    tmp_path: Path, server: tuple[str, ServerState], model: type[OracleModel], hallucination: float
) -> None:
    url, state = server
    state.chat_replies = ["I would rather not say."]
    state.chat_reply = strict_judge
    steps = all_steps(range(10, 13))
    judge = OpenAIBackend(model="judge", base_url=url, max_retries=0)
    async with open_store(tmp_path / "store") as store:
        await fill_store(store, range(10, 13))
        report = await validate(model(steps), steps, store=store, config=ValidationConfig(judge_episodes=4),
                                judge=judge)  # fmt: skip
    await judge.aclose()
    assert report.judge is not None
    assert (report.judge.n, report.judge.unusable) == (3, 1)
    assert report.judge.scores == {"causal_consistency": 2.0, "diversity": 1.0, "informativeness": 2.0,
                                   "hallucination": hallucination, "failure_feedback": 1.0}  # fmt: skip
    assert report.judge.judge_id.startswith("openai:judge@127.0.0.1")
    prompts = [r["messages"][-1]["content"] for r in state.requests if "messages" in r]
    assert len(prompts) == 4 and all(p.startswith("Task: Enter") and "real changes" in p for p in prompts)
    assert report.as_metrics()["validate/judge/diversity"] == 1.0


def test_parse_rubric_takes_the_first_json_object_and_refuses_bad_scores() -> None:
    scores = dict.fromkeys(RUBRIC, 1)
    assert parse_rubric("Here: " + json.dumps(scores) + " done") == scores
    with pytest.raises(ModelOutputError, match="no JSON"):
        parse_rubric("all good")
    with pytest.raises(ModelOutputError, match="hallucination"):
        parse_rubric(json.dumps({**scores, "hallucination": 3}))
    with pytest.raises(ModelOutputError, match="diversity"):
        parse_rubric(json.dumps({k: v for k, v in scores.items() if k != "diversity"}))
