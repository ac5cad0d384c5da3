"""The experience model (retries, cache) and SimulatedEnv (rules, truncation, starts, leakage)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import toy_form
from sim_helpers import TOY_TEMPLATE, ScriptedBackend, fill_toy_store, open_store

from dreamgym.agents import RandomExplorer
from dreamgym.core import (
    ChatMessage,
    ExperienceQuery,
    ModelOutputError,
    Sampling,
    check_environment,
    invalid_action,
    parse_action,
)
from dreamgym.runtime import run_episode
from dreamgym.simulator import (
    ExperienceModelConfig,
    LLMExperienceModel,
    LocalBackend,
    SimulatedEnv,
    SimulatorConfig,
    answer_text,
)

pytestmark = pytest.mark.anyio

TYPE_ANSWER = "<diff>\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>\n<reward>0</reward>\n<done>no</done>"
SUBMIT_ANSWER = "<diff>\n</diff>\n<reward>1</reward>\n<done>yes</done>"


def by_action(messages: Sequence[ChatMessage]) -> str:
    """Answer like the toy page would, reading the action from the prompt."""
    action = messages[-1].content.rsplit("Action: ", 1)[-1]
    if action.startswith("type"):
        name = action.split("[")[2].rstrip("] ")
        return f"<diff>\n- [e2] textbox\n+ [e2] textbox: {name}\n</diff>\n<reward>0</reward>\n<done>no</done>"
    if action.startswith("click"):
        return SUBMIT_ANSWER
    return "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"


def model(backend: ScriptedBackend, **config: object) -> LLMExperienceModel:
    return LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE, **config))  # type: ignore[arg-type]


def query(action: str = "type [e2] [Ana] [0]") -> ExperienceQuery:
    return ExperienceQuery(task=toy_form.TASK, history=(), observation=toy_form.page(0), action=parse_action(action))


async def test_prediction_rebuilds_the_next_page_and_names_model_and_template() -> None:
    prediction = await model(ScriptedBackend([TYPE_ANSWER])).predict(query())
    assert prediction.observation.state == toy_form.page(0, "Ana").state
    assert prediction.observation.goal == toy_form.goal(0)
    assert (prediction.reward, prediction.terminated) == (0.0, False)
    assert (prediction.model_id, prediction.template_id) == ("scripted", TOY_TEMPLATE.template_id)


async def test_malformed_answers_are_retried_with_new_sampling_then_fail_with_reasons() -> None:
    backend = ScriptedBackend(["garbage", "<diff></diff><reward>0</reward>", TYPE_ANSWER])
    m = model(backend)
    assert (await m.predict(query())).observation.state == toy_form.page(0, "Ana").state
    temperatures = [sampling.temperature for _, sampling in backend.calls]
    assert temperatures == [0.0, 0.7, 0.7] and backend.calls[1][1].seed != backend.calls[2][1].seed
    assert (m.stats.malformed_answers, m.stats.failed_predictions) == (2, 0)
    with pytest.raises(ModelOutputError, match="attempt 1: .*neither.*attempt 2"):
        await model(ScriptedBackend(["nope"]), max_attempts=2).predict(query())


async def test_rule_answers_invalid_actions_and_missing_elements_without_the_model() -> None:
    backend = ScriptedBackend(by_action)
    env = SimulatedEnv(model(backend))
    env.start_from(toy_form.TASK, toy_form.page(0))
    bad = await env.step(invalid_action("fly away", "unknown action 'fly'"))
    missing = await env.step(parse_action("click [e42]"))
    assert bad.observation.last_action_error == "unknown action 'fly'"
    assert "no element [e42]" in missing.observation.last_action_error
    assert bad.reward == missing.reward == 0.0 and not missing.terminated
    assert backend.calls == [] and env.stats.rule_steps == 2


async def test_an_episode_runs_to_its_predicted_end() -> None:
    env = SimulatedEnv(model(ScriptedBackend(by_action)))
    env.start_from(toy_form.TASK, toy_form.page(0))
    typed = await env.step(parse_action("type [e2] [Ana] [0]"))
    done = await env.step(parse_action('click [e3] "Submit"'))
    assert typed.info["experience_model_id"] == "scripted"
    assert typed.info["prompt_template_id"] == TOY_TEMPLATE.template_id
    assert (done.reward, done.terminated, done.observation.state) == (1.0, True, toy_form.page(0, "Ana").state)
    after = await env.step(parse_action('click [e3] "Submit"'))
    assert "episode is over" in after.observation.last_action_error


async def test_stop_always_ends_the_episode() -> None:
    env = SimulatedEnv(model(ScriptedBackend(["<diff></diff><reward>0</reward><done>no</done>"])))
    env.start_from(toy_form.TASK, toy_form.page(0))
    assert (await env.step(parse_action("stop [Ana]"))).terminated


async def test_unusable_model_output_truncates_the_episode_and_counts_it() -> None:
    backend = ScriptedBackend(["not an answer"])
    env = SimulatedEnv(model(backend, max_attempts=2))
    env.start_from(toy_form.TASK, toy_form.page(0))
    result = await env.step(parse_action("type [e2] [Ana] [0]"))
    assert result.truncated and result.truncation_reason == "model_output" and result.reward == 0.0
    assert "gave no usable answer in 2 attempts" in result.info["error"]
    backend.fail = True
    env.start_from(toy_form.TASK, toy_form.page(0))
    down = await env.step(parse_action("type [e2] [Ana] [0]"))
    assert down.truncation_reason == "backend"
    assert (env.stats.truncated_model_output, env.stats.truncated_backend) == (1, 1)


async def test_step_limit_truncates(tmp_path: Path) -> None:
    env = SimulatedEnv(model(ScriptedBackend(by_action)), config=SimulatorConfig(max_steps=2))
    env.start_from(toy_form.TASK, toy_form.page(0))
    await env.step(parse_action("type [e2] [Bo] [0]"))
    last = await env.step(parse_action("hover [e3]"))
    assert last.truncated and last.truncation_reason == "step_limit"


async def test_reset_starts_from_the_real_first_page_or_asks_the_model(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(3))
        backend = ScriptedBackend(["<state>\n[e1] generic: a page the model wrote\n</state>"])
        env = SimulatedEnv(model(backend), store=store)
        assert await env.reset(toy_form.TASK, seed=1) == toy_form.page(1)
        assert (await env.reset(toy_form.TASK, seed=77)).state in {toy_form.page(s).state for s in range(3)}
        other = toy_form.TASK.__class__(task_id="toy/unseen", instruction="Do something new.", site="toy")
        written = await env.reset(other, seed=0)
        assert written.state == "[e1] generic: a page the model wrote"
        assert (env.stats.real_starts, env.stats.predicted_starts) == (2, 1)


async def test_retrieval_follows_the_leakage_rule(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        backend = ScriptedBackend(by_action)
        held_out = [("toy/form", 1), ("toy/form", 2)]
        config = SimulatorConfig(exclude_episodes=("toy-3-Dee",), exclude_task_seeds=tuple(held_out))
        env = SimulatedEnv(model(backend), store=store, config=config)
        await env.reset(toy_form.TASK, seed=0)
        result = await env.step(parse_action("type [e2] [Ana] [0]"))
        seen = await store.get_steps(result.info["neighbours"])
        assert seen and all((s.task_id, s.seed) not in held_out and s.episode_id != "toy-3-Dee" for s in seen)
        prompt = backend.calls[0][0][-1].content
        assert toy_form.goal(1) not in prompt and toy_form.goal(2) not in prompt


async def test_scripted_simulator_passes_check_environment(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(2))
        await check_environment(SimulatedEnv(model(ScriptedBackend(by_action)), store=store), toy_form.TASK)


async def test_tiny_local_model_passes_check_environment(tmp_path: Path, tiny_sim_dir: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(2))
        m = LLMExperienceModel(LocalBackend.load(tiny_sim_dir), config=ExperienceModelConfig(template=TOY_TEMPLATE))
        await check_environment(SimulatedEnv(m, store=store), toy_form.TASK)


async def test_cached_run_replays_byte_identical_trajectories(tmp_path: Path, tiny_sim_dir: Path) -> None:
    hot = ExperienceModelConfig(template=TOY_TEMPLATE, sampling=Sampling(temperature=1.0, max_new_tokens=48, seed=5))
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(3))
        runs = []
        for _ in range(2):
            m = LLMExperienceModel(LocalBackend.load(tiny_sim_dir), config=hot, store=store)
            env = SimulatedEnv(m, store=store, config=SimulatorConfig(max_steps=4))
            steps, _ = await run_episode(env, RandomExplorer(3), toy_form.TASK, seed=1, max_steps=4)
            runs.append((steps, m.stats))
    (first, cold), (second, warm) = runs
    strip = [(s.observation, s.action, s.next_observation, s.reward, s.terminated, s.truncation_reason)
             for s in first]  # fmt: skip
    assert strip == [(s.observation, s.action, s.next_observation, s.reward, s.terminated, s.truncation_reason)
                     for s in second]  # fmt: skip
    assert cold.calls > 0 and cold.cached_calls == 0
    assert warm.cached_calls == warm.calls == cold.calls
    assert all(s.source == "synthetic" and s.experience_model_id.startswith("local:") for s in second)


def test_answer_text_of_a_scripted_reply_matches_the_template() -> None:
    step = toy_form.episode(0, "Ana")[0]
    assert answer_text(TOY_TEMPLATE, observation=step.observation, next_observation=step.next_observation,
                       reward=0.0, done=False) == TYPE_ANSWER  # fmt: skip


async def test_branching_start_keeps_the_real_prefix_as_history() -> None:
    backend = ScriptedBackend(by_action)
    env = SimulatedEnv(model(backend), config=SimulatorConfig(max_steps=2))
    typed = toy_form.episode(0, "Ana")[0]
    env.start_from(toy_form.TASK, typed.next_observation, history=[(typed.observation, typed.action)])
    result = await env.step(parse_action("hover [e3]"))
    assert "step 1: type [e2] [Ana] [0]" in backend.calls[0][0][-1].content
    assert result.truncated and result.truncation_reason == "step_limit"  # the prefix counts toward the limit


async def test_predict_step_leaves_the_running_episode_alone() -> None:
    env = SimulatedEnv(model(ScriptedBackend(by_action)))
    env.start_from(toy_form.TASK, toy_form.page(0))
    shadow = await env.predict_step(toy_form.TASK, [], toy_form.page(0), parse_action("type [e2] [Bo] [0]"))
    assert shadow.observation.state == toy_form.page(0, "Bo").state
    real = await env.step(parse_action("type [e2] [Ana] [0]"))
    assert real.observation.state == toy_form.page(0, "Ana").state


async def test_real_start_pages_leave_out_held_out_pairs(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        open_env = SimulatedEnv(model(ScriptedBackend(by_action)), store=store)
        assert (await open_env.reset(toy_form.TASK, seed=1)).goal == toy_form.goal(1)  # its own recorded page
        held = SimulatorConfig(exclude_task_seeds=(("toy/form", 1),))
        env = SimulatedEnv(model(ScriptedBackend(by_action)), store=store, config=held)
        for seed in range(6):
            first = await env.reset(toy_form.TASK, seed=seed)
            assert first.goal != toy_form.goal(1), f"seed {seed} started on the held-out seed's page"
        assert env.stats.real_starts == 6


async def test_a_wholly_held_out_task_has_no_real_start_pages(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(3))
        first_page = f"<state>\n{toy_form.page(7).state}\n</state>"
        backend = ScriptedBackend([first_page])
        config = SimulatorConfig(exclude_task_seeds=(("toy/form", None),))
        env = SimulatedEnv(model(backend), store=store, config=config)
        await env.reset(toy_form.TASK, seed=0)
        assert (env.stats.real_starts, env.stats.predicted_starts) == (0, 1)  # the model wrote it


async def test_a_prediction_with_held_out_pairs_retrieves_none_of_them(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        await fill_toy_store(store, range(4))
        backend = ScriptedBackend(by_action)
        env = SimulatedEnv(model(backend), store=store)
        own = (toy_form.TASK.task_id, 2)
        shadow = await env.predict_step(
            toy_form.TASK, [], toy_form.page(2), parse_action("type [e2] [Cyd] [0]"), seed=2, exclude_task_seeds=(own,)
        )
        seen = await store.get_steps(shadow.info["neighbours"])
        assert seen and all((s.task_id, s.seed) != own for s in seen)
