"""The docs' generated blocks: the command line, the config dataclasses and the benchmark figures.

Each is written from what it documents (the argparse parsers, the dataclasses' fields and their docstrings,
``benchmarks/results/*.json``), so a page that shows one cannot drift from the code or lose its file.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import html
import importlib
import inspect
import itertools
import json
import os
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

CONFIG_PACKAGES = (
    "dreamgym.bridge",
    "dreamgym.simulator",
    "dreamgym.agents",
    "dreamgym.replay",
    "dreamgym.runtime",
    "dreamgym.trainer",
    "dreamgym.validate",
    "dreamgym.jobs",
)
"""The packages whose public config dataclasses (``__all__`` names ending in ``Config`` or ``Settings``) are listed."""

EXTRA_CONFIGS = (("dreamgym.jobs.demo", "DemoSettings"),)
"""Config dataclasses a command reads that their package does not re-export."""


# --- the command line ---------------------------------------------------------------------------------------------


def cli_reference() -> str:
    """Every ``dreamgym`` command and subcommand with its ``--help``, from the parsers themselves."""
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal's width: one width for every build
    from dreamgym.cli import _parser

    parser = _parser(["train"])  # train's TrainConfig flags are added only when the command line runs train
    parts: list[str] = []
    for name, sub in _commands(parser, "dreamgym"):
        parts.append(f"## `{name}`\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def _commands(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _commands(sub, f"{name} {sub_name}")


# --- the config dataclasses ---------------------------------------------------------------------------------------


def config_classes() -> list[tuple[str, type]]:
    """Every public config dataclass, in package order, with the name users import it by."""
    found: list[tuple[str, type]] = []
    for package in CONFIG_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if dataclasses.is_dataclass(obj) and isinstance(obj, type) and name.endswith(("Config", "Settings")):
                found.append((f"{package}.{name}", obj))
    for module_name, name in EXTRA_CONFIGS:
        found.append((f"{module_name}.{name}", getattr(importlib.import_module(module_name), name)))
    return found


def field_docstrings(cls: type) -> dict[str, str]:
    """Each field's docstring: the string literal right below it in the class body, whole."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def configs_reference() -> str:
    """A section per config dataclass: its docstring, then a table of its fields (type, default, docstring)."""
    parts: list[str] = []
    for public, cls in config_classes():
        doc = inspect.cleandoc(cls.__doc__ or "")
        docs = field_docstrings(cls)
        rows = ["| field | type | default | what it is |", "|---|---|---|---|"]
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            rows.append(
                f"| `{field.name}` | {_code(str(field.type))} | {_default(field)} | {_cell(docs.get(field.name, ''))} |"
            )
        parts.append(f"## `{public}`\n\n{_rst_to_md(doc)}\n\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return _code(repr(field.default))
    if field.default_factory is not dataclasses.MISSING:
        return _code(repr(field.default_factory()))
    return "required"


def _code(text: str) -> str:
    """Code in a table cell: HTML, since a Markdown code span would show the escape a pipe needs there."""
    return "<code>" + html.escape(" ".join(text.split())).replace("|", "&#124;") + "</code>"


_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _rst_to_md(text: str) -> str:
    """reST's roles (``:func:`x```) and double backticks as Markdown code."""
    return _ROLE.sub(r"``\1``", text).replace("``", "`")


def _cell(text: str) -> str:
    return " ".join(_rst_to_md(text).split()).replace("|", "\\|")


# --- the benchmark figures ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """One row of the benchmarks page: a figure beside its same-run baseline, and where it came from."""

    file: str
    figure: str
    value: str
    baseline: str
    ratio: str
    date: str
    commit: str
    command: str


def _number(value: Any, unit: str = "") -> str:
    if isinstance(value, float):
        text = f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    else:
        text = f"{value:,}" if isinstance(value, int) else str(value)
    return f"{text} {unit}".strip()


def _ratio(value: Any, baseline: Any) -> str:
    if isinstance(value, int | float) and isinstance(baseline, int | float) and baseline:
        return f"{value / baseline:.3g}"
    return "–"


def _rows_figures(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    """The rows ``benchmarks/_report.emit`` printed, wherever a file keeps a list of them."""
    for value in data.values():
        if isinstance(value, list) and value and all(isinstance(r, dict) and "figure" in r for r in value):
            for row in value:
                unit = row.get("unit", "")
                yield (
                    str(row["figure"]),
                    _number(row["value"], unit),
                    f"{row.get('baseline', '')}: {_number(row.get('baseline_value', ''), unit)}",
                    _number(row["ratio"]) if row.get("ratio") is not None else "–",
                )


def _success(s: dict[str, Any]) -> str:
    return f"{s['successes']}/{s['n']}"


def _first_run(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    yield (
        "fresh clone to report: setup + `dreamgym demo`",
        _number(data["total_s"], "s"),
        f"the 15-minute target: {_number(data['target_s'], 's')}",
        _ratio(data["total_s"], data["target_s"]),
    )
    before, after = data["before"], data["after"]
    yield (
        "demo: held-out success after training",
        _success(after),
        f"before training: {_success(before)}",
        _ratio(after["successes"], before["successes"]),
    )
    paired = data.get("paired")
    if paired:
        yield (
            f"demo: pairs solved only after training (exact McNemar p = {paired['p_value']:.1g})",
            str(paired["only_after"]),
            f"pairs solved only before: {paired['only_before']}",
            _ratio(paired["only_after"], paired["only_before"]),
        )


def _learning_curve(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    start, end = data["start"], data["end"]
    yield (
        f"held-out success after {data['updates']} real GRPO updates",
        _success(end),
        f"the warm start: {_success(start)}",
        _ratio(end["successes"], start["successes"]),
    )


def _train_success(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    for task, spans in data["tasks"].items():
        first, last = spans[0], spans[-1]
        yield (
            f"sampled training success from update {last['from_update']}, {task}",
            _number(last["success"]),
            f"updates {first['from_update']}–{spans[1]['from_update'] - 1 if len(spans) > 1 else ''}: "
            f"{_number(first['success'])}",
            _ratio(last["success"], first["success"]),
        )


def _sim2real(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    arms = {arm["arm"]: arm for arm in data["arms"]}
    real = arms.get("real", {}).get("end_mean")
    for name, arm in arms.items():
        yield (
            f"held-out success at the end, {name} arm (mean of {arm['seeds']} seeds; "
            f"{arm['real_transitions_vs_real_arm']:.0%} of the real arm's real transitions)",
            _number(arm["end_mean"]),
            f"real-only arm: {_number(real)}" if name != "real" else f"the warm start: {_number(arm['start_mean'])}",
            _ratio(arm["end_mean"], real if name != "real" else arm["start_mean"]),
        )


def _sim_arms(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    for arm in data["arms"]:
        deciding = arm.get("deciding") or {}
        yield (
            f"held-out reward accuracy, arm {arm['arm']} (deciding steps {deciding.get('right')}/"
            f"{deciding.get('steps')})",
            _number(arm["reward_accuracy"]),
            f"always 0: {_number(arm['always_0_reward_accuracy'])}",
            _ratio(arm["reward_accuracy"], arm["always_0_reward_accuracy"]),
        )


def _paired_eval(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    for demo in data["demos"]:
        for row in (demo["success"], demo["paired"]):
            unit = row.get("unit", "")
            yield (
                row["figure"],
                _number(row["value"], unit),
                f"{row['baseline']}: {_number(row['baseline_value'], unit)}",
                _number(row["ratio"]) if row.get("ratio") is not None else "–",
            )


def _sim_ablation(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    for name, variant in data["variants"].items():
        model = variant["fidelity"]["all"]
        copy = variant["baselines"]["all"]["copy_top_retrieved"]
        yield (
            f"held-out reward accuracy, recipe {name}",
            _number(model["reward_accuracy"]),
            f"copy top retrieved: {_number(copy['reward_accuracy'])}",
            _ratio(model["reward_accuracy"], copy["reward_accuracy"]),
        )


def _sft_profile(data: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    profile = data["profile"]
    bare = profile["bare_packed_tokens_per_s"]
    for loop, row in profile.items():
        if isinstance(row, dict) and "tokens_per_s" in row:
            yield (
                f"SFT tokens/s, {loop} ({row['precision']})",
                _number(row["tokens_per_s"], "tokens/s"),
                f"bare packed forward and backward: {_number(bare, 'tokens/s')}",
                _ratio(row["tokens_per_s"], bare),
            )


EXTRACTORS: dict[str, Callable[[dict[str, Any]], Iterator[tuple[str, str, str, str]]]] = {
    "first_run": _first_run,
    "learning_curve": _learning_curve,
    "learning_curve_text_tasks": _learning_curve,
    "learning_curve_train_success": _train_success,
    "learning_curve_text_tasks_train_success": _train_success,
    "sim2real_miniwob": _sim2real,
    "demo_sim_arms": _sim_arms,
    "demo_sim_arms_continue": _sim_arms,
    "demo_sim_arms_draw2": _sim_arms,
    "demo_sim_refit": _sim_arms,
    "paired_eval": _paired_eval,
    "paired_eval_labels_only": _paired_eval,
    "paired_eval_replay": _paired_eval,
    "sim_ablation": _sim_ablation,
    "sim_build_profile": _sft_profile,
}
"""How a results file without emitted rows gives its figures, by the file's stem; the others list their rows."""


def _provenance(data: dict[str, Any], stem: str) -> dict[str, str]:
    if stem == "sim_ablation":  # one run per variant: the newest variant's run stands for the file
        runs = [v["run"] for v in data["variants"].values() if isinstance(v.get("run"), dict)]
        data = max(runs, key=lambda run: run.get("date", "")) if runs else data
    return {
        "date": str(data.get("date", "")),
        "commit": str(data.get("commit", ""))[:7],
        "command": str(data.get("command", "")),
    }


def benchmark_figures(results: Path = RESULTS) -> list[Figure]:
    """Every figure of every results file; a file that gives none is an error (it quotes nothing)."""
    figures: list[Figure] = []
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        extract = EXTRACTORS.get(path.stem, _rows_figures)
        rows = list(extract(data))
        if not rows:
            raise ValueError(f"{path.name} gives no figure: give it emitted rows or an extractor in {__file__}")
        where = _provenance(data, path.stem)
        figures.extend(Figure(file=path.name, figure=f, value=v, baseline=b, ratio=r, **where) for f, v, b, r in rows)
    return figures


def benchmarks_table() -> str:
    """The benchmarks page's table, one section per results file."""
    parts: list[str] = []
    for file, group in itertools.groupby(benchmark_figures(), key=lambda f: f.file):
        figures = list(group)
        first = figures[0]
        rows = ["| figure | value | baseline (same run) | ratio |", "|---|---|---|---|"]
        rows += [f"| {_cell(f.figure)} | {_cell(f.value)} | {_cell(f.baseline)} | {f.ratio} |" for f in figures]
        parts.append(
            f"### `{file}`\n\n{first.date}, commit `{first.commit}`: `{first.command}`\n\n" + "\n".join(rows) + "\n"
        )
    return "\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "configs": configs_reference,
    "benchmarks": benchmarks_table,
}
"""The blocks a page can ask for with ``<!-- generated: NAME -->``."""
