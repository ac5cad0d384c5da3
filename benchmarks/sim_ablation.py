"""Which of the faster build's three changes costs the offline default's fidelity: one change at a time.

    python benchmarks/sim_ablation.py [--out DIR] [--variants a,b,...] [--commit-results]

``benchmarks/sim_build.py`` builds the default's recipe ("before": TRL's
``SFTTrainer``, random batches, the template with its system message) and a
faster candidate (dreamgym's plain loop, length-grouped batches, no system
message) and finds the candidate 3.5 times faster but worse on the held-out
steps. This script trains the recipes between them on the same data (the
examples ``sim_build.py`` built and cached in ``--out``) and scores every one
on the same held-out real steps, one step teacher-forced, with today's parser
and rules, beside the two baselines, on all steps and on steps where the real
page changed. A model already trained in ``--out`` by this script is scored
again, not retrained (its weights are the recipe's; scoring takes a minute
with the call cache).

It reports fidelity and the training loss only: its trainings may share the
machine with other work, so their times are not figures (``sim_build.py``'s
profile measures the loops' speed, alone). The training loss is not
comparable across loops either: TRL reports the mean of its steps' losses,
the plain loop the mean over answer tokens.

"system" is the offline default's template with its system message
(``sim_build.before_template``), "bare" the same without it; every variant
starts from the default's training (``sim_build.before_training``) and
changes what its name says. The plain
loop feeds batches in micro-batches of like length since 2026-12-02: the
same gradients as the padded batches it fed whole when the rows committed
before then were trained. Since ``sim_build.py`` collects its "before" store
with the embedder as it was, every variant trains on the "after" examples
(the store collected with today's embedder, the one the scoring retrieves
from); rows committed before then trained the "system" variants on the
"before" examples (the same store, queries embedded again).

Variants (loop, batches, template, epochs, precision):

- ``trl-random-system``: the default's recipe (2 epochs);
- ``plain-random-system``: the loop alone changed;
- ``plain-grouped-system``: the loop and the batches;
- ``plain-random-bare``: the loop and the template;
- ``plain-grouped-bare``: all three, the candidate of ``d95e0fe``;
- ``plain-random-bare-e1``, ``plain-random-bare-e1.5``: the loop and the
  template, one and one and a half epochs (the learning-rate schedule spans
  the shorter run);
- ``plain-random-system-bf16``, ``plain-random-bare-bf16``: the loop (and
  the template), the passes in bfloat16 mixed precision on a CPU with
  bfloat16 units (float32 elsewhere: the metadata's ``precision`` says);
- ``candidate``: ``sim_build.candidate_training`` (``plain-random-system-bf16``
  with the system message run once per micro-batch), and
  ``candidate-contrast``, the same with every no-op of an action that
  changes the page elsewhere on its task kept (:func:`dreamgym.jobs.sim_default.balance`
  with ``contrast=True``) instead of a random sample of all no-ops
  (``sim_build.before_balance``, every other variant): the same number of
  examples, other no-ops; ``candidate-contrast-0.1``, the same with a
  tenth of the examples no-ops instead of a fifth (a ninth fewer examples);
  ``candidate-outcome-3``, the candidate with the answer's reward and end
  weighed three times its page (``SimTrainConfig.outcome_weight``);
  ``candidate-acts``, the candidate on the template that names every earlier
  action of the episode before the action (``TemplateConfig.past_actions``:
  a step's end can depend on an action older than the one step of history),
  and ``candidate-acts-0.1``, the same with a tenth of the examples no-ops;
  ``candidate-acts-words``, ``candidate-acts`` with a tokenizer that keeps
  each run of non-space characters whole before learning its merges
  (``ScratchModelConfig.split="whitespace"``: fewer tokens per example,
  each row records its ``train_tokens`` and ``train_seconds``), and
  ``candidate-acts-words-seed1``, the same trained from another seed (other
  initial weights, batches in another order): two builds of one recipe;
  ``candidate-acts-words-outcome-3`` and ``-outcome-3-seed1``, the two with
  the answer's reward and end weighed three times its page.

The examples are built from ``--out``'s "train" store with the default's
template (the first run caches them there, all of them, before sampling).

``--commit-results`` adds the variants run to ``benchmarks/results/sim_ablation.json``
(each with its own date, commit and command), keeping the others there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import sys
from pathlib import Path
from typing import Any, NamedTuple

import anyio
from _report import provenance
from sim_build import _fidelity, before_balance, before_template, before_training, same_weights

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "sim_ablation.json"


class Variant(NamedTuple):
    loop: str
    grouped: bool
    template: str
    """"system" (the default's), "bare" (without the system message) or "acts" (the default's naming every earlier
    action of the episode, ``TemplateConfig.past_actions``)"""
    epochs: float = 2.0
    dtype: str = "auto"
    share_prefix: bool = False
    """the system message run once per micro-batch: the same gradients"""
    no_ops: str = "random"
    """"random": ``sim_build.before_balance``; "contrast": ``balance(contrast=True)``"""
    no_op_share: float = 0.2
    outcome_weight: float = 1.0
    """the answer's reward and end weighed this many times its page's tokens (``SimTrainConfig.outcome_weight``)"""
    split: str = "punctuation"
    """how the scratch tokenizer cuts text before its merges (``ScratchModelConfig.split``)"""
    seed: int = 0
    """the training's seed (the model's initial weights and the batches' order): another build of one recipe"""


VARIANTS = {
    "trl-random-system": Variant("trl", False, "system"),
    "plain-random-system": Variant("plain", False, "system"),
    "plain-grouped-system": Variant("plain", True, "system"),
    "plain-random-bare": Variant("plain", False, "bare"),
    "plain-grouped-bare": Variant("plain", True, "bare"),
    "plain-random-bare-e1": Variant("plain", False, "bare", epochs=1.0),
    "plain-random-bare-e1.5": Variant("plain", False, "bare", epochs=1.5),
    "plain-random-system-bf16": Variant("plain", False, "system", dtype="bfloat16"),
    "plain-random-bare-bf16": Variant("plain", False, "bare", dtype="bfloat16"),
    "candidate": Variant("plain", False, "system", dtype="bfloat16", share_prefix=True),
    "candidate-contrast": Variant("plain", False, "system", dtype="bfloat16", share_prefix=True, no_ops="contrast"),
    "candidate-contrast-0.1": Variant(
        "plain", False, "system", dtype="bfloat16", share_prefix=True, no_ops="contrast", no_op_share=0.1
    ),
    "candidate-outcome-3": Variant("plain", False, "system", dtype="bfloat16", share_prefix=True, outcome_weight=3.0),
    "candidate-acts": Variant("plain", False, "acts", dtype="bfloat16", share_prefix=True),
    "candidate-acts-0.1": Variant("plain", False, "acts", dtype="bfloat16", share_prefix=True, no_op_share=0.1),
    "candidate-acts-words": Variant("plain", False, "acts", dtype="bfloat16", share_prefix=True, split="whitespace"),
    "candidate-acts-words-seed1": Variant(
        "plain", False, "acts", dtype="bfloat16", share_prefix=True, split="whitespace", seed=1
    ),
    "candidate-acts-words-outcome-3": Variant(
        "plain", False, "acts", dtype="bfloat16", share_prefix=True, split="whitespace", outcome_weight=3.0
    ),
    "candidate-acts-words-outcome-3-seed1": Variant(
        "plain", False, "acts", dtype="bfloat16", share_prefix=True, split="whitespace", outcome_weight=3.0, seed=1
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "sim_build")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/sim_ablation.json")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose among {list(VARIANTS)}")
    if not (args.out / "train").exists():
        parser.error(
            f"no store at {args.out / 'train'}: run benchmarks/sim_build.py --profile-only --out {args.out} first"
        )
    run = provenance()
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["note"] = "fidelity and training loss only: the trainings may share the machine, so no timings"
    variants = results.setdefault("variants", {})
    for row in variants.values():  # variants committed before runs were recorded per variant
        row.setdefault("run", {k: results[k] for k in ("date", "commit", "command") if k in results})
    for key in ("date", "commit", "command"):
        results.pop(key, None)
    for name in chosen:
        examples = anyio.run(_all_examples, args.out, _examples_template(VARIANTS[name]))
        model, row = _train(args.out, name, examples)
        table = anyio.run(_fidelity, args.out, {"after": model})
        row["fidelity"] = {split: rows["after"] for split, rows in table.items()}
        row["baselines"] = {split: {k: v for k, v in rows.items() if k != "after"} for split, rows in table.items()}
        variants[name] = {**row, "run": run}
        figures = {split: {k: row["fidelity"][split][k] for k in ("reward_accuracy", "done_accuracy", "similarity",
                   "f1", "failures")} for split in row["fidelity"]}  # fmt: skip
        print(json.dumps({"variant": name, "train_loss": row["train_loss"], **figures}), flush=True)
        if args.commit_results:  # after each variant: a run cut short keeps what it measured
            RESULTS.write_text(json.dumps(results, indent=1) + "\n")
            print(f"wrote {RESULTS} ({name})", file=sys.stderr)
    return 0


def bare_template() -> Any:
    """The default's template without its system message (``instructions=False``, id suffix ``:bare``)."""
    return dataclasses.replace(before_template(), instructions=False)


def acts_template() -> Any:
    """The default's template naming every earlier action of the episode (``past_actions``, id suffix ``:acts``)."""
    return dataclasses.replace(before_template(), past_actions=True)


def _examples_template(variant: Variant) -> Any:
    """The template a variant's examples are built with ("bare" drops the system message from the default's)."""
    return acts_template() if variant.template == "acts" else before_template()


def _without_system_message(examples: list[Any]) -> list[Any]:
    """The examples as the bare template prompts: the same queries (from the store's own embeddings, as
    ``sim_build.py``'s "after" examples), the system message left out."""
    return [
        dataclasses.replace(example, messages=tuple(m for m in example.messages if m.role != "system"))
        for example in examples
    ]


async def _all_examples(out: Path, template: Any) -> list[Any]:
    """Every example of ``out``'s "train" store (the store collected with today's embedder, which ``_fidelity``
    retrieves from) with ``template``, the held-out pairs left out; none sampled away. Cached per template."""
    from dreamgym.jobs.sim_default import held_out_pairs
    from dreamgym.replay import LmdbReplayStore
    from dreamgym.simulator import build_sft_examples

    suffix = template.template_id.removeprefix(before_template().template_id).replace(":", "-")
    cached = out / f"examples_all{suffix}.pickle"  # the default's: examples_all.pickle, as before
    if cached.exists():
        return list(pickle.loads(cached.read_bytes()))
    held_out = held_out_pairs()
    async with LmdbReplayStore(out / "train") as store:
        built = await build_sft_examples(store, template, exclude_task_seeds=held_out)
    cached.write_bytes(pickle.dumps(built))
    return built


def _train(out: Path, name: str, examples: list[Any]) -> tuple[Path, dict[str, Any]]:
    """The variant's model directory and its figures. A model already in ``out`` under the variant's name is scored
    again, not retrained, where its metadata records the variant's training config (but for settings that change only
    the time) and the digest of the variant's examples: one ``sim_build.py`` trained, copied there, is kept too."""
    from dreamgym.jobs.sim_default import balance
    from dreamgym.simulator import examples_digest, read_metadata, train_experience_model, weights_digest

    variant = VARIANTS[name]
    config = dataclasses.replace(
        before_training(),
        loop=variant.loop,
        group_by_length=variant.grouped,
        epochs=variant.epochs,
        dtype=variant.dtype,
        share_prefix=variant.share_prefix,
        outcome_weight=variant.outcome_weight,
        scratch=dataclasses.replace(before_training().scratch, split=variant.split),
        seed=variant.seed,
        activation_checkpointing=False,  # same weights, less compute (simulator.SAME_WEIGHTS); on before 2026-12-04
    )
    template = bare_template() if variant.template == "bare" else _examples_template(variant)
    target = out / f"model-{name}"
    share = variant.no_op_share
    if variant.no_ops == "contrast":
        kept = balance(examples, no_op_share=share, contrast=True)
    else:
        kept = before_balance(examples, no_op_share=share)
    chosen = _without_system_message(kept) if variant.template == "bare" else kept
    meta = read_metadata(target)
    if not same_weights(meta.get("config"), config) or meta.get("examples_digest") != examples_digest(chosen):
        train_experience_model(chosen, target, config, template=template)
    meta = read_metadata(target)
    return target, {
        "loop": variant.loop,
        "grouped": variant.grouped,
        "share_prefix": variant.share_prefix,
        "no_ops": variant.no_ops,
        "no_op_share": share,
        "outcome_weight": variant.outcome_weight,
        "split": variant.split,
        "seed": variant.seed,
        "epochs": variant.epochs,
        "precision": meta.get("precision", "float32"),
        "template": template.template_id,
        "digest": weights_digest(target),
        "examples_digest": meta.get("examples_digest"),
        "train_loss": meta.get("train_loss"),
        "examples": meta.get("examples"),
        "train_tokens": meta.get("train_tokens"),  # both epochs, the shared prefix counted once per micro-batch
        "train_seconds": meta.get("train_seconds"),
    }


if __name__ == "__main__":
    sys.exit(main())
