"""The trainer with a tiny real policy on the toy form: each mode, masking, logprobs, drops, sim2real, resume."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
import torch
from helpers import tensorboard_events
from runtime_helpers import Counts, ToyBackend, ToyFormEnv, ToyPolicy, open_store, page, simulator

from dreamgym.agents import LocalPolicy, LocalPolicyConfig
from dreamgym.core import ConfigError, Episode, Observation, Step, Task, decode_record
from dreamgym.runtime import RuntimeConfig
from dreamgym.trainer import Sides, TrainConfig, Trainer, latest_checkpoint

pytestmark = pytest.mark.timeout(180)

TASK = Task(task_id="toy/form", instruction='Enter "Ana" and press Submit.', site="toy")
"""The toy form; the simulator's first page shows this instruction as its goal (a real page, its seed's)."""
TRAIN_SEEDS = (0, 1, 2, 3)
EVAL_SEEDS = (100, 101)


class DriftingFormEnv(ToyFormEnv):
    """A live site that does not reset: every reset shows a visit counter one higher."""

    visits = 0

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        await super().reset(task, seed=seed)
        DriftingFormEnv.visits += 1
        first = page(seed)
        return Observation(state=first.state + f"\n[e9] generic: visit {self.visits}", goal=first.goal)


def make_policy(toy_chat: tuple[Any, Any], **settings: Any) -> LocalPolicy:
    model, tokenizer = toy_chat
    config = LocalPolicyConfig(**{"mode": "index", "temperature": 1.0, "seed": 0, **settings})
    return LocalPolicy(copy.deepcopy(model), tokenizer, config=config)


def sides_opener(
    root: Path,
    *,
    real: Callable[[], Any] | None = None,
    evaluation: bool = False,
    backend: Callable[[], ToyBackend] = ToyBackend,
) -> Callable[[anyio.CapacityLimiter], Any]:
    counts = Counts()
    make_backend = backend

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with open_store(root / "store") as store, open_store(root / "eval-store") as eval_store:
            backend = make_backend()
            yield Sides(
                store=store,
                real_env=real or (lambda: ToyFormEnv(counts)),
                synthetic_env=lambda: simulator(backend),
                eval_store=eval_store if evaluation else None,
                runtime_config=RuntimeConfig(max_steps=4, real_concurrency=2),
            )

    return open_sides


def make_trainer(toy_chat: tuple[Any, Any], root: Path, **settings: Any) -> Trainer:
    opener = settings.pop("open_sides", None)
    evaluation = settings.pop("evaluation", False)
    config = TrainConfig(
        output_dir=root / "run",
        updates=settings.pop("updates", 1),
        group_size=settings.pop("group_size", 4),
        groups_per_update=settings.pop("groups_per_update", 2),
        learning_rate=settings.pop("learning_rate", 1e-3),
        report_to=settings.pop("report_to", ()),
        **settings,
    )
    return Trainer(
        config,
        policy=make_policy(toy_chat),
        tasks=[TASK],
        open_sides=opener or sides_opener(root, evaluation=evaluation),
        train_seeds=TRAIN_SEEDS,
        eval_seeds=EVAL_SEEDS if evaluation else (),
    )


async def stored(path: Path) -> tuple[list[Episode], list[Step]]:
    async with open_store(path) as store:
        episodes = [decode_record(data, Episode) for _, data in store.iter_records("episodes")]
        steps = [decode_record(data, Step) for _, data in store.iter_records("steps")]
    return episodes, steps


def test_config_refuses_what_cannot_train() -> None:
    out = Path("unused")
    with pytest.raises(ConfigError, match="group of one learns nothing"):
        TrainConfig(mode="synthetic", updates=1, group_size=1, output_dir=out)
    with pytest.raises(ConfigError, match="switch_at"):
        TrainConfig(mode="sim2real", updates=4, output_dir=out)
    with pytest.raises(ConfigError, match="mode must be one of"):
        TrainConfig(mode="ppo", updates=4, output_dir=out)  # type: ignore[arg-type]
    mixed = TrainConfig(mode="mixed", updates=30, real_share_schedule=((0, 0.1), (20, 0.5)), output_dir=out)
    assert [mixed.real_share_at(u) for u in (0, 19, 20, 29)] == [0.1, 0.1, 0.5, 0.5]
    sim2real = TrainConfig(mode="sim2real", updates=10, switch_at=7, output_dir=out)
    assert [sim2real.real_share_at(u) for u in (0, 6, 7, 9)] == [0.0, 0.0, 1.0, 1.0]


def test_only_a_token_recording_policy_trains(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    config = TrainConfig(mode="synthetic", updates=1, output_dir=tmp_path)
    with pytest.raises(ConfigError, match="only a policy that returns token records can be trained"):
        Trainer(config, policy=ToyPolicy(), tasks=[TASK], open_sides=sides_opener(tmp_path), train_seeds=[0])
    model, tokenizer = toy_chat
    chooser = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="choose", temperature=1.0))
    with pytest.raises(ConfigError, match="is a chooser"):
        Trainer(config, policy=chooser, tasks=[TASK], open_sides=sides_opener(tmp_path), train_seeds=[0])
    greedy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=0.0))
    with pytest.raises(ConfigError, match="greedy policy makes every episode of a group the same"):
        Trainer(config, policy=greedy, tasks=[TASK], open_sides=sides_opener(tmp_path), train_seeds=[0])
    policy = make_policy(toy_chat)
    with pytest.raises(ConfigError, match="held out"):
        Trainer(config, policy=policy, tasks=[TASK], open_sides=sides_opener(tmp_path), train_seeds=[0], eval_seeds=[0])


def trl_logprobs(trainer: Trainer, rollout: dict[str, list[Any]]) -> tuple[torch.Tensor, torch.Tensor]:
    """What TRL computes for the rollout (padded as TRL pads it), under the weights the rollout saw."""
    from trl.trainer.utils import pad

    grpo = trainer.grpo
    pad_id = trainer.policy.tokenizer.pad_token_id or 0
    prompts = pad([torch.tensor(p) for p in rollout["prompt_ids"]], padding_value=pad_id, padding_side="left")
    prompt_mask = pad([torch.ones(len(p), dtype=torch.long) for p in rollout["prompt_ids"]], padding_side="left")
    completions = pad([torch.tensor(c) for c in rollout["completion_ids"]], padding_value=pad_id)
    completion_mask = pad([torch.ones(len(c), dtype=torch.long) for c in rollout["completion_ids"]])
    ids = torch.cat([prompts, completions], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    with torch.no_grad(), grpo.model.disable_adapter():  # LoRA starts at zero: the weights before the update
        logps, _, _ = grpo._get_per_token_logps_and_entropies(grpo.model, ids, attention, completions.size(1), 8)
    recorded = pad([torch.tensor(lp) for lp in rollout["logprobs"]], padding_value=0.0)
    mask = pad([torch.tensor(m) for m in rollout["env_mask"]], padding_value=0)
    return (logps - recorded).abs() * mask, mask


def test_synthetic_update_trains_on_policy_tokens_only(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    trainer = make_trainer(toy_chat, tmp_path, mode="synthetic", group_size=4)
    before = {name: p.detach().clone() for name, p in trainer.policy.model.named_parameters()}
    result = trainer.train()

    state = result.state
    assert (state.update, state.synthetic_groups, state.real_groups, state.real_steps) == (1, 2, 0, 0)
    assert state.synthetic_steps > 0 and state.dropped_groups == 0
    # the LoRA adapters moved; the base weights did not
    after = dict(trainer.grpo.model.named_parameters())
    moved = [name for name, p in after.items() if "lora_" in name and name.replace(".default", "") not in before]
    assert any(not torch.equal(after[name], torch.zeros_like(after[name])) for name in moved if "lora_B" in name)

    # every episode's steps, in the store, rebuild the TRL sample: env_mask is 1 exactly on the ids the policy
    # drew (the end of turn appended after each label token is not trained)
    rollout = trainer.last_rollout
    assert len(rollout["completion_ids"]) == 8 and all(r is not None for r in rollout["dreamgym_reward"])
    episodes, steps = anyio.run(stored, tmp_path / "store")
    by_episode = {e.episode_id: [s for s in steps if s.episode_id == e.episode_id] for e in episodes}
    action_ids = sorted([_drawn(s) for s in ep_steps] for ep_steps in by_episode.values())
    from_mask = sorted(
        _runs(completion, mask) for completion, mask in zip(rollout["completion_ids"], rollout["env_mask"], strict=True)
    )
    assert action_ids == from_mask
    assert any(0 in mask for mask in rollout["env_mask"])  # multi-step episodes carry the page between actions
    for mask, logprobs in zip(rollout["env_mask"], rollout["logprobs"], strict=True):
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)

    # TRL's recomputation of the recorded logprobs, on the rollout's weights
    difference, mask = trl_logprobs(trainer, rollout)
    assert mask.sum() > 0 and float(difference.max()) < 1e-3

    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(line["kind"] == "train" and "train/loss" in line for line in lines)
    assert (result.final_dir / "adapter_config.json").exists()
    assert trainer.policy.policy_id.endswith("+run:u1/index")


def _drawn(step: Step) -> list[int]:
    assert step.policy_tokens is not None
    tokens = step.policy_tokens
    return [token for token, drawn in zip(tokens.action_ids, tokens.sampled, strict=True) if drawn]


def _runs(completion: list[int], mask: list[int]) -> list[list[int]]:
    """The policy's ids, cut into one list per action (each run of mask 1)."""
    runs: list[list[int]] = []
    previous = 0
    for token, bit in zip(completion, mask, strict=True):
        if bit and not previous:
            runs.append([])
        if bit:
            runs[-1].append(token)
        previous = bit
    return runs


def test_env_tokens_reach_trl_masked(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    """What TRL trains on: its loss mask is zero on every environment token of a multi-step episode."""
    trainer = make_trainer(toy_chat, tmp_path, mode="synthetic")
    trainer.train()
    grpo = trainer.grpo
    seen: dict[str, Any] = {}
    original = grpo._compute_loss

    def spy(model: Any, inputs: dict[str, Any]) -> Any:
        seen.update(inputs)
        return original(model, inputs)

    grpo._compute_loss = spy
    rollout = trainer.last_rollout
    with trainer_portal(trainer):
        grpo.model.train()
        inputs = grpo._generate_and_score_completions([{"prompt": "group 0"}] * 2 + [{"prompt": "group 1"}] * 2)
        grpo.compute_loss(grpo.model, inputs)
    rollout = trainer.last_rollout
    tool_mask = seen["tool_mask"]
    for row, mask in enumerate(rollout["env_mask"]):
        assert tool_mask[row, : len(mask)].tolist() == mask
    assert int((seen["completion_mask"] * tool_mask).sum()) == sum(sum(m) for m in rollout["env_mask"])


def trainer_portal(trainer: Trainer) -> Any:
    """Reopen the trainer's runtime after ``train`` (for driving TRL's methods by hand)."""
    from contextlib import contextmanager

    from dreamgym.runtime import RuntimePortal

    @contextmanager
    def opened() -> Any:
        with RuntimePortal(trainer._open_runtime) as portal:
            trainer._portal = portal
            try:
                yield portal
            finally:
                trainer._portal = None

    return opened()


def test_group_with_different_first_pages_is_dropped(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    opener = sides_opener(tmp_path, real=DriftingFormEnv)
    trainer = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, open_sides=opener)
    result = trainer.train()
    assert (result.state.real_groups, result.state.synthetic_groups, result.state.dropped_groups) == (1, 1, 1)
    rewards = trainer.last_rollout["dreamgym_reward"]
    assert rewards.count(None) == 4  # the real group: every one of its episodes
    assert result.state.real_steps > 0
    played = [r for r in rewards if r is not None]  # a dropped group teaches nothing, whatever its rewards
    assert result.state.teaching_groups == ({"synthetic": 1} if max(played) > min(played) else {})


def test_sim2real_switches_at_the_update_and_keeps_its_checkpoint(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    trainer = make_trainer(toy_chat, tmp_path, mode="sim2real", updates=2, switch_at=1, groups_per_update=1)
    result = trainer.train()
    assert result.state.switched_at == 1
    assert (result.state.synthetic_groups, result.state.real_groups) == (1, 1)
    kept = tmp_path / "run" / "checkpoint-1"
    assert (kept / "adapter_model.safetensors").exists() and (kept / "dreamgym_trainer.json").exists()
    episodes, _ = anyio.run(stored, tmp_path / "store")
    sides = {e.group_id.split("/")[1]: e.source for e in episodes}
    assert sides == {"u0": "synthetic", "u1": "real"}


def test_resume_continues_where_it_stopped(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    first = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, updates=1, save_every=1)
    first.train()
    checkpoint = latest_checkpoint(tmp_path / "run")
    assert checkpoint is not None and checkpoint.name == "checkpoint-1"

    second = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, updates=2, save_every=1)
    result = second.train()
    adapters = {n: p.detach().clone() for n, p in second.grpo.model.named_parameters() if "lora_" in n}
    assert result.state.update == 2
    assert (result.state.real_groups, result.state.synthetic_groups) == (2, 2)  # one more update, not two
    episodes, _ = anyio.run(stored, tmp_path / "store")
    assert sorted({e.group_id.split("/")[1] for e in episodes}) == ["u0", "u1"]
    assert result.state.real_steps == sum(e.num_steps for e in episodes if e.source == "real")

    # a run already at its last update resumes the saved weights and trains no further
    third = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, updates=2, save_every=1)
    assert third.train().state.update == 2
    restored = {n: p for n, p in third.grpo.model.named_parameters() if "lora_" in n}
    assert restored.keys() == adapters.keys()
    assert all(torch.equal(restored[n], adapters[n]) for n in adapters)
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in restored.items() if "lora_B" in n)


def test_evaluation_counts_real_transitions_exactly_and_every_figure_reaches_tensorboard(
    toy_chat: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written where the run was started
    trainer = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, evaluation=True,
                           report_to=("tensorboard",))  # fmt: skip
    result = trainer.train()
    assert [update for update, _ in result.evaluations] == [0, 1]
    for _, evaluation in result.evaluations:
        assert evaluation.episodes == len(EVAL_SEEDS)
        # every held-out episode's outcome, by (task, seed): what comparing two evaluations pair by pair reads
        assert sorted(o.seed for o in evaluation.outcomes) == sorted(EVAL_SEEDS)
        assert sum(bool(o.solved) for o in evaluation.outcomes) == evaluation.successes
    eval_episodes, eval_steps = anyio.run(stored, tmp_path / "eval-store")
    train_episodes, train_steps = anyio.run(stored, tmp_path / "store")
    assert result.state.eval_real_steps == len(eval_steps) == sum(e.steps for _, e in result.evaluations)
    assert {e.seed for e in eval_episodes} == set(EVAL_SEEDS)
    assert result.state.real_steps == sum(1 for s in train_steps if s.source == "real")
    assert not {e.seed for e in train_episodes} & set(EVAL_SEEDS)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if line["kind"] == "eval"]
    assert [line["real_transitions"] for line in evals] == [0, result.state.real_steps]
    # TensorBoard, through TRL's loggers: TRL's figures, the evaluations before and after, the counters
    logged = tensorboard_events(tmp_path / "run" / "runs")
    scalars = logged["scalars"]
    assert scalars["eval/success_rate"] == [(u, pytest.approx(e.success_rate)) for u, e in result.evaluations]
    assert scalars["eval/episodes"] == [(0, len(EVAL_SEEDS)), (1, len(EVAL_SEEDS))]
    assert scalars["train/real_transitions"][-1] == (1, result.state.real_steps)
    assert "train/loss" in scalars and "train/real_groups" in scalars
    tables = logged["texts"]["eval/examples/text_summary"]
    assert len(tables) == 2 and all("| task | seed | outcome | steps | actions |" in table for table in tables)
    assert f"| toy/form | {min(EVAL_SEEDS)} |" in tables[0]  # the first episode by seed, with its actions
    assert sorted(path.name for path in tmp_path.iterdir()) == ["eval-store", "run", "store"]


NEVER = Task(task_id="toy/never", instruction='Enter "Ana" and press Submit.', site="toy")
"""A task no episode ever succeeds at: every group of it is flat."""


class CoinFormEnv(ToyFormEnv):
    """One step per episode; on TASK every second reset (per task) wins, on NEVER none does.

    A group of TASK therefore always has spread (its resets are consecutive), a group of NEVER never.
    """

    resets: ClassVar[dict[str, int]] = {}

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        CoinFormEnv.resets[task.task_id] = CoinFormEnv.resets.get(task.task_id, 0) + 1
        self.win = task.task_id == TASK.task_id and CoinFormEnv.resets[task.task_id] % 2 == 0
        return await super().reset(task, seed=seed)

    async def step(self, action: Any) -> Any:
        result = await super().step(action)
        return dataclasses.replace(result, reward=float(self.win), terminated=True)


@pytest.mark.parametrize("rounds", [0, 1])
def test_flat_groups_are_replaced_by_fresh_draws(toy_chat: tuple[Any, Any], tmp_path: Path, rounds: int) -> None:
    """Dynamic sampling: a group with no reward spread is played again as another task; its steps still count."""
    CoinFormEnv.resets = {}
    config = TrainConfig(mode="mixed", real_share=1.0, updates=1, group_size=4, groups_per_update=2,
                         resample_flat=rounds, output_dir=tmp_path / "run", report_to=())  # fmt: skip
    trainer = Trainer(config, policy=make_policy(toy_chat), tasks=[TASK, NEVER],
                      open_sides=sides_opener(tmp_path, real=CoinFormEnv), train_seeds=TRAIN_SEEDS)  # fmt: skip
    result = trainer.train()

    state = result.state
    assert (state.flat_groups, state.resampled_groups, state.real_groups) == (1, rounds, 2 + rounds)
    _, steps = anyio.run(stored, tmp_path / "store")
    assert state.real_steps == len(steps) == 4 * (2 + rounds)  # the replaced group's steps were consumed too
    trained = [s.task_id for s in steps if s.group_id.endswith("r1")]
    assert trained == [TASK.task_id] * 4 * rounds  # the replacement avoided the task that came back flat
    rewards = trainer.last_rollout["dreamgym_reward"]
    groups = [rewards[n : n + 4] for n in range(0, 8, 4)]
    spread = [max(g) > min(g) for g in groups]
    assert spread.count(True) == 1 + rounds  # what TRL trains on: every group with a signal when resampled
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["resampled_groups"] == rounds and lines[-1]["flat_groups"] == 1


class ShortAndLongWinsEnv(ToyFormEnv):
    """Every episode wins; every second reset's episode takes two steps, the others one."""

    resets = 0

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        ShortAndLongWinsEnv.resets += 1
        self.length, self.taken = 1 + ShortAndLongWinsEnv.resets % 2, 0
        return await super().reset(task, seed=seed)

    async def step(self, action: Any) -> Any:
        result = await super().step(action)
        self.taken += 1
        done = self.taken >= self.length
        return dataclasses.replace(result, reward=float(done), terminated=done, truncated=False)


@pytest.mark.parametrize("cost", [0.0, 0.1])
def test_step_cost_ranks_episodes_of_one_outcome_by_length(
    toy_chat: tuple[Any, Any], tmp_path: Path, cost: float
) -> None:
    """All four episodes win, two in one step and two in two: without a step cost the group is flat (nothing to
    learn); with one, GRPO is handed 1 - cost x steps and the shorter wins score higher. The task pool, which picks
    tasks by the spread of their outcomes, still sees four wins."""
    ShortAndLongWinsEnv.resets = 0
    config = TrainConfig(mode="mixed", real_share=1.0, updates=1, group_size=4, groups_per_update=1,
                         step_cost=cost, output_dir=tmp_path / "run", report_to=())  # fmt: skip
    trainer = Trainer(config, policy=make_policy(toy_chat), tasks=[TASK],
                      open_sides=sides_opener(tmp_path, real=ShortAndLongWinsEnv), train_seeds=TRAIN_SEEDS)  # fmt: skip
    result = trainer.train()

    episodes, _ = anyio.run(stored, tmp_path / "store")
    assert sorted(e.num_steps for e in episodes) == [1, 1, 2, 2] and all(e.success for e in episodes)
    trained = sorted(trainer.last_rollout["dreamgym_reward"])
    assert trained == pytest.approx([1 - 2 * cost] * 2 + [1 - cost] * 2)
    assert result.state.flat_groups == (1 if cost == 0 else 0)
    assert trainer.pool.value(TASK.task_id) == 0.0  # the outcomes: four wins, no spread


def test_step_cost_out_of_range_is_refused() -> None:
    for cost in (-0.1, 1.0):
        with pytest.raises(ConfigError, match="step_cost must be in"):
            TrainConfig(mode="synthetic", updates=1, step_cost=cost, output_dir=Path("unused"))


class BackwardsBackend(ToyBackend):
    """A simulator wrong on every outcome: Submit pays on an empty form and not on a filled one."""

    async def complete(self, messages: Any, sampling: Any) -> Any:
        completion = await super().complete(messages, sampling)
        if "<done>yes</done>" in completion.text:
            paid = int("textbox: " not in messages[-1].content)
            completion = dataclasses.replace(
                completion, text=f"<diff>\n</diff>\n<reward>{paid}</reward>\n<done>yes</done>"
            )
        return completion


@pytest.mark.parametrize(("backend", "synthetic_groups", "gated"), [(ToyBackend, 1, 1), (BackwardsBackend, 0, 2)])
def test_the_trust_gate_plays_real_what_the_simulator_has_not_earned(
    toy_chat: tuple[Any, Any], tmp_path: Path, backend: type[ToyBackend], synthetic_groups: int, gated: int
) -> None:
    """Update 1's synthetic group is played real (nothing shadowed yet); its real groups are shadowed. Update 2
    trusts the simulator that got every deciding step right and still refuses the one that got them all wrong."""
    opener = sides_opener(tmp_path, backend=backend)
    trainer = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, updates=2, open_sides=opener,
                           sim_trust=0.9, sim_trust_min_steps=4)  # fmt: skip
    state = trainer.train().state
    assert (state.synthetic_groups, state.gated_groups) == (synthetic_groups, gated)
    assert state.real_groups == 4 - synthetic_groups
    episodes, steps = anyio.run(stored, tmp_path / "store")
    real = [e for e in episodes if e.source == "real"]
    shadowed = {s.episode_id.removesuffix("/shadow") for s in steps if s.episode_id.endswith("/shadow")}
    assert shadowed == {e.episode_id for e in real}  # every real training episode, step by step
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["gated_groups"] == state.gated_groups
    assert lines[-1]["sim_trust/toy/form"] == (1.0 if synthetic_groups else 0.0)  # what the gate compared
    ended = [e for e in real if e.terminated or e.total_reward]  # a deciding step each: the Submit
    assert lines[-1]["sim_trust_steps/toy/form"] == len(ended)  # over how many steps the reading is


def test_the_trust_gate_needs_mixed_mode_and_a_sane_window() -> None:
    out = Path("unused")
    with pytest.raises(ConfigError, match="mixed mode only"):
        TrainConfig(mode="synthetic", updates=1, output_dir=out, sim_trust=0.9)
    with pytest.raises(ConfigError, match="sim_trust_min_steps"):
        TrainConfig(mode="mixed", updates=1, output_dir=out, sim_trust=0.9, sim_trust_min_steps=40)
    assert TrainConfig(mode="mixed", updates=1, real_share=0.0, output_dir=out, sim_trust=0.9).needs_real


class ContractTrainer(Trainer):
    """Records what TRL hands the rollout hook and what the hook returns."""

    calls: list[tuple[list[Any], int]]

    def _rollout(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        output = super()._rollout(prompts, trainer)
        self.calls.append((list(prompts), len(output["completion_ids"])))
        return output


def test_trl_rollout_hook_contract(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    """TRL 1.16 (pinned) hands rollout_func each group's prompt repeated G times, consecutively, and wants
    one completion per entry. If an upgrade changes that, this fails before any training goes wrong."""
    import trl

    assert trl.__version__ == "1.16.0"
    config = TrainConfig(mode="synthetic", updates=2, group_size=3, groups_per_update=2, output_dir=tmp_path / "run",
                         report_to=())  # fmt: skip
    trainer = ContractTrainer(
        config, policy=make_policy(toy_chat), tasks=[TASK], open_sides=sides_opener(tmp_path), train_seeds=[0, 1]
    )
    trainer.calls = []
    trainer.train()
    assert len(trainer.calls) == 2
    for prompts, completions in trainer.calls:
        assert len(prompts) == completions == 6
        groups = [prompts[n : n + 3] for n in range(0, 6, 3)]
        assert all(len(set(group)) == 1 for group in groups)
        assert groups[0][0] != groups[1][0]


class AlternatingBackend(ToyBackend):
    """Every action ends the episode; the reward alternates 1, 0, 1, 0 across calls (a group of 4 varies)."""

    def __init__(self, backend_id: str = "alternating") -> None:
        super().__init__()
        self.backend_id = backend_id
        self.count = 0

    async def complete(self, messages: Any, sampling: Any) -> Any:
        from dreamgym.core import Completion

        if "Action: " not in messages[-1].content:
            return await super().complete(messages, sampling)
        self.count += 1
        return Completion(text=f"<diff>\n</diff>\n<reward>{self.count % 2}</reward>\n<done>yes</done>")


class VariationBackend:
    """Proposes two harder variants of whatever task it is shown (the curriculum's proposal model)."""

    backend_id = "variations"

    async def complete(self, messages: Any, sampling: Any) -> Any:
        from dreamgym.core import Completion

        return Completion(text="<task>Enter the longest name and press Submit.</task>\n"
                               "<task>Enter the name backwards and press Submit.</task>")  # fmt: skip

    async def aclose(self) -> None:
        pass


def test_curriculum_varies_tasks_only_on_the_synthetic_side(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    from dreamgym.simulator import (
        CurriculumConfig,
        ExperienceModelConfig,
        LLMExperienceModel,
        SimulatedEnv,
        SimulatorConfig,
        TemplateConfig,
    )

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with open_store(tmp_path / "store") as store, open_store(tmp_path / "eval-store") as eval_store:
            template = TemplateConfig(history=4, neighbours=0)
            model = LLMExperienceModel(AlternatingBackend(), config=ExperienceModelConfig(template=template))
            yield Sides(
                store=store,
                real_env=lambda: ToyFormEnv(),
                synthetic_env=lambda: SimulatedEnv(model, config=SimulatorConfig(neighbours=0, real_starts=False)),
                eval_store=eval_store,
                curriculum_backend=VariationBackend(),
                runtime_config=RuntimeConfig(max_steps=4),
            )

    curriculum = CurriculumConfig(num_seed_tasks=1, variations_per_task=2, max_generated_share=1.0)
    trainer = make_trainer(
        toy_chat, tmp_path, mode="sim2real", updates=2, switch_at=1, groups_per_update=1, group_size=4,
        curriculum=curriculum, curriculum_every=1, open_sides=open_sides, evaluation=True,
    )  # fmt: skip
    result = trainer.train()
    generated = trainer.pool.generated_tasks()
    assert len(generated) == 2 and all(task.parent_task_id == TASK.task_id for task in generated)
    episodes, _ = anyio.run(stored, tmp_path / "store")
    second = [e for e in episodes if e.group_id.startswith("train/u1/")]
    # after the switch every real task's group is real; the generated one stays synthetic
    assert second and all(e.source == "synthetic" and e.task_id in {t.task_id for t in generated} for e in second)
    eval_episodes, _ = anyio.run(stored, tmp_path / "eval-store")
    assert {e.task_id for e in eval_episodes} == {TASK.task_id}
    assert result.state.generated_tasks and (tmp_path / "run" / "final" / "dreamgym_trainer.json").exists()


def toy_model(backend_id: str) -> Any:
    """An experience model on the toy page's backend, named ``backend_id`` (refits swap one for another)."""
    from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, TemplateConfig

    backend = ToyBackend()
    backend.backend_id = backend_id  # type: ignore[misc]
    return LLMExperienceModel(backend, config=ExperienceModelConfig(template=TemplateConfig(history=4, neighbours=0)))


def test_refit_swaps_the_experience_model_for_later_steps(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    from dreamgym.simulator import LLMExperienceModel, SimulatedEnv, SimulatorConfig
    from dreamgym.trainer import ModelSlot

    refits: list[int] = []

    async def refit(store: Any, ordinal: int) -> LLMExperienceModel:
        refits.append(ordinal)
        return toy_model(f"toy-refit-{ordinal}")

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with open_store(tmp_path / "store") as store:
            slot = ModelSlot(toy_model("toy-first"), refit)
            yield Sides(
                store=store,
                synthetic_env=lambda: SimulatedEnv(slot, config=SimulatorConfig(neighbours=0, real_starts=False)),
                slot=slot,
                runtime_config=RuntimeConfig(max_steps=4),
            )

    trainer = make_trainer(toy_chat, tmp_path, mode="synthetic", updates=2, sim_refit_every=1, open_sides=open_sides)
    result = trainer.train()
    assert refits == [1]  # after update 1; none after the last update
    _, steps = anyio.run(stored, tmp_path / "store")
    first = {s.experience_model_id for s in steps if "/u0/" in s.group_id}
    second = {s.experience_model_id for s in steps if "/u1/" in s.group_id}
    assert all("toy-first" in m for m in first) and all("toy-refit-1" in m for m in second)
    assert "toy-refit-1" in result.state.experience_model_id


def test_a_refitted_simulator_earns_the_task_again_before_it_plays(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    """The gate reads the shadowed answers of the model that would play: the first model earns the task in update
    1 and plays update 2's synthetic group; after the refit (after update 2) its record does not carry over, so
    update 3's synthetic group is played real, shadowed by the new model, whose answers the last metrics show."""
    from dreamgym.simulator import LLMExperienceModel, SimulatedEnv, SimulatorConfig
    from dreamgym.trainer import ModelSlot

    async def refit(store: Any, ordinal: int) -> LLMExperienceModel:
        return toy_model(f"toy-refit-{ordinal}")

    counts = Counts()

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with open_store(tmp_path / "store") as store:
            slot = ModelSlot(toy_model("toy-first"), refit)
            yield Sides(
                store=store,
                real_env=lambda: ToyFormEnv(counts),
                synthetic_env=lambda: SimulatedEnv(slot, config=SimulatorConfig(neighbours=0, real_starts=False)),
                slot=slot,
                runtime_config=RuntimeConfig(max_steps=4, real_concurrency=2),
            )

    trainer = make_trainer(toy_chat, tmp_path, mode="mixed", real_share=0.5, updates=3, open_sides=open_sides,
                           sim_trust=0.9, sim_trust_min_steps=4, sim_refit_every=2)  # fmt: skip
    state = trainer.train().state
    assert (state.synthetic_groups, state.gated_groups, state.real_groups) == (1, 2, 5)
    episodes, steps = anyio.run(stored, tmp_path / "store")
    sources = {u: {e.source for e in episodes if f"/u{u}/" in e.group_id} for u in range(3)}
    assert sources == {0: {"real"}, 1: {"real", "synthetic"}, 2: {"real"}}
    shadows = {s.experience_model_id for s in steps if s.episode_id.endswith("/shadow") and "/u2/" in s.group_id}
    assert shadows and all("toy-refit-1" in m for m in shadows)
    rewards: dict[tuple[str, str], list[float]] = {}
    for episode in episodes:  # the groups GRPO saw: what each side taught is counted by the side that played it
        rewards.setdefault((episode.group_id, episode.source), []).append(episode.total_reward)
    taught = Counter(side for (_, side), got in rewards.items() if max(got) > min(got))
    assert state.teaching_groups == dict(taught)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["sim_trust/toy/form"] == 1.0  # the new model's own answers, right


async def real_steps_of(store: Any) -> list[Any]:
    from dreamgym.simulator import real_episodes

    return [step for episode in await real_episodes(store) for step in episode]


@pytest.mark.slow
def test_sft_refit_fine_tunes_the_current_model_on_the_grown_store(
    tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    """The real refit: the simulator's SFT continues from the model in use, on the store's real steps, and its
    outcome judge is fit on the same steps (the held-out pairs left out) and saved with it."""
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore
    from dreamgym.simulator import OutcomeJudge, load_experience_model, read_metadata
    from dreamgym.trainer import ModelSlot, sft_refit

    _, sim = tiny_models
    limiter = anyio.CapacityLimiter(1)
    held_out = [("miniwob/click-button", 1)]
    refit = sft_refit(tmp_path / "refits", base=sim, epochs=1, max_length=4096, batch_size=4, limiter=limiter,
                      exclude_task_seeds=held_out)  # fmt: skip

    async def go() -> tuple[str, str, int]:
        async with LmdbReplayStore(sim.parent / "store", embedder=HashingEmbedder(64), readonly=True) as store:
            slot = ModelSlot(load_experience_model(sim, store=store), refit)
            before = slot.model_id
            model_id = await slot.refit(store)
            assert slot.current.backend._batcher.limiter is limiter  # type: ignore[attr-defined]
            kept = len([s for s in await real_steps_of(store) if (s.task_id, s.seed) not in held_out])
            return before, model_id, kept

    before, after, kept = anyio.run(go)
    assert after != before and (tmp_path / "refits" / "refit-1" / "config.json").exists()
    judge = OutcomeJudge.load(tmp_path / "refits" / "refit-1")
    assert judge is not None
    assert judge.trained_on == kept
    assert after.endswith(f"+judge@{judge.judge_id}")
    metadata = read_metadata(tmp_path / "refits" / "refit-1")
    assert metadata["refit"] == 1 and metadata["parent"] == str(sim)
    assert metadata["template"] == read_metadata(sim)["template"]
