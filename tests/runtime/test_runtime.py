"""The runtime end to end: groups into a real LMDB store, failures, deadlines, cancellation, shadow mode, branching."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import msgspec
import pytest
from runtime_helpers import TASK, Counts, FailingPolicy, ToyBackend, ToyFormEnv, ToyPolicy, open_store, page, simulator

from dreamgym.core import ConfigError, Step, StoreError, observation_hash
from dreamgym.replay import LmdbReplayStore
from dreamgym.runtime import Branch, GroupSpec, Runtime, RuntimeConfig

pytestmark = pytest.mark.anyio


def runtime(store: LmdbReplayStore, counts: Counts | None = None, **options: object) -> Runtime:
    """A runtime over the toy page on both sides."""
    counts = counts or Counts()
    backend = options.pop("backend", None) or ToyBackend()
    delay_s = float(options.pop("delay_s", 0.0))  # type: ignore[arg-type]
    return Runtime(
        policy=options.pop("policy", None) or ToyPolicy(),  # type: ignore[arg-type]
        store=store,
        real_env=lambda: ToyFormEnv(counts, delay_s=delay_s),
        synthetic_env=lambda: simulator(backend, store),  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


async def run_until(scope: anyio.CancelScope, ready: Callable[[], bool], work: Awaitable[object]) -> None:
    """Await ``work``, cancelling ``scope`` as soon as ``ready()`` holds."""

    async def watch() -> None:
        while not ready():
            await anyio.sleep(0.005)
        scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        await work
        tasks.cancel_scope.cancel()


async def stored(store: LmdbReplayStore, episode_id: str) -> list[Step]:
    return sorted(await store.episode_steps(episode_id), key=lambda step: step.step_index)


async def test_groups_of_both_sources_reach_the_store_with_their_provenance(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store, runtime(store) as rt:
        real_group = GroupSpec(task=TASK, size=2, seed=1, source="real")
        real, synthetic = await rt.run_groups([real_group, GroupSpec(task=TASK, size=3, seed=2, source="synthetic")])
        assert (real.source, synthetic.source) == ("real", "synthetic")
        assert (len(real.rollouts), len(synthetic.rollouts)) == (2, 3)
        assert real.consistent and synthetic.consistent and real.rewards == (1.0, 1.0)
        for result in (real, synthetic):
            for rollout in result.rollouts:
                assert await stored(store, rollout.episode.episode_id) == list(rollout.steps)
                assert await store.get_episode(rollout.episode.episode_id) == rollout.episode
                assert {s.source for s in rollout.steps} == {result.source}
                assert {(s.group_id, s.task_id, s.policy_id) for s in rollout.steps} == {
                    (result.group_id, TASK.task_id, "toy-policy")
                }
        assert all(s.seed == 1 for r in real.rollouts for s in r.steps)
        assert all(s.experience_model_id == "toy-model" and s.prompt_template_id for s in synthetic.rollouts[0].steps)
        assert (await store.get_task(TASK.task_id)) == TASK
        counts = (await store.stats()).steps
        assert counts == {"real": 4, "synthetic": 6}
        snapshot = rt.stats.snapshot()
        assert (snapshot.real_steps, snapshot.synthetic_steps) == (4, 6)
        assert (snapshot.episodes, snapshot.success_rate) == (5, 1.0)
        assert snapshot.errors == {} and snapshot.in_flight == 0
        metrics = rt.stats.as_metrics()
        assert metrics["rollout/real_steps"] == 4 and metrics["rollout/synthetic_steps_per_s"] > 0


async def test_a_synthetic_group_resets_once_and_forks_every_episode_from_that_page(tmp_path: Path) -> None:
    backend = ToyBackend()
    async with open_store(tmp_path / "store") as store, runtime(store, backend=backend) as rt:
        [group] = await rt.run_groups([GroupSpec(task=TASK, size=4, seed=0, source="synthetic")])
    first_page_prompts = [call for call in backend.calls if "Action: " not in call[-1].content]
    assert len(first_page_prompts) == 1
    assert {r.steps[0].observation.state for r in group.rollouts} == {page(0).state}
    assert len({r.episode.initial_observation_hash for r in group.rollouts}) == 1 and group.consistent


async def test_a_failing_episode_records_its_error_and_steps_and_the_others_run_on(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store, runtime(store) as rt:
        broken, healthy = await rt.run_groups(
            [
                GroupSpec(task=TASK, size=1, seed=0, source="real", policy=FailingPolicy()),
                GroupSpec(task=TASK, size=3, seed=1, source="real"),
            ]
        )
        [failed] = broken.rollouts
        assert failed.episode.error == "RuntimeError: the policy broke on its second step"
        assert (failed.episode.truncation_reason, failed.episode.num_steps) == ("error", 1)
        assert failed.steps[-1].truncated and failed.steps[-1].truncation_reason == "error"
        assert await store.get_episode(failed.episode.episode_id) == failed.episode
        assert await stored(store, failed.episode.episode_id) == list(failed.steps)
        assert healthy.rewards == (1.0, 1.0, 1.0) and not any(r.episode.error for r in healthy.rollouts)
        assert rt.stats.snapshot().errors == {"RuntimeError": 1}


async def test_an_episode_past_its_deadline_is_cut_and_recorded(tmp_path: Path) -> None:
    config = RuntimeConfig(episode_deadline_s=0.5)
    async with (
        open_store(tmp_path / "store") as store,
        runtime(store, delay_s=0.1, config=config, policy=ToyPolicy(scrolls=50)) as rt,
    ):
        [group] = await rt.run_groups([GroupSpec(task=TASK, size=2, seed=0, source="real")])
        for rollout in group.rollouts:
            assert rollout.episode.truncation_reason == "deadline" and 1 <= rollout.episode.num_steps <= 5
            assert rollout.steps[-1].truncation_reason == "deadline"
            assert await stored(store, rollout.episode.episode_id) == list(rollout.steps)
        assert rt.stats.snapshot().errors == {"deadline": 2}


async def test_the_step_limit_truncates_the_last_step(tmp_path: Path) -> None:
    async with (
        open_store(tmp_path / "store") as store,
        runtime(store, config=RuntimeConfig(max_steps=3), policy=ToyPolicy(scrolls=9)) as rt,
    ):
        [group] = await rt.run_groups([GroupSpec(task=TASK, size=1, seed=0, source="synthetic")])
    [rollout] = group.rollouts
    assert len(rollout.steps) == 3 and rollout.steps[-1].truncation_reason == "step_limit"
    assert rollout.episode.truncation_reason == "step_limit" and rt.stats.snapshot().errors == {}


@pytest.mark.parametrize("cancelled", ["the run", "the runtime"])
async def test_cancelling_a_run_commits_every_finished_step(tmp_path: Path, cancelled: str) -> None:
    counts = Counts()
    config = RuntimeConfig(real_concurrency=4, store_buffer=2)
    groups = [GroupSpec(task=TASK, size=2, seed=n, source="real") for n in range(6)]
    async with open_store(tmp_path / "store") as store:
        rt = runtime(store, counts, delay_s=0.02, config=config, policy=ToyPolicy(scrolls=40))

        # Cancelled once all four episodes have started and some steps finished, however slow the machine;
        # each episode needs 41 steps, so none is finished by then.
        def started() -> bool:
            return counts.resets >= 4 and counts.finished_steps >= 8

        with anyio.fail_after(60):
            if cancelled == "the run":
                async with rt:
                    with anyio.CancelScope() as scope:
                        await run_until(scope, started, rt.run_groups(groups))
            else:  # a scope around the whole runtime, its store-writer task included
                with anyio.CancelScope() as scope:
                    async with rt:
                        await run_until(scope, started, rt.run_groups(groups))
        assert scope.cancelled_caught
    snapshot = rt.stats.snapshot()
    async with open_store(tmp_path / "store") as reopened:
        stats = await reopened.stats()
        assert (stats.steps["real"], stats.steps["synthetic"]) == (counts.finished_steps, 0)
        assert stats.episodes == snapshot.real_episodes == 4  # the 4 that had started, each recorded as cut
        assert snapshot.errors == {"cancelled": 4} and snapshot.in_flight == 0


async def test_shadow_mode_stores_the_prediction_beside_each_real_step(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store, runtime(store) as rt:
        [group] = await rt.run_groups([GroupSpec(task=TASK, size=1, seed=2, shadow=True)])
        [rollout] = group.rollouts
        shadow = await stored(store, rollout.episode.episode_id + "/shadow")
        assert [s.step_index for s in shadow] == [s.step_index for s in rollout.steps] == [0, 1]
        for real, predicted in zip(rollout.steps, shadow, strict=True):
            assert predicted.source == "synthetic" and real.source == "real"
            assert (predicted.observation, predicted.action) == (real.observation, real.action)
            assert (predicted.group_id, predicted.seed, predicted.task_id) == (real.group_id, real.seed, real.task_id)
            assert predicted.experience_model_id == "toy-model" and predicted.policy_tokens is None
        assert shadow[0].next_observation.state == rollout.steps[0].next_observation.state  # the model was right
        assert (shadow[1].reward, shadow[1].terminated) == (1.0, True)
        assert (await store.stats()).steps == {"real": 2, "synthetic": 2}
        snapshot = rt.stats.snapshot()
        assert snapshot.shadow_steps == 2 and snapshot.synthetic_steps == 0
        # one deciding step (the Submit that paid), right, and whose answer it was
        assert snapshot.shadow_decisions == {TASK.task_id: (True,)}
        assert snapshot.shadow_models == {TASK.task_id: ("toy-model",)}
        assert snapshot.decisions_of("toy-model") == {TASK.task_id: (True,)} and snapshot.decisions_of("other") == {}


async def test_a_shadow_prediction_retrieves_neither_its_episode_nor_its_same_seed_siblings(tmp_path: Path) -> None:
    from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, SimulatedEnv, TemplateConfig

    backend = ToyBackend()
    template = TemplateConfig(history=4, neighbours=4)
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=template))
    async with open_store(tmp_path / "store") as store, runtime(store) as earlier:
        # real episodes of seeds 0 and 2 are already in the store; then a shadowed group of seed 2 runs
        await earlier.run_groups([GroupSpec(task=TASK, size=2, seed=seed, source="real") for seed in (0, 2)])
        await store.flush()
        grounded = Runtime(
            policy=ToyPolicy(), store=store, real_env=lambda: ToyFormEnv(),
            synthetic_env=lambda: SimulatedEnv(model, store=store),
            config=RuntimeConfig(real_concurrency=1),
        )  # fmt: skip
        async with grounded:
            await grounded.run_groups([GroupSpec(task=TASK, size=2, seed=2, source="real", shadow=True)])
    sections = [p.split("Similar real transitions", 1)[1].split("Current state:")[0] for p in backend.step_prompts]
    assert len(sections) == 4 and all(sections)  # every shadowed step retrieved neighbours...
    goals = [line for section in sections for line in section.splitlines() if " goal: " in line]
    assert goals and all(page(0).goal in line for line in goals)  # ...of seed 0 only, never of seed 2


async def test_branching_continues_on_the_simulator_from_the_recorded_real_state(tmp_path: Path) -> None:
    backend, policy = ToyBackend(), ToyPolicy()
    async with open_store(tmp_path / "store") as store, runtime(store, backend=backend, policy=policy) as rt:
        [real] = await rt.run_groups([GroupSpec(task=TASK, size=1, seed=3, source="real")])
        recorded = real.rollouts[0]
        policy.histories.clear()
        branch = Branch(episode_id=recorded.episode.episode_id, prefix_steps=1)
        [branched] = await rt.run_groups([GroupSpec(task=TASK, size=2, branch=branch)])
        prefix = recorded.steps[0]
        assert branched.source == "synthetic" and branched.consistent
        for rollout in branched.rollouts:
            first = rollout.steps[0]
            assert first.observation == prefix.next_observation
            assert (first.step_index, first.source, first.task_id, first.seed) == (1, "synthetic", TASK.task_id, 3)
            assert rollout.episode.episode_id.startswith(recorded.episode.episode_id + "/branch1/")
            assert rollout.episode.initial_observation_hash == observation_hash(prefix.next_observation)
            assert await stored(store, rollout.episode.episode_id) == list(rollout.steps)
        assert all(history[:1] == [prefix] for history in policy.histories)  # the policy read the real prefix
        prompt = backend.step_prompts[-1]
        assert "History (oldest first):\nstep 1: type [e2] [Dee] [0]" in prompt
        assert (await store.stats()).steps == {"real": 2, "synthetic": 2}


async def test_a_branch_that_cannot_continue_is_refused_before_anything_runs(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store, runtime(store) as rt:
        [real] = await rt.run_groups([GroupSpec(task=TASK, size=1, seed=0, source="real")])
        episode_id = real.rollouts[0].episode.episode_id
        with pytest.raises(ConfigError, match="nothing to continue"):
            await rt.run_groups([GroupSpec(task=TASK, branch=Branch(episode_id=episode_id, prefix_steps=2))])
        with pytest.raises(ConfigError, match="fewer than"):
            await rt.run_groups([GroupSpec(task=TASK, branch=Branch(episode_id="missing", prefix_steps=1))])
        assert rt.stats.snapshot().episodes == 1


async def test_a_runtime_without_the_needed_side_refuses_the_group(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        async with Runtime(policy=ToyPolicy(), store=store, real_env=ToyFormEnv) as rt:
            with pytest.raises(ConfigError, match="synthetic_env"):
                await rt.run_groups([GroupSpec(task=TASK, source="synthetic")])
            with pytest.raises(ConfigError, match="synthetic_env"):
                await rt.run_groups([GroupSpec(task=TASK, shadow=True)])
            [group] = await rt.run_groups([GroupSpec(task=TASK, seed=0)])  # no chooser: the only side there is
            assert group.source == "real"
        with pytest.raises(ConfigError, match="not open"):
            await rt.run_groups([GroupSpec(task=TASK, seed=0)])


async def test_records_the_store_refuses_fail_the_run_after_the_rest_is_stored(tmp_path: Path) -> None:
    unstorable = msgspec.structs.replace(TASK, task_id="toy/\0form")  # the store refuses NUL in ids
    async with open_store(tmp_path / "store") as store, runtime(store) as rt:
        with pytest.raises(StoreError, match="refused 1 write of this run: .*NUL"):
            await rt.run_groups(
                [GroupSpec(task=unstorable, seed=0, source="real"), GroupSpec(task=TASK, seed=1, source="real")]
            )
        assert (await store.stats()).steps["real"] == 2 and (await store.stats()).episodes == 1


STALLER = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=16)
txn = env.begin(write=True)  # LMDB's one write lock, held by another process: the store's writes stall
print("holding", flush=True)
sys.stdin.readline()
txn.abort()
"""


async def test_a_stalled_store_fails_the_run_instead_of_dropping_records_quietly(tmp_path: Path) -> None:
    import sys

    counts = Counts()
    config = RuntimeConfig(real_concurrency=2, store_buffer=1, commit_batch=1, drain_timeout_s=1.0)
    groups = [GroupSpec(task=TASK, size=2, seed=n, source="real") for n in range(4)]
    async with open_store(tmp_path / "store") as store:
        await store.put_task(TASK)
        async with await anyio.open_process([sys.executable, "-c", STALLER, str(tmp_path / "store")]) as staller:
            assert staller.stdin is not None and staller.stdout is not None
            with anyio.fail_after(60):
                assert b"holding" in await staller.stdout.receive()
            rt = runtime(store, counts, config=config)
            async with rt:
                with pytest.raises(StoreError, match=r"stopped taking writes .* steps of this run were not stored"):
                    await rt.run_groups(groups)
                await staller.stdin.send(b"go\n")  # the store's write thread is blocked in LMDB until then
        assert rt.stats.snapshot().errors.get("store:timeout", 0) >= 1
        assert counts.resets < 8  # the run failed at the first refusal: not every group waited out the timeout
    async with open_store(tmp_path / "store") as reopened:
        stats = await reopened.stats()
        assert stats.steps.get("real", 0) < counts.finished_steps  # some never reached the store...
        for seq in range(1, stats.last_seq + 1):  # ...and what did is whole: an episode record has all its steps
            step = await reopened.get_step(seq)
            episode = await reopened.get_episode(step.episode_id)
            if episode is not None:
                assert len(await reopened.episode_steps(step.episode_id)) == episode.num_steps
