"""Small record builders, the command-line runner and a report-page opener shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dreamgym.agents import INDEX_TOKENS
from dreamgym.bridge import BrowserPool
from dreamgym.core import Observation, Step, Task, parse_action
from dreamgym.core.progress import Phase


def make_step(
    index: int = 0,
    *,
    source: str = "real",
    task_id: str = "task-a",
    episode_id: str = "ep-0",
    site: str = "miniwob",
    seed: int | None = 0,
    state: str | None = None,
    action: str = "click [e1]",
) -> Step:
    """A small valid step; ``state`` defaults to a page that differs per index."""
    text = state if state is not None else f'[e1] button "Button {index}"\n[e2] textbox "Name": value {index}'
    return Step(
        source=source,  # type: ignore[arg-type]
        task_id=task_id,
        episode_id=episode_id,
        step_index=index,
        seed=seed,
        site=site,
        observation=Observation(state=text, url=f"http://127.0.0.1/{index}"),
        action=parse_action(action),
        next_observation=Observation(state=text + "\ntext: clicked"),
        reward=0.0,
        experience_model_id="test-model" if source == "synthetic" else "",
    )


def dreamgym(
    *args: str, check: bool = True, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``dreamgym ARGS`` as a user would, in a fresh process; ``check`` fails the test on a non-zero exit."""
    result = subprocess.run(
        [sys.executable, "-m", "dreamgym.cli", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"dreamgym {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def warm_index_labels(model: Any, tokenizer: Any, task: Task, pages: Sequence[Observation], *, steps: int = 30) -> None:
    """Teach a fresh tiny ``index`` policy where its answers live (in place, a few Adam steps).

    A randomly initialised model spreads its first token over the whole
    vocabulary, so almost every draw labels no choice. This raises the
    probability of the page's label tokens, taken together, after each page's
    first prompt, leaving the choice among them to the model: the tests'
    stand-in for a warm start.
    """
    import torch

    from dreamgym.agents import LocalPolicy, LocalPolicyConfig

    policy = LocalPolicy(model, tokenizer, digest="warm", config=LocalPolicyConfig(mode="index"))
    rows = []
    for page in pages:
        labels = [policy.turns.encode(label)[0] for label in INDEX_TOKENS[: len(policy.choices(task, page))]]
        rows.append((policy.input_ids(task, [], page), labels))
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = torch.zeros(())
        for ids, labels in rows:
            logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            loss = loss - torch.logsumexp(logprobs[labels], dim=0)
        optimizer.zero_grad()
        (loss / len(rows)).backward()
        optimizer.step()
    model.eval()


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenedPage:
    """What Chromium saw opening a local report page."""

    problems: list[str]
    """Console errors and warnings, and uncaught page errors."""
    requests: list[str]
    """Every URL the page asked for (its own ``file://`` address first)."""
    probe: Any
    """What the JavaScript ``probe`` returned."""


OVERFLOWING_CHARTS = """() => [...document.querySelectorAll('svg')].filter(svg => {
    const box = svg.getBoundingClientRect();
    return [...svg.querySelectorAll('rect,text,circle,polyline')].some(el => {
        const r = el.getBoundingClientRect();
        return r.right > box.right + 1 || r.bottom > box.bottom + 1;
    });
}).length"""
"""A page probe: how many SVG charts draw outside their own box."""


DEMO_PAGE_PROBE = f"""() => ({{
    banner: document.querySelector('div.banner').innerText,
    headings: [...document.querySelectorAll('h2')].map(h => h.innerText),
    episodes: document.querySelectorAll('div.episode').length,
    sides: document.querySelectorAll('div.episode div.side').length,
    overflowing: ({OVERFLOWING_CHARTS})(),
    wider: document.documentElement.scrollWidth > window.innerWidth,
}})"""
"""What the demo page's tests read from Chromium: the verdict, the sections, the examples, the layout."""


@asynccontextmanager
async def watched_page(pool: BrowserPool, path: Path) -> AsyncIterator[tuple[Any, OpenedPage]]:
    """The local page at ``path``, opened in one of ``pool``'s contexts, and what it does while open: console
    errors and warnings, page errors and every request (``probe`` stays ``None``); closed on leaving."""
    seen = OpenedPage(problems=[], requests=[], probe=None)
    async with pool.context() as lease:
        page = await lease.context.new_page()
        page.on("console", lambda m: seen.problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: seen.problems.append(str(e)))
        page.on("request", lambda r: seen.requests.append(r.url))
        await page.goto(path.as_uri())
        try:
            yield page, seen
        finally:
            await page.close()


async def open_page(pool: BrowserPool, path: Path, probe: str) -> OpenedPage:
    """Open the local page at ``path`` in one of ``pool``'s contexts; run ``probe`` (a JavaScript function) on it."""
    async with watched_page(pool, path) as (page, seen):
        found = await page.evaluate(probe)
    return OpenedPage(problems=seen.problems, requests=seen.requests, probe=found)


class Recorder:
    """A progress listener that keeps every event as (what happened, the phase, its count)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.totals: dict[str, int | None] = {}

    def started(self, phase: Phase) -> None:
        self.events.append(("started", phase.what, phase.done))

    def changed(self, phase: Phase) -> None:
        self.events.append(("changed", phase.what, phase.done))
        self.totals[phase.what] = phase.total

    def ended(self, phase: Phase, *, failed: bool) -> None:
        self.events.append(("failed" if failed else "ended", phase.what, phase.done))
        self.totals[phase.what] = phase.total

    def finished(self) -> dict[str, int]:
        """Each phase that ended (not failed): its final count."""
        return {what: done for kind, what, done in self.events if kind == "ended"}


def tensorboard_events(directory: Path) -> dict[str, dict[str, list[Any]]]:
    """Every scalar (``scalars``: tag -> [(step, value)]) and text (``texts``: tag -> [text]) of the TensorBoard
    event files under ``directory``, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, dict[str, list[Any]]] = {"scalars": {}, "texts": {}}
    for path in sorted(directory.rglob("events.out.tfevents.*")):
        events = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            found["scalars"].setdefault(tag, []).extend((e.step, e.value) for e in events.Scalars(tag))
        for tag in events.Tags()["tensors"]:
            texts = [b.decode() for e in events.Tensors(tag) for b in e.tensor_proto.string_val]
            found["texts"].setdefault(tag, []).extend(texts)
    for series in found["scalars"].values():
        series.sort()
    return found
