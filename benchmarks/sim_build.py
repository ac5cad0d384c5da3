"""Where the offline default experience model's build spends its time, and the build before and after, in one run.

    python benchmarks/sim_build.py [--out DIR] [--profile-steps 12] [--skip-before] [--commit-results]
                                   [--profile-only [--loops 'trl random;candidate'] [--results FILE]]

On the offline default's own data (collected once into ``--out``: its 18
MiniWoB++ tasks × seeds 0–23, and the held-out seeds 1000–1009 to score on),
it measures, as JSON lines, each against a baseline from the same run:

1. **examples**: built as before (every retrieval query embedded again)
   and as now (the store's own embeddings reused), each timed, each with its
   recipe's template; the tokens of an epoch of each; the share of no-op
   examples before and after sampling them down (before: :func:`before_balance`,
   frozen; the candidate: :func:`~dreamgym.jobs.sim_default.balance` with
   :data:`CONTRAST`);
2. **profile** (``--profile-steps`` optimizer steps each on the examples as
   before, the default model's size, a fresh model each): tokens per second
   of the same model's bare forward and backward on packed 8 × 512 batches
   (the ceiling), of TRL's ``SFTTrainer`` loop with random and with
   length-grouped batches, of dreamgym's plain loop
   (``SimTrainConfig.loop="plain"``) with both, with the shared system
   message fed with each row instead of once, in bfloat16 mixed precision,
   and on one thread, with each loop's padding share; and TRL's loop with
   and without activation checkpointing (TRL's default, on in the default's
   build before), alternating, three rounds; and the candidate's recipe on
   its own examples, with its tokenizer and with GPT-2's split, each in
   seconds per optimizer step against TRL's random batches (the build
   before's: both builds take the same steps). ``--loops`` runs some of
   them (``;``-separated), ``--results`` names the file they go to;
3. **builds**: the offline default's recipe, "before" (:func:`before_template`,
   :func:`before_training`: TRL's loop, random batches, the template with its
   system message; frozen here), and the faster candidate, "after"
   (:func:`candidate_template`, :func:`candidate_training`: the template
   naming the episode's earlier actions, the same batches, dreamgym's plain
   loop in bfloat16 mixed precision, the system message run once per
   micro-batch, a tokenizer that keeps runs of non-space characters whole,
   the answer's outcome weighed three times; the offline default's recipe
   since 2026-12-05), each timed; a build's time is the collection of its
   store with the embedding of every step (timed the first time a run
   collects into ``--out``; ``collect_s_recalled`` names the stores a later
   run found collected) + its example building + its training; ``default``
   in the results names the build whose recipe is ``DEFAULT_TRAINING`` and
   ``DEFAULT_TEMPLATE`` at the commit that ran;
4. **fidelity** of both models on every real step of the held-out seeds, one
   step teacher-forced, beside the two baselines (copy the top retrieved
   transition, keep the page), on all steps and on steps where the real page
   changed (``dreamgym.validate``).

``--commit-results`` writes ``benchmarks/results/sim_build.json`` with the
date, the commit and the command; the new model's digest is in it. With
``--profile-only`` (steps 1 and 2) it writes ``sim_build_profile.json``
instead, leaving the builds' file as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "sim_build.json"
PROFILE_RESULTS = ROOT / "benchmarks" / "results" / "sim_build_profile.json"
"""Where ``--profile-only --commit-results`` writes (collection, examples and the loops' profile; no builds)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "sim_build")
    parser.add_argument("--profile-steps", type=int, default=12, help="optimizer steps per profiled loop")
    parser.add_argument("--skip-before", action="store_true", help="build only the new default (no 'before' build)")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument("--profile-only", action="store_true", help="collect, build examples and profile; no builds")
    parser.add_argument("--loops", help="the profiled loops to run, ';'-separated (default: all)")
    parser.add_argument("--results", type=Path, help="where --profile-only --commit-results writes")
    parser.add_argument(
        "--commit-results",
        action="store_true",
        help="also write results/sim_build.json (sim_build_profile.json with --profile-only)",
    )
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    rows: list[dict[str, Any]] = []
    results: dict[str, Any] = report.provenance()
    data = anyio.run(_collect, args.out)
    results["data"] = data
    examples, example_figures = anyio.run(_examples, args.out)
    rows.append(report.emit("tokens per epoch", example_figures["tokens_per_epoch_after"], "tokens",
                            "before (its template and tokenizer)",
                            example_figures["tokens_per_epoch_before"]))  # fmt: skip
    rows.append(report.emit("example building", example_figures["examples_s"], "s", "before (queries embedded again)",
                            example_figures["examples_before_s"]))  # fmt: skip
    results["examples"] = example_figures
    print(json.dumps({"examples": example_figures}), flush=True)
    if not args.skip_profile:
        only = {name.strip() for name in args.loops.split(";") if name.strip()} if args.loops else None
        unknown = (only or set()) - set(profile_loops()) - set(PROFILE_EXTRAS)
        if unknown:
            parser.error(f"unknown loops {sorted(unknown)}; choose among {[*profile_loops(), *PROFILE_EXTRAS]}")
        results["profile"] = _profile(examples, args.profile_steps, rows, only)
    if args.profile_only:
        if args.commit_results:  # the builds' file stays as its last full run wrote it
            results["rows"] = rows
            target = args.results or PROFILE_RESULTS
            target.write_text(json.dumps(results, indent=1) + "\n")
            print(f"wrote {target}", file=sys.stderr)
        return 0
    builds = _builds(args, examples, data, example_figures)
    results["builds"] = builds
    before, after = builds.get("before"), builds["after"]
    results["default"] = default_build(builds)  # the build sim_default.py makes at this commit
    if before:
        rows.append(report.emit("default build time", after["build_s"], "s", "build before", before["build_s"]))
        results["build_speedup"] = round(before["build_s"] / after["build_s"], 3)
    fidelity = anyio.run(_fidelity, args.out, {name: Path(b["model"]) for name, b in builds.items()})
    results["fidelity"] = fidelity
    for split, table in fidelity.items():
        for metric in ("reward_accuracy", "done_accuracy", "similarity", "f1"):
            base = table["before"][metric] if "before" in table else table["unchanged"][metric]
            rows.append(report.emit(f"{metric} ({split})", table["after"][metric], "fraction",
                                    "before" if "before" in table else "unchanged page", base,
                                    n=table["after"]["n"]))  # fmt: skip
    if args.commit_results:
        results["rows"] = rows
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- data


async def _collect(out: Path) -> dict[str, Any]:
    """The default's training store (twice: with today's embedder, and as before with :func:`embedder_before`) and
    its held-out store, each collected once (timed the first time, the embedding of every step included)."""
    from dreamgym.jobs.sim_default import HELD_OUT_SEEDS, CollectPlan, collect_miniwob
    from dreamgym.replay import LmdbReplayStore

    figures: dict[str, Any] = {}
    stores = (
        ("train", CollectPlan(), None),
        ("train_before", CollectPlan(), embedder_before()),
        ("held_out", CollectPlan(seeds=HELD_OUT_SEEDS), None),
    )
    for name, plan, embedder in stores:
        async with LmdbReplayStore(out / name, embedder=embedder) as store:
            steps = (await store.stats()).steps.get("real", 0)
            if steps == 0:
                began = time.perf_counter()
                steps = await collect_miniwob(store, plan)
                await store.flush()  # a build waits for every step's embedding before it builds examples
                figures[f"{name}_collect_s"] = round(time.perf_counter() - began, 1)
                _remember(out, f"{name}_collect_s", figures[f"{name}_collect_s"])
            else:  # collected by an earlier run into the same --out: its time as that run measured it
                figures[f"{name}_collect_s"] = _recall(out, f"{name}_collect_s")
                figures.setdefault("collect_s_recalled", []).append(name)
            figures[f"{name}_steps"] = steps
    return figures


def _remember(out: Path, key: str, value: float) -> None:
    file = out / "timings.json"
    known = json.loads(file.read_text()) if file.exists() else {}
    file.write_text(json.dumps({**known, key: value}))


def _recall(out: Path, key: str) -> float | None:
    file = out / "timings.json"
    value = json.loads(file.read_text()).get(key) if file.exists() else None
    return float(value) if value is not None else None


async def _examples(out: Path) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The default's SFT examples as built before (every query embedded again) and as now (the store's own
    embeddings reused), each with its recipe's template, timed, balanced. Also how many differ in their query (only
    where neighbours tie), their tokens and the share of no-op steps."""
    from dreamgym.jobs.sim_default import balance, held_out_pairs, no_op_answer
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import build_sft_examples

    cached = out / "examples.pickle"  # built from the same stores every time: kept between runs of the script
    templates = {
        "before": before_template().template_id,
        "after": candidate_template().template_id,
        "contrast": CONTRAST,  # the examples kept change with it
        "split": candidate_training().scratch.split,  # the tokens counted change with it
    }
    if cached.exists():
        kept, figures = pickle.loads(cached.read_bytes())
        if figures.get("templates") == templates:
            return kept, figures
    held_out = held_out_pairs()
    seconds = {}
    built = {}
    ways = (
        ("before", _embedding_again(), "train_before", embedder_before(), before_template()),
        ("after", LmdbReplayStore, "train", None, candidate_template()),
    )
    for name, kind, where, embedder, template in ways:
        async with kind(out / where, embedder=embedder) as store:
            await store.flush()
            began = time.perf_counter()
            built[name] = await build_sft_examples(store, template, exclude_task_seeds=held_out)
            seconds[name] = time.perf_counter() - began
    # The same steps, collected twice: equal prompts but for the pages' port and where two neighbours are equally
    # near (float noise, and bfloat16's rounding in the store "after" was embedded with, may pick the other).
    differing = _differing_prompts(built["before"], built["after"])
    idle = no_op_answer()
    every = built["after"]
    kept = {"before": before_balance(built["before"]), "after": balance(built["after"], contrast=CONTRAST)}
    found = (
        kept,
        {
            "templates": templates,
            "examples_before_s": round(seconds["before"], 1),
            "examples_s": round(seconds["after"], 1),
            "examples_differing": differing,
            "all_examples": len(every),
            "no_op_share_all": round(sum(e.completion == idle for e in every) / len(every), 4),
            "examples": len(kept["after"]),
            "no_op_share_kept": round(sum(e.completion == idle for e in kept["after"]) / len(kept["after"]), 4),
            "tokens_per_epoch_before": _epoch_tokens(kept["before"], before_training()),
            "tokens_per_epoch_after": _epoch_tokens(kept["after"], candidate_training()),
        },
    )
    cached.write_bytes(pickle.dumps(found))
    return found


def _differing_prompts(before: list[Any], after: list[Any]) -> int:
    """How many of ``after``'s prompts have no equal in ``before`` (as multisets, the local server's port and the
    candidate's line of earlier actions aside): the two stores hold the same episodes, not necessarily in the same
    order."""
    import collections
    import re

    def prompt(text: str) -> str:
        return re.sub(r"\nActions so far: [^\n]*", "", re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1", text))

    def prompts(examples: list[Any]) -> collections.Counter[str]:
        return collections.Counter(prompt(e.messages[-1].content) for e in examples)

    return sum((prompts(after) - prompts(before)).values())


def _epoch_tokens(examples: list[Any], config: Any) -> int:
    """The tokens of one epoch over ``examples`` with the tokenizer a build with ``config`` trains on them."""
    from dreamgym.simulator._loop import tokenize_example
    from dreamgym.simulator._sft import _conversation, scratch_tokenizer

    tokenizer = scratch_tokenizer(examples, config.scratch)
    return sum(len(tokenize_example(tokenizer, *_conversation(e))) for e in examples)


def embedder_before() -> Any:
    """The store's embedder as the default's build ran it before (frozen here): MiniLM in float32, its texts in
    batches of 32 in the order given, each padded to its longest."""
    import numpy as np
    import torch

    from dreamgym.replay import MiniLMEmbedder

    class MiniLMAsBefore(MiniLMEmbedder):
        def embed_sync(self, texts: Any) -> Any:
            with self._lock:
                if self._model is None:
                    self._load()
                chunks = []
                for start in range(0, len(texts), self.batch_size):
                    chunk = list(texts[start : start + self.batch_size])
                    batch = self._tokenizer(chunk, padding=True, truncation=True, max_length=self.max_length,
                                            return_tensors="pt")  # fmt: skip
                    with torch.inference_mode():
                        hidden = self._model(**batch).last_hidden_state
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    chunks.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).numpy())
            vectors = np.concatenate(chunks) if chunks else np.zeros((0, self.dim), dtype=np.float32)
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    return MiniLMAsBefore(dtype="float32")


def _embedding_again() -> type:
    from dreamgym.replay import LmdbReplayStore

    class EmbeddingAgain(LmdbReplayStore):
        """The store as example building saw it before: no stored embeddings to reuse."""

        async def embedded(self, seqs: Any) -> dict[int, Any]:
            return {}

    return EmbeddingAgain


# ---------------------------------------------------------------------- profile


def _profile(
    examples: dict[str, list[Any]], steps: int, rows: list[dict[str, Any]], only: set[str] | None = None
) -> dict[str, Any]:
    """Tokens per second of each loop over ``steps`` optimizer steps, against bare forward+backward (packed); for
    the candidate's recipe, seconds per optimizer step against the build before's (each on its own examples and
    tokenizer: both builds take the same steps per epoch). ``only``: the loops to run (all: ``None``)."""
    import torch

    from dreamgym.core.devices import cpu_has_bfloat16

    threads = torch.get_num_threads()
    bare = _bare_tokens_per_second(examples["before"], steps)
    figures: dict[str, Any] = {"threads": threads, "bare_packed_tokens_per_s": round(bare, 1)}
    if cpu_has_bfloat16():
        mixed = _bare_tokens_per_second(examples["before"], steps, bfloat16=True)
        figures["bare_packed_bfloat16_tokens_per_s"] = round(mixed, 1)
        rows.append(report.emit("tokens/s, bare forward+backward in bfloat16", mixed, "tokens/s",
                                "the same in float32", bare, steps=steps))  # fmt: skip
    for name, (which, config) in profile_loops().items():
        if only is not None and name not in only:
            continue
        template = before_template() if which == "before" else candidate_template()
        measured = _short_run(examples[which], dataclasses.replace(config, max_steps=steps), template)
        figures[name] = measured
        rows.append(report.emit(f"tokens/s, {name}", measured["tokens_per_s"], "tokens/s",
                                "bare forward+backward, packed", bare, padding_share=measured.get("padding_share"),
                                steps=steps))  # fmt: skip
        if which == "after" and "trl random" in figures:
            rows.append(report.emit(f"training seconds per step, {name}", measured["seconds_per_step"], "s",
                                    "the build before's (trl random)", figures["trl random"]["seconds_per_step"],
                                    steps=steps))  # fmt: skip
    if only is None or "trl activation checkpointing" in only:
        figures["trl activation checkpointing"] = _checkpointing(examples["before"], steps)
    if only is None or "plain random, 1 thread" in only:
        torch.set_num_threads(1)
        try:
            config = dataclasses.replace(before_training(), max_steps=steps, loop="plain")
            one = _short_run(examples["before"], config, before_template())
        finally:
            torch.set_num_threads(threads)
        figures["plain random, 1 thread"] = one
        if "plain random" in figures:
            rows.append(report.emit("tokens/s, plain random on 1 thread", one["tokens_per_s"], "tokens/s",
                                    f"plain random on {threads} threads",
                                    figures["plain random"]["tokens_per_s"]))  # fmt: skip
    return figures


PROFILE_EXTRAS = ("trl activation checkpointing", "plain random, 1 thread")
"""Profiled runs beside :func:`profile_loops`' (``--loops`` names them too)."""


def profile_loops() -> dict[str, tuple[str, Any]]:
    """Each profiled loop: the examples it trains on ("before": the build before's; "after": the candidate's)
    and its training config (``max_steps`` set by the profile)."""
    before = before_training()
    candidate = candidate_training()
    return {
        "trl random": ("before", dataclasses.replace(before, loop="trl", group_by_length=False)),
        "trl grouped": ("before", dataclasses.replace(before, loop="trl", group_by_length=True)),
        "plain random, whole batches": ("before", dataclasses.replace(before, loop="plain", micro_batch_tokens=None)),
        "plain random": ("before", dataclasses.replace(before, loop="plain")),
        "plain random, prefix with each row": ("before", dataclasses.replace(before, loop="plain", share_prefix=False)),
        "plain grouped": ("before", dataclasses.replace(before, loop="plain", group_by_length=True)),
        "plain random, bfloat16": ("before", dataclasses.replace(before, loop="plain", dtype="bfloat16")),
        "candidate": ("after", candidate),
        "candidate, punctuation split": (
            "after",
            dataclasses.replace(candidate, scratch=dataclasses.replace(candidate.scratch, split="punctuation")),
        ),
    }


def _checkpointing(examples: list[Any], steps: int, rounds: int = 3) -> dict[str, Any]:
    """TRL's loop as the default trained before (activation checkpointing on, TRL's default) and without it,
    alternating ``rounds`` times (12 steps of one vary by a tenth or more on this machine); the medians."""
    import statistics

    measured: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for on in (True, False):
            config = dataclasses.replace(before_training(), max_steps=steps, activation_checkpointing=on)
            measured[on].append(_short_run(examples, config, before_template())["tokens_per_s"])
    with_it, without = statistics.median(measured[True]), statistics.median(measured[False])
    report.emit("tokens/s, TRL random without activation checkpointing", without, "tokens/s",
                "the same with it (the default's build before)", with_it, steps=steps, rounds=rounds)  # fmt: skip
    return {"steps": steps, "rounds": rounds, "with_tokens_per_s": measured[True],
            "without_tokens_per_s": measured[False], "speedup_median": round(without / with_it, 3)}  # fmt: skip


def _short_run(examples: list[Any], config: Any, template: Any) -> dict[str, Any]:
    import tempfile

    from dreamgym.simulator import read_metadata, train_experience_model

    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        train_experience_model(examples, Path(tmp) / "m", config, template=template)
        meta = read_metadata(Path(tmp) / "m")
        seconds = time.perf_counter() - began
    return {
        "steps": meta.get("train_steps", config.max_steps),
        "seconds_with_setup": round(seconds, 1),
        "tokens_per_s": meta["tokens_per_second"],
        "seconds_per_step": round(meta["fit_seconds"] / max(meta["train_steps"], 1), 3),
        "padding_share": meta.get("padding_share"),
        "precision": meta.get("precision", "float32"),
    }


def _bare_tokens_per_second(examples: list[Any], steps: int, *, bfloat16: bool = False) -> float:
    """The default model's forward and backward (and an AdamW step) on packed 8 × 512 batches of the examples' text;
    ``bfloat16``: the passes under the CPU's bfloat16 autocast, as the plain loop's ``dtype="bfloat16"``."""
    import contextlib

    import torch

    from dreamgym.simulator._sft import scratch_model, train_tokenizer

    texts = [m.content for e in examples for m in e.messages] + [e.completion for e in examples]
    tokenizer = train_tokenizer(texts, before_training().scratch.vocab_size)
    model = scratch_model(tokenizer, before_training().scratch)
    stream: list[int] = []
    for text in texts[: 4 * steps * 8]:
        stream += tokenizer(text)["input_ids"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()

    def passes() -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext()

    batch = torch.tensor(stream[: 8 * 512]).view(8, 512)
    with passes():
        loss = model(input_ids=batch, labels=batch).loss
    loss.backward()  # warm-up
    optimizer.zero_grad()
    began = time.perf_counter()
    for n in range(steps):
        chunk = stream[n * 8 * 512 : (n + 1) * 8 * 512]
        if len(chunk) < 8 * 512:
            chunk = stream[: 8 * 512]
        batch = torch.tensor(chunk).view(8, 512)
        with passes():
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return 8 * 512 * steps / (time.perf_counter() - began)


# ---------------------------------------------------------------------- builds


def before_template() -> Any:
    """The offline default's prompt (frozen here, so "before" stays what it was if the default changes): history
    1, two neighbours, a diff, and the system message that explains the page format."""
    from dreamgym.simulator import TemplateConfig

    return TemplateConfig(history=1, neighbours=2, reasoning=False, output="diff", instructions=True)


def before_training() -> Any:
    """The offline default's training (frozen here): TRL's ``SFTTrainer``, random batches, 2 epochs of the 4-layer
    scratch model, with TRL's activation checkpointing (on by default in TRL, and so in the default's build until
    ``SimTrainConfig.activation_checkpointing`` turned it off)."""
    from dreamgym.simulator import SimTrainConfig

    return SimTrainConfig(base="scratch", epochs=2, max_length=1536, loop="trl", group_by_length=False,
                          activation_checkpointing=True)  # fmt: skip


def before_balance(examples: list[Any], *, no_op_share: float = 0.2, seed: int = 0) -> list[Any]:
    """The offline default's sampling of no-op examples (frozen here): every example that changes the page, ends
    or earns reward, and a random sample of the no-ops, all tasks and actions together, to fill ``no_op_share``."""
    import random

    from dreamgym.jobs.sim_default import no_op_answer

    no_op = no_op_answer()
    idle = [e for e in examples if e.completion == no_op]
    rest = [e for e in examples if e.completion != no_op]
    keep = min(len(idle), int(no_op_share * len(rest) / (1 - no_op_share)))
    return rest + random.Random(seed).sample(idle, keep)


CONTRAST = False
"""Whether the candidate keeps every no-op of an action that changes the page elsewhere on its task
(``balance(contrast=True)``) instead of sampling all no-ops alike, as the default does. One build each on the same
steps, it fixed none of the termination errors it was for and scored lower on reward and the changed pages
(``benchmarks/results/sim_ablation.json``: ``candidate`` against ``candidate-contrast``), so it is off."""


def candidate_template() -> Any:
    """The faster candidate's prompt: the default's, system message included, naming every earlier action of the
    episode before the action (``TemplateConfig.past_actions``, 2% more tokens). Without the message
    (``instructions=False``, a third fewer tokens) every build so far scored lower on reward where the page
    changed; the candidate's loop runs it once per micro-batch instead. Naming the earlier actions took the
    candidate's termination accuracy from 0.915 to 0.970 and reward from 0.895 to 0.923 on the held-out steps
    (``benchmarks/results/sim_ablation.json``: ``candidate`` and ``candidate-acts``): a click ends
    click-button-sequence only when a click came before it, which one step of history does not always show."""
    return dataclasses.replace(before_template(), past_actions=True)


def candidate_training() -> Any:
    """The faster candidate's training: dreamgym's plain loop, random batches fed in micro-batches of like length
    (the random batch's gradient without its padding), logits for the answer only, the system message run once per
    micro-batch (``share_prefix``), the passes in bfloat16 mixed precision where the CPU has bfloat16 units; a
    tokenizer that keeps each run of non-space characters whole (``ScratchModelConfig.split="whitespace"``: 35%
    fewer tokens), and the answer's reward and end weighed three times its page in the loss (``outcome_weight``).

    Length-grouped batches pad least, but, one change at a time on the same
    held-out steps (``benchmarks/results/sim_ablation.json``), they are what
    cost an earlier candidate its fidelity; the micro-batches take the padding
    out of random batches instead. With the whitespace split alone, a second
    seed ended click-button-sequence's episodes on its first click again
    (termination 0.925 against 0.974 for the first seed); the outcome's weight
    kept both seeds above the issue's bars (``candidate-acts-words-outcome-3``
    and ``-seed1`` there). Since 2026-12-05 this is the offline default's
    recipe (``DEFAULT_TRAINING``, with :func:`candidate_template` as
    ``DEFAULT_TEMPLATE``); it stays spelled out here, so that "after" is what
    was measured if the default moves on."""
    before = before_training()
    return dataclasses.replace(
        before,
        loop="plain",
        dtype="bfloat16",
        share_prefix=True,
        scratch=dataclasses.replace(before.scratch, split="whitespace"),
        outcome_weight=3.0,
    )


def default_build(builds: dict[str, Any]) -> str | None:
    """Which of the builds is the offline default's recipe (``DEFAULT_TRAINING``), by its training config. A
    field the recorded config lacks (added since) counts as its default value: the recipe it names is the same.
    Settings that change only the speed, never the weights (``dreamgym.simulator.SAME_WEIGHTS``), are not
    compared: such a build is the default's model, though the default may now build faster than it did."""
    from dreamgym.jobs.sim_default import DEFAULT_TEMPLATE, DEFAULT_TRAINING

    return next(
        (
            name
            for name, build in builds.items()
            # the default samples its no-ops alike (``balance``'s default; builds recorded before the field did)
            # and prompts with its template (every build recorded before the field did)
            if same_weights(build["config"], DEFAULT_TRAINING)
            and not build.get("contrast", False)
            and build.get("template", DEFAULT_TEMPLATE.template_id) == DEFAULT_TEMPLATE.template_id
        ),
        None,
    )


def same_weights(recorded: dict[str, Any] | None, config: Any) -> bool:
    """Whether a model trained with the ``recorded`` config (as metadata and results record it) has the weights
    ``config`` trains: a field the recorded config lacks (added since) counts as its default value, and settings
    that change only the time (``dreamgym.simulator.SAME_WEIGHTS``) are not compared."""
    from dreamgym.simulator import recipe_changes

    return recorded is not None and not recipe_changes(recorded, config)


def _builds(
    args: argparse.Namespace, examples: dict[str, list[Any]], data: dict[str, Any], ex: dict[str, Any]
) -> dict[str, Any]:
    """Train the default as before and as now, each on its own examples; the build time adds collection and
    example building."""
    from dreamgym.simulator import as_recorded, examples_digest, read_metadata, train_experience_model, weights_digest

    configs = (
        {"after": candidate_training()}
        if args.skip_before
        else {"before": before_training(), "after": candidate_training()}
    )
    builds: dict[str, Any] = {}
    for name, config in configs.items():
        target = args.out / f"model-{name}"
        template = before_template() if name == "before" else candidate_template()
        known = _recall(args.out, f"{name}_train_s")
        meta = read_metadata(target)
        # built by an earlier run of the same recipe on the same examples: its time is kept beside it
        if (
            known is not None
            and meta.get("config") == as_recorded(config)
            and meta.get("examples_digest") == examples_digest(examples[name])
        ):
            train_s = known
        else:
            began = time.perf_counter()
            train_experience_model(examples[name], target, config, template=template)
            train_s = time.perf_counter() - began
            _remember(args.out, f"{name}_train_s", round(train_s, 1))
        meta = read_metadata(target)
        examples_s = ex["examples_before_s"] if name == "before" else ex["examples_s"]
        collect_s = data.get("train_before_collect_s" if name == "before" else "train_collect_s") or 0.0
        build_s = collect_s + examples_s + train_s
        builds[name] = {
            "model": str(target),
            "digest": weights_digest(target),
            "config": dataclasses.asdict(config),
            "contrast": name != "before" and CONTRAST,  # how its no-op examples were sampled
            "template": template.template_id,
            "collect_s": collect_s,
            "examples_s": examples_s,
            "train_s": round(train_s, 1),
            "build_s": round(build_s, 1),
            "train_loss": meta.get("train_loss"),
            "tokens_per_second": meta.get("tokens_per_second"),
        }
        print(json.dumps({"build": name, **builds[name]}), flush=True)
    return builds


# ---------------------------------------------------------------------- fidelity


async def _fidelity(out: Path, models: dict[str, Path]) -> dict[str, Any]:
    """One-step fidelity of each model and the two baselines on every held-out real step: all, and page changed."""
    from dreamgym.jobs.sim_default import held_out_pairs
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import load_experience_model
    from dreamgym.validate import ValidationConfig, validate

    held_out = tuple(held_out_pairs())
    async with LmdbReplayStore(out / "held_out", readonly=True) as real:
        steps = [s for s in await _all_steps(real) if s.source == "real"]
    tables: dict[str, dict[str, Any]] = {"all": {}, "page changed": {}}
    for name, path in models.items():
        where, embedder = ("train_before", embedder_before()) if name == "before" else ("train", None)
        # each model retrieves from the store its build collected (and keeps its calls in that store's cache)
        async with LmdbReplayStore(out / where, embedder=embedder) as store:
            model = load_experience_model(path, store=store)
            config = ValidationConfig(neighbours=model.config.template.neighbours, exclude_task_seeds=held_out)
            found = await validate(model, steps, store=store, config=config)
            tables["all"][name] = found.one_step["model"].as_dict()
            tables["page changed"][name] = found.by_change["model"]["page changed"].as_dict()
            for baseline in ("copy_top_retrieved", "unchanged"):
                tables["all"][baseline] = found.one_step[baseline].as_dict()
                tables["page changed"][baseline] = found.by_change[baseline]["page changed"].as_dict()
    return tables


async def _all_steps(store: Any) -> list[Any]:
    from dreamgym.core.types import Step, decode_record

    return [decode_record(data, Step) for _key, data in store.iter_records("steps")]


if __name__ == "__main__":
    sys.exit(main())
