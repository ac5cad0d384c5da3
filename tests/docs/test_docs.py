"""The docs: the README stays short, the site builds strictly, and every example in the README and the guides runs
as written.

Examples run page by page, in a fresh folder, in the order the page gives them (a guide is followed as a
newcomer follows it: a store collected in one block is read in the next). Python blocks run as scripts; shell
blocks run line by line in bash, except the commands :data:`SKIPPED` names, each with the reason it cannot run
here and the test that runs a tiny variant of it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = (
    README,
    DOCS / "getting-started.md",
    *sorted((DOCS / "guides").glob("*.md")),
    *sorted((DOCS / "concepts").glob("*.md")),
)
"""The pages whose examples run: the README, getting started, the guides and the concepts."""

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Skipped:
    """Commands a pattern matches, which do not run verbatim here: why, and the test of a tiny variant."""

    pattern: str
    reason: str
    variant: str
    """``tests/PATH::test_name``: the test that runs a tiny variant of the command (or, for the test suite itself,
    the CI script that runs it)."""


SKIPPED = (
    Skipped(r"^make demo\b", "the full demo: about 11 minutes on 2 cores",
            "tests/test_demo.py::test_demo_runs_every_phase_and_reports_honest_counts"),
    Skipped(r"^make test\b", "the whole test suite: CI runs it", ".ci/run"),
    Skipped(r"--(sim|openai|teacher|judge|answer-judge)-url\b|^vllm |sglang", "needs a served model",
            "tests/test_cli.py::test_rollout_on_a_served_experience_model"),
    Skipped(r"--site |webarena:", "needs your own site (or WebArena's) served",
            "tests/bridge/test_any_site_cli.py::test_every_job_on_a_users_own_site_with_the_same_task_arguments"),
    Skipped(r"^dreamgym sim build-default|^make sim-default", "builds the offline default: 16 minutes on 2 cores",
            "tests/simulator/test_sim_default.py::test_build_default_keeps_a_model_of_its_recipe_and_rebuilds_one_of_another_keeping_the_old"),
    Skipped(r"^dreamgym sim (train|eval|check)\b", "trains or runs an experience model on a full store: minutes of CPU",
            "tests/simulator/test_sim_cli.py::test_sim_train_then_eval_beside_the_baselines"),
    Skipped(r"^dreamgym validate\b", "runs an experience model on every step it validates: minutes of CPU",
            "tests/validate/test_validate_cli.py::test_validate_on_miniwob_with_a_model_trained_on_it"),
    Skipped(r"^dreamgym train\b", "GRPO on SmolLM2-135M: about 70 s an update on 2 cores (a GPU's work)",
            "tests/trainer/test_train_cli.py::test_collect_then_sim2real_then_resume"),
    Skipped(r"^torchrun\b", "several training processes",
            "tests/trainer/test_trainer_ranks.py::test_two_ranks_train_on_episodes_only_the_first_plays_and_stores_each_once"),
    Skipped(r"--workers\b", "starts a Ray cluster with a Chromium per worker",
            "tests/runtime/test_workers.py::test_collect_with_workers_stores_every_episode_from_the_workers"),
    Skipped(r"^scripts/gpu_check\.sh\b", "needs a GPU",
            "tests/test_gpu_check.py::test_the_gpu_check_prints_each_figure_beside_its_baseline"),
)  # fmt: skip
"""The commands that do not run verbatim; the first pattern a command matches says why."""


def blocks(page: Path) -> list[tuple[str, str]]:
    """The page's fenced code blocks, in order: (language, text)."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(page.read_text())]


def commands(shell: str) -> list[str]:
    """A shell block's commands: its lines, continuations joined, blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", shell)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def skipped(command: str) -> Skipped | None:
    return next((s for s in SKIPPED if re.search(s.pattern, command)), None)


def run_page(page: Path, folder: Path) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """Run the page's examples in order in ``folder``; each run with what it ran."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "COLUMNS": "120",
    }
    assignments: list[str] = []
    runs: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    for n, (language, text) in enumerate(blocks(page)):
        if language == "python":
            script = folder / f"example_{n}.py"
            script.write_text(text)
            argv = [sys.executable, str(script)]
        elif language == "bash":
            lines = []
            for command in commands(text):
                if re.match(r"^[A-Z_]+=", command):
                    assignments.append(command)
                elif skipped(command) is None:
                    lines.append(command)
            if not lines:
                continue
            argv = ["bash", "-c", "\n".join(["set -euo pipefail", *assignments, *lines])]
            text = "\n".join(lines)
        else:
            continue
        result = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        runs.append((text, result))
        if result.returncode != 0:
            break
    return runs


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_says_what_does_not_work_yet_on_its_first_screen() -> None:
    lines = README.read_text().splitlines()
    assert "## What does not work yet" in lines[:40]


def test_every_relative_link_in_the_readme_points_at_a_file() -> None:
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


@pytest.mark.parametrize("rule", SKIPPED, ids=lambda rule: rule.pattern)
def test_a_skipped_command_names_the_test_that_runs_a_tiny_variant(rule: Skipped) -> None:
    path, _, name = rule.variant.partition("::")
    if not name:
        assert (ROOT / path).is_file()
        return
    tree = ast.parse((ROOT / path).read_text())
    assert name in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


@pytest.mark.parametrize("rule", SKIPPED, ids=lambda rule: rule.pattern)
def test_every_skip_rule_skips_a_command_the_docs_show(rule: Skipped) -> None:
    shown = [c for page in PAGES for language, text in blocks(page) if language == "bash" for c in commands(text)]
    assert any(skipped(command) == rule for command in shown)


def test_help_alone_is_never_the_example_of_a_command() -> None:
    shown = [c for page in PAGES for language, text in blocks(page) if language == "bash" for c in commands(text)]
    assert [c for c in shown if c.endswith(("--help", "-h"))] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_json_example_parses(page: Path) -> None:
    for language, text in blocks(page):
        if language == "json":
            json.loads(text)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_example_on_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    for text, result in run_page(page, tmp_path):
        assert result.returncode == 0, (
            f"{page.name}: this example failed:\n{text}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_site_builds_with_no_broken_link_or_reference(tmp_path: Path) -> None:
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    result = subprocess.run(
        mkdocs, cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    )
    assert result.returncode == 0, result.stderr


def test_every_test_the_reliability_page_names_exists() -> None:
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", (DOCS / "reliability.md").read_text())
    missing = []
    for path, name in named:
        functions = {
            n.name
            for n in ast.walk(ast.parse((ROOT / path).read_text()))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        if name and name not in functions:
            missing.append(f"{path}::{name}")
    assert missing == []


def test_the_version_flag_prints_the_version_pyproject_gives() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out = subprocess.run([sys.executable, "-m", "dreamgym.cli", "--version"], capture_output=True, text=True).stdout
    assert out.strip() == f"dreamgym {version}"


def test_every_results_file_gives_the_benchmarks_page_its_figures() -> None:
    sys.path.insert(0, str(DOCS / "_gen"))
    try:
        import reference  # docs/_gen/reference.py: what the site's build writes the benchmarks page from
    finally:
        sys.path.remove(str(DOCS / "_gen"))
    files = {path.name for path in (ROOT / "benchmarks" / "results").glob("*.json")}
    assert {figure.file for figure in reference.benchmark_figures()} == files
