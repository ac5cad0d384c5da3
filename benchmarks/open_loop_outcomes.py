"""Does the simulator pay the real wins and only them when it plays an episode on its own pages? Per task, open loop.

    python benchmarks/open_loop_outcomes.py --from .cache/demo [--seeds 2000-2039] [--policy NAME=DIR]
        [--model DIR] [--commit-results]

A synthetic episode starts from a real first page; every later page the
simulator is asked about is one it wrote. This benchmark replays real episodes
through the experience model that way (open loop: the real actions, the
simulator's own pages, stopped where the simulator ends the episode) and
teacher-forced at the last step (the real page before the last action), and
counts per task the real wins it paid and the real losses it paid, beside two
baselines measured on the same episodes: always-0 (pays nothing) and "pay
whenever the episode ends" (pays every episode that the page ended).

The episodes are played on the **validation seeds** (``--seeds``, within
2000-2199; never in any store the simulator trains or retrieves from) into
their own stores under ``--episodes``, collected once and reused:

- the scripted demonstrator (a win) and the near-miss demonstrator (a loss one
  detail short of it) on every (task, seed), so each task has wins and losses;
- every ``--policy NAME=DIR`` at temperature ``--temperature`` (default: the
  kept demo's warm start ``policy`` and its trained ``train/final``), one episode
  per (task, seed): the states the policies reach, not only the demonstrator's.

Each model is scored once per ``--arm`` (default: ``judge``): ``model``
takes the model's own reward and end; ``judge`` the outcome judge's
(:class:`dreamgym.simulator.OutcomeJudge`: the one saved with the model, or
one fit now on the kept demo's store, held-out pairs left out, where the
model has none or ``--fit-judge`` asks); ``+copy`` also keeps the removal and
context lines of the model's diffs to copies of the page's lines as it
decodes (``ExperienceModelConfig.copy_page_lines``). Per task, the model's answer counters say how its
answers went: predictions asked of it, first (greedy) answers that applied as
written (with ``+copy``: and that the guard did not steer, ``Completion.steered``),
malformed, repaired and steered answers, pages the rules wrote in their place
(with the judge), salvaged answers and predictions that failed; the first
answers kept as written (``first_answer_kept_share``: applied, not steered, and
no rule rewrote their page; an answer that checks the wrong box applies, and
the check rule then writes the page); and how many
of the pages it wrote open loop gave an element of the page before another
role or name (``pages_renaming_an_element``: a page keeps what its elements
are, only what they hold and whether they are checked changes).

``--from`` is the ``out`` of a finished ``dreamgym demo``: its store is what
the simulator retrieves from, its ``experience-model`` (and its last refit,
``train/sim-refits/refit-N``) what is scored, unless ``--model`` names others.
``--commit-results`` writes ``benchmarks/results/NAME.json`` with the date, the
commit and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import _report as report
import anyio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
VALIDATION = range(2000, 2200)
ANSWER_COUNTERS = ("predictions", "clean_first_answers", "malformed_answers", "repaired_answers", "steered_answers",
                   "rule_pages", "salvaged_answers", "failed_predictions")  # fmt: skip
"""The model's counters (``ExperienceModelStats``) read per task: how its answers went, first answers included."""
ARMS = ("model", "model+copy", "judge", "judge+copy")
"""Whose reward and end (the model's or the judge's), and whether its diff lines are kept to the page's."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="kept", type=Path, default=ROOT / ".cache" / "demo", help="a finished demo")
    parser.add_argument("--seeds", default="2000-2039", help="validation seeds (within 2000-2199), e.g. 2000-2039")
    parser.add_argument("--policy", action="append", default=[], metavar="NAME=DIR",
                        help="a policy whose episodes are replayed (default: the demo's warm start and trained "
                             "policy); repeatable")  # fmt: skip
    parser.add_argument("--temperature", type=float, default=0.5, help="the policies' sampling temperature")
    parser.add_argument("--model", action="append", type=Path, default=[], help="an experience model; repeatable")
    parser.add_argument("--episodes", type=Path, default=ROOT / ".cache" / "bench" / "open_loop",
                        help="where the validation episodes are collected (once)")  # fmt: skip
    parser.add_argument("--fit-judge", action="store_true", help="fit the judge on the kept store, not the saved one")
    parser.add_argument("--arm", action="append", choices=ARMS, help="default: judge; repeatable")
    parser.add_argument("--commit-results", action="store_true", help="also write benchmarks/results/NAME.json")
    parser.add_argument("--name", default="open_loop_outcomes", help="the results file's name, without .json")
    args = parser.parse_args()
    seeds = _seeds(parser, args.seeds)
    policies = dict(_named(parser, text) for text in args.policy) or _demo_policies(args.kept)
    models = args.model or _demo_models(args.kept)
    for model in models:
        if not (model / "config.json").exists():
            parser.error(f"no experience model at {model}")
    results: dict[str, Any] = report.provenance() | {
        "kept": str(args.kept), "seeds": [seeds[0], seeds[-1]], "policies": {k: str(v) for k, v in policies.items()},
        "temperature": args.temperature,
    }  # fmt: skip
    episodes = anyio.run(_collect, args.kept, args.episodes, seeds, policies, args.temperature)
    rows = []
    for model in models:
        for arm in args.arm or ["judge"]:
            judged, copy = arm.startswith("judge"), arm.endswith("+copy")
            counts, judge = anyio.run(_replay, args.kept, model, judged, copy, episodes, args.fit_judge)
            rows += _rows(counts, model, judged, judge, copy)
            if args.commit_results:
                (RESULTS / f"{args.name}.json").write_text(json.dumps({**results, "rows": rows}, indent=1) + "\n")
    if args.commit_results:
        print(f"wrote {RESULTS / f'{args.name}.json'}", file=sys.stderr)
    return 0


def _seeds(parser: argparse.ArgumentParser, text: str) -> list[int]:
    low, _, high = text.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    if not set(seeds) <= set(VALIDATION):
        parser.error("--seeds must lie within the validation seeds 2000-2199")
    return seeds


def _named(parser: argparse.ArgumentParser, text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if not path or not (Path(path) / "config.json").exists():
        parser.error(f"--policy wants NAME=DIR with a model at DIR, not {text!r}")
    return name, Path(path)


def _demo_policies(kept: Path) -> dict[str, Path]:
    found = {"warm start": kept / "policy", "trained": kept / "train" / "final"}
    return {name: path for name, path in found.items() if (path / "config.json").exists()}


def _demo_models(kept: Path) -> list[Path]:
    refits = sorted((kept / "train" / "sim-refits").glob("refit-*"), key=lambda p: int(p.name.split("-")[1]))
    return [kept / "experience-model", *refits[-1:]]


async def _collect(kept: Path, out: Path, seeds: list[int], policies: dict[str, Path], temperature: float) -> Any:
    """The validation episodes, by source (``demonstrator``, ``near miss``, each policy's name): collected into
    ``out`` where they are missing, read back otherwise."""
    import shutil

    from dreamgym.jobs._demo_settings import DemoSettings, demo_tasks
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig
    from dreamgym.simulator import real_episodes

    settings = _settings(kept)
    task_ids = {task.task_id for task in demo_tasks(settings)}
    names = list(settings.tasks)
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "collected.json"
    wanted = {"tasks": names, "seeds": seeds, "policies": {k: str(v) for k, v in policies.items()},
              "temperature": temperature}  # fmt: skip
    if not stamp.exists() or json.loads(stamp.read_text()) != wanted:
        shutil.rmtree(out / "store", ignore_errors=True)
        await _collect_scripted(out / "store", names, seeds, settings.max_steps)
        for name, directory in policies.items():
            await _collect_policy(DemoSettings(out=_policy_dir(out, name), tasks=settings.tasks,
                                               held_out_seeds=tuple(seeds), eval_temperature=temperature,
                                               max_steps=settings.max_steps), directory, name)  # fmt: skip
        stamp.write_text(json.dumps(wanted))
    by_source: dict[str, list[list[Any]]] = {}
    stores = [("scripted", out / "store"), *[(name, _policy_dir(out, name) / "eval-store") for name in policies]]
    for source, path in stores:
        async with LmdbReplayStore(path, embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False),
                                   readonly=True) as store:  # fmt: skip
            for episode in await real_episodes(store):
                kind = source if source != "scripted" else ("near miss" if "near" in episode[0].policy_id else
                                                            "demonstrator")  # fmt: skip
                if episode[0].task_id in task_ids:
                    by_source.setdefault(kind, []).append(episode)
    return by_source


def _policy_dir(out: Path, name: str) -> Path:
    """Where a policy's validation episodes are collected (its own demo ``out``)."""
    return out / name.replace(" ", "-")


def _settings(kept: Path) -> Any:
    from dreamgym.jobs._demo_settings import DemoSettings

    recorded = json.loads((kept / "report.json").read_text())["settings"] if (kept / "report.json").exists() else {}
    tasks = tuple(recorded.get("tasks", DemoSettings().tasks))
    return DemoSettings(out=kept, tasks=tasks, max_steps=int(recorded.get("max_steps", DemoSettings().max_steps)))


async def _collect_scripted(path: Path, names: list[str], seeds: list[int], max_steps: int) -> None:
    from dreamgym.jobs.sim_default import CollectPlan, collect_miniwob
    from dreamgym.replay import HashingEmbedder, LmdbReplayStore, StoreConfig

    plan = CollectPlan(tasks=tuple(names), seeds=tuple(seeds), explorers=0, near_misses=1, max_steps=max_steps)
    async with LmdbReplayStore(path, embedder=HashingEmbedder(64), config=StoreConfig(auto_index=False)) as store:
        await collect_miniwob(store, plan)


async def _collect_policy(settings: Any, directory: Path, label: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dreamgym.jobs import demo as demo_job
    from dreamgym.jobs._demo_policy import PolicyWeights
    from dreamgym.simulator import weights_digest

    weights = PolicyWeights(
        directory=directory,
        model=AutoModelForCausalLM.from_pretrained(str(directory)),
        tokenizer=AutoTokenizer.from_pretrained(str(directory)),
        digest=weights_digest(directory),
    )
    await demo_job._evaluate(settings, weights, label)


async def _replay(
    kept: Path, model_dir: Path, judged: bool, copy: bool, by_source: dict[str, list[list[Any]]], fit: bool = False
) -> Any:
    """Per (task, source), the counts of wins, losses, and those paid open loop and teacher-forced; and the
    first answers' fate. The judge, where asked: the model's own, or one fit now on the kept store."""
    from dreamgym.jobs._demo_settings import held_out_pairs
    from dreamgym.replay import LmdbReplayStore, StoreConfig
    from dreamgym.simulator import OutcomeJudge, SimulatorConfig, fit_store_judge, load_experience_model

    settings = _settings(kept)
    held = tuple(held_out_pairs(settings))
    counts: Counter[tuple[str, str, str]] = Counter()
    async with LmdbReplayStore(settings.store_dir, embedder=settings.embedder, config=StoreConfig(auto_index=False),
                               readonly=True) as store:  # fmt: skip
        model = load_experience_model(model_dir, judge=judged and not fit)
        model.config = dataclasses.replace(model.config, copy_page_lines=copy)
        if judged and model.judge is None:
            model.judge = await fit_store_judge(store, exclude_task_seeds=held)
        judge: OutcomeJudge | None = model.judge
        config = SimulatorConfig(neighbours=model.config.template.neighbours, exclude_task_seeds=held)
        limiter = anyio.CapacityLimiter(8)

        async def one(source: str, episode: list[Any]) -> None:
            async with limiter:
                await _one_episode(model, store, config, source, episode, counts)

        tasks = sorted({episode[0].task_id for episodes in by_source.values() for episode in episodes})
        for task_id in tasks:  # task by task, so the model's answer counters split by task exactly
            before = dataclasses.replace(model.stats)
            async with anyio.create_task_group() as group:
                for source, episodes in by_source.items():
                    for episode in episodes:
                        if episode[0].task_id == task_id:
                            group.start_soon(one, source, episode)
            name = task_id.split("/")[-1]
            for key in ANSWER_COUNTERS:
                counts[(name, "all", key)] += getattr(model.stats, key) - getattr(before, key)
    return counts, judge


async def _one_episode(model: Any, store: Any, config: Any, source: str, episode: list[Any], counts: Counter) -> None:
    from dreamgym.core.types import Task
    from dreamgym.simulator import SimulatedEnv

    first, last = episode[0], episode[-1]
    name = first.task_id.split("/")[-1]
    task = Task(task_id=first.task_id, instruction=first.observation.goal or first.task_id, site=first.site)
    env = SimulatedEnv(model, store=store, config=config)
    won = sum(step.reward for step in episode) >= 0.5
    outcome = "won" if won else "lost"
    counts[(name, source, outcome)] += 1
    counts[(name, source, f"{outcome} ended")] += last.terminated
    page, paid, history = first.observation, 0.0, []
    for real in episode:
        result = await env.predict_step(task, history, page, real.action, seed=real.seed)
        counts[(name, "all", "pages a rule rewrote")] += _rule_rewrote(result.info)
        counts[(name, "all", "pages predicted")] += 1
        counts[(name, "all", "pages renaming an element")] += _renames(page.state, result.observation.state)
        paid += result.reward
        if result.truncated or result.terminated:
            break
        history.append((page, real.action))
        page = result.observation
    forced_history = [(step.observation, step.action) for step in episode[:-1]]
    forced = await env.predict_step(task, forced_history, last.observation, last.action, seed=last.seed)
    counts[(name, "all", "pages a rule rewrote")] += _rule_rewrote(forced.info)
    await env.aclose()
    counts[(name, source, f"{outcome} open-loop paid")] += paid >= 0.5
    counts[(name, source, f"{outcome} teacher-forced paid")] += forced.reward >= 0.5


def _rule_rewrote(info: dict[str, Any]) -> bool:
    """Whether a rule that writes the page (typed text, a checked box, a selected option) changed the prediction."""
    from dreamgym.simulator._rules import PAGE_RULES

    return any(rule in info.get("rules", ()) for rule, _ in PAGE_RULES.values())


def _renames(before: str, after: str) -> bool:
    """Whether an element of ``before`` is in ``after`` with another role or name (a page keeps what its elements
    are; what they hold and whether they are checked may change)."""
    from dreamgym.core.state import flatten, parse_state

    def heads(state: str) -> dict[str, tuple[str, str]]:
        return {item.element.id: (item.element.role, item.element.name)
                for item in flatten(parse_state(state)) if item.element.id}  # fmt: skip

    old, new = heads(before), heads(after)
    return any(element in new and new[element] != head for element, head in old.items())


def _rows(counts: Counter, model: Path, judged: bool, judge: Any, copy: bool) -> list[dict[str, Any]]:
    rows = []
    tasks = sorted({task for task, _, _ in counts})
    label = f"{model.name}{' + judge' if judged else ''}{' + copy' if copy else ''}"
    for task in [*tasks, "all"]:
        got: Counter[str] = Counter()
        by_source: dict[str, Counter[str]] = {}
        for (name, source, key), n in counts.items():
            if task in (name, "all"):
                got[key] += n
                if source != "all":
                    by_source.setdefault(source, Counter())[key] += n
        wins, losses = got["won"], got["lost"]
        # A first answer the rules rewrote: a page rule fired on its page. Every rule page is one (the page as
        # it was, which the rule then writes), so the clean first answers a rule rewrote are the rest.
        kept = got["clean_first_answers"] - (got["pages a rule rewrote"] - got["rule_pages"])
        open_loop = got["won open-loop paid"] / wins if wins else 0.0
        row = report.emit(
            f"real wins paid open loop ({label}, {task})", open_loop, "fraction",
            "pay whenever the episode ends", got["won ended"] / wins if wins else 0.0,
            model=str(model), judge=judged, judge_id=judge.judge_id if judge is not None else None, copy_lines=copy,
            task=task,
            wins=wins, losses=losses,
            wins_paid_open_loop=got["won open-loop paid"], wins_paid_teacher_forced=got["won teacher-forced paid"],
            losses_paid_open_loop=got["lost open-loop paid"],
            losses_paid_teacher_forced=got["lost teacher-forced paid"],
            losses_share_paid_open_loop=round(got["lost open-loop paid"] / losses, 4) if losses else None,
            losses_paid_when_paying_every_end=got["lost ended"],
            always_0="pays 0 of the wins and 0 of the losses",
            **{f"answers_{key}": got[key] for key in ANSWER_COUNTERS},
            pages_predicted_open_loop=got["pages predicted"],
            pages_renaming_an_element=got["pages renaming an element"],
            first_answer_clean_share=round(got["clean_first_answers"] / got["predictions"], 4)
            if got["predictions"] else None,
            answers_kept_as_written=kept,
            first_answer_kept_share=round(kept / got["predictions"], 4) if got["predictions"] else None,
            by_source={source: {k: c[k] for k in ("won", "lost", "won open-loop paid", "lost open-loop paid")}
                       for source, c in sorted(by_source.items())},
        )  # fmt: skip
        rows.append(row)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
