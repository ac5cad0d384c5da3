"""What the trainer differentiates is what the policy sampled; rewards say what the policy did.

- A spy on TRL's loss, over several real optimizer steps with the trainer's
  default optimizer and a learning rate that moves the weights: the per-token
  log-probabilities inside the loss equal those recorded at rollout, for
  every trainable mode.
- A tiny index policy learns a two-button page (one pays 1, the other 0), and
  learns it too when the paying button's episodes are cut by a deadline half
  the time: infrastructure cuts are not punished.
- A failing experience-model backend, a killed browser, and a model that
  answers reward 7 on a middle step: rewards ``None`` counted by reason, or
  an outcome in [0, 1].
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import torch
from helpers import warm_index_labels
from runtime_helpers import ToyBackend, open_store, page, simulator

from dreamgym.agents import INDEX_TOKENS, LocalPolicy, LocalPolicyConfig, add_index_tokens, render_observation
from dreamgym.agents import system_message as agent_system_message
from dreamgym.core import Action, BackendError, ConfigError, Observation, StepResult, Task
from dreamgym.runtime import RuntimeConfig
from dreamgym.simulator import ScratchModelConfig
from dreamgym.simulator._sft import scratch_model, train_tokenizer
from dreamgym.trainer import Demonstration, Sides, TrainConfig, Trainer, tiny_index_policy
from dreamgym.trainer._anchor import Anchor

pytestmark = pytest.mark.timeout(180)

FORM = Task(task_id="toy/form", instruction='Enter "Ana" and press Submit.', site="toy")
BUTTONS = Task(task_id="toy/buttons", instruction='Click "Pay".', site="toy")
BUTTON_PAGE = Observation(state='[e1] button "Pay"\n[e2] button "Skip"', goal='Click "Pay".')
CONFIRM_PAGE = Observation(state='[e3] button "Confirm"', goal='Click "Pay".')
PAY, SKIP = 'click [e1] "Pay"', 'click [e2] "Skip"'
TINY = ScratchModelConfig(vocab_size=300, hidden_size=64, layers=2, heads=4, kv_heads=2, intermediate_size=128,
                          max_positions=2048)  # fmt: skip


# ---------------------------------------------------------------------- neighbours of the trainer


class CoinEnv:
    """A real side whose episodes last two turns and pay 1 and 0 in turn, whatever the policy says."""

    source = "real"
    paid = 0

    def __init__(self) -> None:
        self.turn = 0

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        self.turn = 0
        return page(seed)

    async def step(self, action: Action) -> StepResult:
        self.turn += 1
        if self.turn < 2:
            return StepResult(observation=page(0, "x"), reward=0.0, terminated=False, truncated=False)
        CoinEnv.paid += 1
        return StepResult(observation=page(0, "x"), reward=float(CoinEnv.paid % 2), terminated=True, truncated=False)

    async def aclose(self) -> None:
        pass


class ButtonsEnv:
    """Two buttons. Skip pays ``skip`` at once; Pay leads to a confirmation page where any action pays
    ``pay``, except that with ``cut_pay`` every second confirmation hangs past the episode deadline (a slow
    page the runtime cuts after the Pay step was recorded: its reward is ``None``, never 0)."""

    source = "real"

    def __init__(
        self, *, pay: float = 1.0, skip: float = 0.0, cut_pay: bool = False, notes: bool = False, counter: list[int]
    ) -> None:
        self.pay, self.skip, self.cut_pay, self.notes, self.counter = pay, skip, cut_pay, notes, counter
        self.confirming = False

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """The button page; with ``notes``, under as many lines of text as the seed says (starts of different
        lengths)."""
        self.confirming = False
        if self.notes and seed:
            notes = "".join(f'\n[n{n}] text "note {n}"' for n in range(seed))
            return Observation(state=BUTTON_PAGE.state + notes, goal=BUTTON_PAGE.goal)
        return BUTTON_PAGE

    async def step(self, action: Action) -> StepResult:
        if self.confirming:
            self.counter[0] += 1
            if self.cut_pay and self.counter[0] % 2:
                await anyio.sleep(30)  # the runtime's deadline cuts it long before
            return StepResult(observation=CONFIRM_PAGE, reward=self.pay, terminated=True, truncated=False)
        text = str(action)
        if text == PAY:
            self.confirming = True
            return StepResult(observation=CONFIRM_PAGE, reward=0.0, terminated=False, truncated=False)
        if text == SKIP:
            return StepResult(observation=BUTTON_PAGE, reward=self.skip, terminated=True, truncated=False)
        error = f"{action.error or 'that'} is not one of the page's buttons"
        failed = Observation(state=BUTTON_PAGE.state, goal=BUTTON_PAGE.goal, last_action_error=error)
        return StepResult(observation=failed, reward=0.0, terminated=False, truncated=False)

    async def aclose(self) -> None:
        pass


class FlakyBackend(ToyBackend):
    """The toy page's model, whose every third step prediction fails (a backend that drops requests)."""

    def __init__(self) -> None:
        super().__init__()
        self.step_calls = 0

    async def complete(self, messages: Any, sampling: Any) -> Any:
        if "Action: " in messages[-1].content:
            self.step_calls += 1
            if self.step_calls % 3 == 0:
                raise BackendError("the model server dropped the request")
        return await super().complete(messages, sampling)


class GenerousBackend(ToyBackend):
    """The toy page's model, which predicts reward 7 for typing (a middle step) and 1 for Submit."""

    async def complete(self, messages: Any, sampling: Any) -> Any:
        from dreamgym.core import Completion

        answer = await super().complete(messages, sampling)
        return Completion(text=answer.text.replace("<reward>0</reward>\n<done>no</done>",
                                                   "<reward>7</reward>\n<done>no</done>"))  # fmt: skip


def opener(
    *, real: Callable[[], Any] | None = None, backend: ToyBackend | None = None, runtime: RuntimeConfig | None = None
) -> Any:
    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with open_store(Path(os.environ["DREAMGYM_TEST_ROOT"]) / "store") as store:
            yield Sides(
                store=store,
                real_env=real,
                synthetic_env=(lambda: simulator(backend)) if backend is not None else None,
                runtime_config=runtime or RuntimeConfig(max_steps=4, real_concurrency=4),
            )

    return open_sides


@pytest.fixture(autouse=True)
def test_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DREAMGYM_TEST_ROOT", str(tmp_path))
    return tmp_path


def train(
    chat: tuple[Any, Any], root: Path, task: Task, open_sides: Any, *, mode: str = "index", **settings: Any
) -> Trainer:
    model, tokenizer = chat
    extra = {"max_new_tokens": settings.pop("max_new_tokens")} if "max_new_tokens" in settings else {}
    policy = LocalPolicy(
        copy.deepcopy(model), tokenizer, config=LocalPolicyConfig(mode=mode, temperature=1.0, seed=0, **extra)
    )
    trainer_class = settings.pop("trainer_class", Trainer)
    config = TrainConfig(
        mode=settings.pop("train_mode", "mixed"),
        updates=settings.pop("updates", 1),
        output_dir=root / "run",
        group_size=settings.pop("group_size", 4),
        groups_per_update=settings.pop("groups_per_update", 2),
        learning_rate=settings.pop("learning_rate", 1e-3),
        report_to=(),
        **{"real_share": 1.0, **settings},
    )
    trainer = trainer_class(config, policy=policy, tasks=[task], open_sides=open_sides, train_seeds=(0, 1, 2, 3))
    trainer.train()
    return trainer  # type: ignore[no-any-return]


# ---------------------------------------------------------------------- the loss sees what was sampled


class SpyTrainer(Trainer):
    """Watches TRL's loss: the per-token log-probabilities it differentiates, the ones recorded at rollout,
    the loss mask and the trainable weights, at every optimizer step."""

    seen: list[dict[str, Any]]

    def _build_grpo(self) -> Any:
        grpo = super()._build_grpo()
        self.seen = []
        compute_loss, logps = grpo._compute_loss, grpo._get_per_token_logps_and_entropies
        last: list[torch.Tensor] = []

        def spied_logps(*args: Any, **kwargs: Any) -> Any:
            out = logps(*args, **kwargs)
            last[:] = [out[0].detach().clone()]
            return out

        def spied_loss(model: Any, inputs: dict[str, Any]) -> Any:
            loss = compute_loss(model, inputs)
            trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
            self.seen.append({
                "in_loss": last[0], "recorded": inputs["sampling_per_token_logps"].detach().clone(),
                "mask": (inputs["completion_mask"] * inputs["tool_mask"]).bool(), "weights": trained,
                "rows": inputs["completion_mask"].bool(),
            })  # fmt: skip
            return loss

        grpo._get_per_token_logps_and_entropies = spied_logps
        grpo._compute_loss = spied_loss
        return grpo


@pytest.mark.parametrize(("mode", "micro_batch_size"), [("index", 0), ("generate", 0), ("index", 2)])
def test_the_loss_differentiates_the_logprobs_the_policy_sampled_with(
    toy_chat: tuple[Any, Any], tmp_path: Path, mode: str, micro_batch_size: int
) -> None:
    """Three updates at a learning rate that moves the weights, with TRL's default optimizer (fused AdamW
    with this torch, which changes parameters without bumping their version counters): at each, every
    trained token's log-probability inside the loss equals the one recorded when it was sampled; also when
    each update's eight episodes go through the loss in four passes of two, each cut to its own width."""
    # real groups on a page that pays 1 and 0 in turn whatever the policy does (every group's rewards vary,
    # so every update has a gradient), two turns an episode; an index policy's synthetic groups too
    if mode == "index":
        sides, settings = opener(real=CoinEnv, backend=ToyBackend()), {"real_share": 0.5}
    else:  # a random model does not write actions: real groups only
        sides, settings = opener(real=CoinEnv), {"max_new_tokens": 4}
    trainer = train(toy_chat, tmp_path, FORM, sides, mode=mode, updates=3, learning_rate=5e-2,
                    trainer_class=SpyTrainer, micro_batch_size=micro_batch_size, **settings)  # fmt: skip
    assert "fused" in trainer.grpo.args.optim.value  # the optimizer that made a version-keyed cache stale
    passes = 8 // micro_batch_size if micro_batch_size else 1
    seen = trainer.seen  # type: ignore[attr-defined]
    assert len(seen) == 3 * passes
    for call, spied in enumerate(seen):
        mask = spied["mask"]
        assert int(mask.sum()) > 0
        gap = (spied["in_loss"] - spied["recorded"]).abs()[mask]
        assert float(gap.max()) < 1e-3, f"loss call {call}: trained logprobs differ from sampled ones by {gap.max()}"
    if passes > 1:  # each pass cut to its own rows: no wider than its longest
        widths = [spied["rows"].size(1) for spied in seen]
        assert any(a != b for a, b in itertools.pairwise(widths))
        assert all(bool(spied["rows"].any(dim=0)[-1]) for spied in seen)
    updates = seen[passes - 1 :: passes]  # each update's last pass
    for before, after in itertools.pairwise(updates):
        moved = max(float((after["weights"][n] - w).abs().max()) for n, w in before["weights"].items())
        assert moved > 1e-3  # the optimizer really moved the weights between the updates compared


def test_forced_ends_of_turn_are_never_trained(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    trainer = train(toy_chat, tmp_path, FORM, opener(real=CoinEnv), mode="generate", max_new_tokens=2)
    eos = trainer.policy.turns.eos_id
    rollout = trainer.last_rollout
    for completion, mask in zip(rollout["completion_ids"], rollout["env_mask"], strict=True):
        # each reply is two drawn tokens (eos among them ends it early), then the end of turn appended
        replies = [n for n, (token, bit) in enumerate(zip(completion, mask, strict=True)) if token == eos and not bit]
        assert replies, "the cap ran out on every reply, so an end of turn was appended to each: masked"


# ---------------------------------------------------------------------- a policy that learns


@pytest.fixture(scope="module")
def buttons_chat() -> tuple[Any, Any]:
    """A tiny index policy for the two-button page, taught where its answers live: ~1/2 on each button."""
    texts = [agent_system_message("index"), render_observation(BUTTON_PAGE), BUTTONS.instruction, PAY, SKIP]
    tokenizer = train_tokenizer(texts * 8, TINY.vocab_size)
    model = scratch_model(tokenizer, TINY, seed=1)
    add_index_tokens(model, tokenizer)
    warm_index_labels(model, tokenizer, BUTTONS, [BUTTON_PAGE])
    return model, tokenizer


def pay_probability(policy: LocalPolicy) -> float:
    """The policy's probability of answering Pay's label on the page (among the labels it draws from), from a
    plain forward pass."""
    choices = [str(a) for a in policy.choices(BUTTONS, BUTTON_PAGE)]
    label = policy.turns.encode(INDEX_TOKENS[choices.index(PAY)])[0]
    ids = policy.input_ids(BUTTONS, [], BUTTON_PAGE)
    with torch.inference_mode():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    among = list(policy.choice_token_ids or range(logits.size(0)))  # what the policy draws among
    return float(torch.softmax(logits[among] / policy.config.temperature, dim=-1)[among.index(label)])


LEARN = {"updates": 16, "learning_rate": 5e-3, "lora": None, "groups_per_update": 2, "group_size": 8}


def learn_buttons(chat: tuple[Any, Any], root: Path, **env: Any) -> tuple[Trainer, float]:
    """Real-only GRPO on the two buttons; returns the trainer and Pay's probability before training."""
    counter = [0]
    runtime = RuntimeConfig(max_steps=2, real_concurrency=8, episode_deadline_s=0.5)
    sides = opener(real=lambda: ButtonsEnv(counter=counter, **env), runtime=runtime)
    model, tokenizer = chat
    before = pay_probability(LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index")))
    return train(chat, root, BUTTONS, sides, **LEARN), before


def test_a_tiny_policy_learns_the_paying_button(buttons_chat: tuple[Any, Any], tmp_path: Path) -> None:
    trainer, before = learn_buttons(buttons_chat, tmp_path)
    assert 0.2 < before < 0.8
    assert pay_probability(trainer.policy) > 0.9


def test_cuts_by_the_infrastructure_are_not_punished(buttons_chat: tuple[Any, Any], tmp_path: Path) -> None:
    """Pay pays 1 but every second Pay episode hangs after the Pay step and is cut by the deadline; Skip
    pays 0.6. Counting a cut as 0 would make Pay worth 0.5 < 0.6 and teach Skip; a cut that counts for
    nothing teaches Pay."""
    trainer, _ = learn_buttons(buttons_chat, tmp_path, skip=0.6, cut_pay=True)
    assert trainer.state.cut_episodes.get("deadline", 0) > 0
    assert pay_probability(trainer.policy) > 0.9


class PassesTrainer(Trainer):
    """At each optimizer step, beside the gradient its passes accumulated, the gradient of TRL's loss over the
    whole update in one padded pass, from the same weights and the same scored episodes."""

    compared: list[tuple[list[torch.Tensor], list[torch.Tensor], dict[str, Any]]]

    def _build_grpo(self) -> Any:
        from transformers import TrainerCallback

        grpo = super()._build_grpo()
        self.compared, scored, score = [], [], grpo._generate_and_score_completions

        def spied_score(batch: Any) -> Any:
            scored[:] = [score(batch)]
            return scored[0]

        compared, whole_loss = self.compared, self.whole_loss

        class Compare(TrainerCallback):  # type: ignore[misc]
            def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                params = [p for p in grpo.model.parameters() if p.requires_grad]
                accumulated = [p.grad.detach().clone() for p in params]
                grpo.model.zero_grad()
                whole_loss(grpo, scored[0], update=state.global_step).backward()
                whole = [p.grad.detach().clone() for p in params]
                for p, grad in zip(params, accumulated, strict=True):
                    p.grad = grad
                compared.append((accumulated, whole, scored[0]))

        grpo._generate_and_score_completions = spied_score
        grpo.add_callback(Compare())
        return grpo

    def whole_loss(self, grpo: Any, scored: dict[str, Any], *, update: int) -> torch.Tensor:
        """The update's loss in one pass over all its episodes."""
        return grpo.compute_loss(grpo.model, scored) * grpo.current_gradient_accumulation_steps  # type: ignore[no-any-return]


def test_passes_of_like_length_sum_to_the_one_pass_gradient(buttons_chat: tuple[Any, Any], tmp_path: Path) -> None:
    """Each update's eight episodes (four groups with starts of different lengths, one turn or two) in eight
    passes, each cut to its own episode: at every optimizer step the summed gradient is TRL's one-pass gradient
    over the padded batch (clipping off, so the comparison sees the raw sums)."""
    counter = [0]
    runtime = RuntimeConfig(max_steps=2, real_concurrency=8)
    sides = opener(real=lambda: ButtonsEnv(counter=counter, notes=True), runtime=runtime)
    trainer = train(buttons_chat, tmp_path, BUTTONS, sides, trainer_class=PassesTrainer, updates=2, lora=None,
                    groups_per_update=4, group_size=2, micro_batch_size=1, max_grad_norm=1e9,
                    learning_rate=5e-3)  # fmt: skip
    compared = trainer.compared  # type: ignore[attr-defined]
    assert len(compared) == 2
    for accumulated, whole, scored in compared:
        for key in ("prompt_mask", "completion_mask"):  # padded on the left and on the right: both cuts tried
            assert len(set(scored[key].sum(dim=1).tolist())) > 1, key
        assert max(float(g.abs().max()) for g in whole) > 1e-4  # a real gradient, not zeros matching zeros
        torch.testing.assert_close(accumulated, whole, rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------------------- failures: None, counted by reason


def metric_lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]


def test_a_failing_backend_gives_reward_none_counted_by_reason(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    backend = FlakyBackend()
    trainer = train(toy_chat, tmp_path, FORM, opener(backend=backend), train_mode="synthetic", real_share=0.0)
    cut = trainer.state.cut_episodes.get("backend", 0)
    assert backend.step_calls >= 3 and cut >= 1
    assert trainer.last_rollout["dreamgym_reward"].count(None) >= cut
    assert any(line.get("rollout/cut/backend") == cut for line in metric_lines(tmp_path))


def test_a_middle_step_reward_never_reaches_the_outcome(toy_chat: tuple[Any, Any], tmp_path: Path) -> None:
    trainer = train(toy_chat, tmp_path, FORM, opener(backend=GenerousBackend()), train_mode="synthetic",
                    real_share=0.0, groups_per_update=3)  # fmt: skip
    rewards = trainer.last_rollout["dreamgym_reward"]
    assert all(r is None or 0.0 <= r <= 1.0 for r in rewards)

    async def typed_rewards() -> list[float]:
        async with open_store(tmp_path / "store") as store:
            steps = await store.get_steps(await store.task_seqs(FORM.task_id, source="synthetic"))
        return [step.reward for step in steps if step.action.name == "type"]

    raw = anyio.run(typed_rewards)
    assert raw and all(r == 7.0 for r in raw)  # the model's raw value stays on the step, for validation


def test_a_killed_browser_gives_reward_none_counted_by_reason(
    toy_chat: tuple[Any, Any], tmp_path: Path, miniwob: Any
) -> None:
    from dreamgym.bridge import BrowserConfig, BrowserEnv, BrowserPool

    task = miniwob.task("click-test", max_steps=2)
    killed: list[int] = []

    class KillingEnv(BrowserEnv):
        """Real Chromium; the first step of the run kills the browser process under it."""

        async def step(self, action: Action) -> StepResult:
            if not killed:
                pid = (await self.pool.pids())[0]
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return await super().step(action)

    @asynccontextmanager
    async def open_sides(limiter: anyio.CapacityLimiter) -> AsyncIterator[Sides]:
        async with AsyncExitStack() as stack:
            store = await stack.enter_async_context(open_store(tmp_path / "store"))
            pool = await stack.enter_async_context(BrowserPool(BrowserConfig(processes=1)))
            yield Sides(
                store=store,
                real_env=lambda: KillingEnv(pool, sites=[miniwob]),
                runtime_config=RuntimeConfig(max_steps=2, real_concurrency=1),  # one episode at a time
            )

    trainer = train(toy_chat, tmp_path, task, open_sides, groups_per_update=1)
    assert killed
    assert trainer.state.cut_episodes == {"browser_crashed": 1}
    assert trainer.last_rollout["dreamgym_reward"].count(None) == 1
    assert any(line.get("rollout/cut/browser_crashed") == 1 for line in metric_lines(tmp_path))


# ---------------------------------------------------------------------- the behaviour-cloning anchor

SKIPPING = Task(task_id="toy/skipping", instruction="Press the other button.", site="toy")
SKIP_PAGE = Observation(state=BUTTON_PAGE.state + '\n[e4] button "Later"', goal="Press the other button.")


def skip_demonstration(policy: LocalPolicy, seed: int = 0) -> Demonstration:
    """Skip, demonstrated on a page whose goal names no button (so its choices keep the page's order, Pay's
    label first, the one GRPO raises on the Pay page): a task GRPO's groups never play."""
    choices = [str(a) for a in policy.choices(SKIPPING, SKIP_PAGE)]
    label = policy.turns.encode(INDEX_TOKENS[choices.index(SKIP)])[0]
    ids = policy.input_ids(SKIPPING, [], SKIP_PAGE)
    return Demonstration(ids=tuple(ids), label=label, task_id=SKIPPING.task_id, episode_id="demo", step_index=0,
                         seed=seed)  # fmt: skip


def skip_probability(policy: LocalPolicy) -> float:
    """The policy's probability of answering Skip's label on the Skip page (among its labels)."""
    demonstration = skip_demonstration(policy)
    with torch.inference_mode():
        logits = policy.model(input_ids=torch.tensor([demonstration.ids])).logits[0, -1].float()
    among = list(policy.choice_token_ids or ())
    return float(torch.softmax(logits[among], dim=-1)[among.index(demonstration.label)])


def anchored_buttons(chat: tuple[Any, Any], root: Path, **settings: Any) -> Trainer:
    """GRPO on the Pay page (Pay pays 1), anchored to Skip's demonstration on the Skip page."""

    base: type[Trainer] = settings.pop("trainer_class", Trainer)
    anchor = settings.get("anchor_weight", 0.0) > 0

    class Anchored(base):  # type: ignore[valid-type,misc]
        def __init__(self, config: TrainConfig, **kwargs: Any) -> None:
            super().__init__(config, **kwargs, anchor=[skip_demonstration(kwargs["policy"])] if anchor else ())

    counter = [0]
    runtime = RuntimeConfig(max_steps=2, real_concurrency=8)
    sides = opener(real=lambda: ButtonsEnv(counter=counter), runtime=runtime)
    return train(chat, root, BUTTONS, sides, trainer_class=Anchored, **{**LEARN, "anchor_batch": 2, **settings})


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_anchor_keeps_a_demonstrated_task_that_grpo_never_plays(tmp_path: Path) -> None:
    """GRPO teaches Pay on the Pay page; the Skip page (Skip demonstrated) shares every weight and is never
    played, so training Pay drags it along unless the anchor speaks for it: after the same 16 updates, Skip's
    probability there is high with the anchor, near 0 without, and Pay is learnt either way. The demo's policy
    shape (``tiny_index_policy``): the tests' smaller model cannot tell the two pages apart in 16 updates, so
    the anchor and GRPO only trade one page against the other there."""
    model, tokenizer = tiny_index_policy([(BUTTONS, BUTTON_PAGE), (SKIPPING, SKIP_PAGE)], seed=1)
    warm_index_labels(model, tokenizer, BUTTONS, [BUTTON_PAGE])
    warm_index_labels(model, tokenizer, SKIPPING, [SKIP_PAGE])
    chat = (model, tokenizer)
    before = skip_probability(LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index")))
    free = anchored_buttons(chat, tmp_path / "free")
    held = anchored_buttons(chat, tmp_path / "held", anchor_weight=1.0)
    assert 0.1 < before < 0.6  # one of four labels
    assert pay_probability(free.policy) > 0.9 and pay_probability(held.policy) > 0.9
    assert skip_probability(free.policy) < 0.2, "GRPO on Pay no longer drags the Skip page: the test shows nothing"
    assert skip_probability(held.policy) > 0.8
    logged = [row["train/anchor_loss"] for row in metric_lines(tmp_path / "held") if "train/anchor_loss" in row]
    assert len(logged) == LEARN["updates"] and logged[-1] < logged[0]


class AnchorTrainer(PassesTrainer):
    """At each optimizer step, beside the gradient its passes accumulated, TRL's loss over the whole update in
    one pass plus ``anchor_weight`` times the mean cross-entropy of the update's anchor rows, from the same
    weights."""

    def whole_loss(self, grpo: Any, scored: dict[str, Any], *, update: int) -> torch.Tensor:
        from trl.trainer.grpo_trainer import GRPOTrainer

        from dreamgym.agents import choice_logprobs

        rows = grpo.anchor.rows(update)
        assert len(rows) == self.config.anchor_batch
        ids = torch.tensor([row.ids for row in rows])  # one demonstration: rows of one length
        logits = grpo.model(input_ids=ids).logits[:, -1].float()
        among, labels = torch.tensor(self.policy.choice_token_ids), torch.tensor([row.label for row in rows])
        anchor = -self.config.anchor_weight * choice_logprobs(logits, labels, among).mean()
        steps = grpo.current_gradient_accumulation_steps
        return GRPOTrainer.compute_loss(grpo, grpo.model, scored) * steps + anchor  # type: ignore[no-any-return]


def test_the_anchor_adds_its_weight_times_the_mean_cross_entropy_to_each_update(
    buttons_chat: tuple[Any, Any], tmp_path: Path
) -> None:
    """Eight passes an update, three anchor rows spread over them (some passes carry none): the gradient the
    passes accumulate is GRPO's one-pass gradient plus the anchor's weight times the gradient of the rows' mean
    cross-entropy among the labels, nothing more and nothing counted twice."""
    trainer = anchored_buttons(buttons_chat, tmp_path, trainer_class=AnchorTrainer, anchor_weight=0.7,
                               anchor_batch=3, updates=2, groups_per_update=4, group_size=2, micro_batch_size=1,
                               max_grad_norm=1e9)  # fmt: skip
    compared = trainer.compared  # type: ignore[attr-defined]
    assert len(compared) == 2
    for accumulated, whole, _ in compared:
        assert max(float(g.abs().max()) for g in whole) > 1e-4
        torch.testing.assert_close(accumulated, whole, rtol=1e-4, atol=1e-7)


def test_anchor_rows_are_drawn_per_update_and_split_over_its_passes(buttons_chat: tuple[Any, Any]) -> None:
    model, tokenizer = buttons_chat
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index"))
    examples = [dataclasses.replace(skip_demonstration(policy), step_index=n) for n in range(10)]
    anchor = Anchor(examples, weight=1.0, batch=4, passes=3, pad_id=policy.turns.eos_id,
                    among=policy.choice_token_ids or (), seed=5)  # fmt: skip
    first, again = anchor.rows(0), anchor.rows(0)
    assert first == again and len({row.step_index for row in first}) == 4  # the same draw, no repeats
    assert any(anchor.rows(update) != first for update in range(1, 5))
    shares = [anchor.loss(model, 0, k) for k in range(3)]  # update 0: rows 4 over 3 passes (2, 1, 1)
    assert all(share is not None for share in shares)
    few = Anchor(examples[:1], weight=1.0, batch=2, passes=4, pad_id=policy.turns.eos_id,
                 among=policy.choice_token_ids or (), seed=5)  # fmt: skip
    assert [few.loss(model, 7, k) is None for k in range(4)] == [False, False, True, True]


def test_the_anchor_refuses_what_would_mislead_it(buttons_chat: tuple[Any, Any], tmp_path: Path) -> None:
    model, tokenizer = buttons_chat
    policy = LocalPolicy(model, tokenizer, config=LocalPolicyConfig(mode="index", temperature=1.0))
    config = TrainConfig(mode="mixed", updates=1, output_dir=tmp_path, real_share=1.0, anchor_weight=1.0)
    sides = opener(real=lambda: ButtonsEnv(counter=[0]))
    with pytest.raises(ConfigError, match="needs demonstrations"):
        Trainer(config, policy=policy, tasks=[BUTTONS], open_sides=sides, train_seeds=(0,))
    with pytest.raises(ConfigError, match="training seeds"):
        Trainer(config, policy=policy, tasks=[BUTTONS], open_sides=sides, train_seeds=(0,), eval_seeds=(1000,),
                anchor=[skip_demonstration(policy, seed=1000)])  # fmt: skip
    for weight in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="anchor_weight"):
            TrainConfig(mode="mixed", updates=1, output_dir=tmp_path, anchor_weight=weight)
