"""Realistic (task, action, state) transitions for benchmarks, generated from a seed.

Instructions are WebArena's 812 intents (from ``../shared/data`` when present);
pages are abstract states of shopping, forum, code-hosting and MiniWoB-like
sites whose names draw on the intents' vocabulary, and actions are picked from
:func:`dreamgym.core.candidate_actions` of each page, as a policy would.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from dreamgym.core import Element, Observation, State, Step, candidate_actions, parse_action

WEBARENA = Path(__file__).resolve().parents[2] / "shared" / "data" / "webarena" / "test.raw.json"
_FALLBACK_INTENTS = [
    'Search for "usb-c hub" and add the cheapest one to the cart',
    "What is the top-1 best-selling product in 2022",
    'Post a comment "thanks for sharing" on the latest post in the books forum',
    "Open an issue about the broken build in the a11y-webring project",
    'Enter "lyda" as username and "UM5" as password and press login',
]


def intents() -> list[str]:
    if WEBARENA.exists():
        return [task["intent"] for task in json.loads(WEBARENA.read_text())]
    return list(_FALLBACK_INTENTS)


def _words(texts: list[str]) -> list[str]:
    return sorted({w for t in texts for w in re.findall(r"[A-Za-z][a-z]{2,}", t)})


class PageMaker:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.intents = intents()
        self.words = _words(self.intents)
        self.next_id = 1

    def _id(self) -> str:
        self.next_id += 1
        return f"e{self.next_id}"

    def _phrase(self, lo: int = 1, hi: int = 4) -> str:
        return " ".join(self.rng.choice(self.words) for _ in range(self.rng.randint(lo, hi)))

    def _el(
        self, role: str, name: str = "", text: str = "", children: tuple[Element, ...] = (), **kw: object
    ) -> Element:
        props = tuple(str(p) for p in kw.get("props", ()))  # type: ignore[attr-defined]
        return Element(role=role, name=name, id=self._id(), text=text, props=props, children=children)

    def page(self) -> State:
        self.next_id = 0
        kind = self.rng.choice(["shopping", "forum", "gitlab", "miniwob"])
        nav = self._el(
            "navigation",
            "Main",
            children=tuple(self._el("link", self._phrase(1, 2)) for _ in range(self.rng.randint(3, 8))),
        )
        body: list[Element] = [self._el("heading", self._phrase(2, 5), props=("level=1",))]
        if kind == "shopping":
            body.append(self._el("searchbox", "Search entire store here..."))
            for _ in range(self.rng.randint(4, 12)):
                body.append(
                    self._el(
                        "listitem",
                        children=(
                            self._el("link", self._phrase(2, 6).title()),
                            Element(role="text", text=f"${self.rng.randint(1, 400)}.{self.rng.randint(0, 99):02d}"),
                            self._el("button", "Add to Cart", props=("cursor=pointer",)),
                        ),
                    )
                )
        elif kind == "forum":
            for _ in range(self.rng.randint(3, 10)):
                body.append(
                    self._el(
                        "article",
                        children=(
                            self._el("link", self._phrase(3, 9)),
                            Element(
                                role="text",
                                text=f"Submitted by {self.rng.choice(self.words)} {self.rng.randint(1, 23)} hours ago",
                            ),
                            self._el("button", "Upvote"),
                            self._el("link", f"{self.rng.randint(0, 300)} comments"),
                        ),
                    )
                )
        elif kind == "gitlab":
            body.append(
                self._el("tablist", children=tuple(self._el("tab", t) for t in ("Open", "Merged", "Closed", "All")))
            )
            for _ in range(self.rng.randint(3, 12)):
                body.append(
                    self._el(
                        "row",
                        children=(
                            self._el("link", self._phrase(3, 8)),
                            Element(
                                role="text",
                                text=f"#{self.rng.randint(1, 2000)} opened by {self.rng.choice(self.words)}",
                            ),
                            self._el("link", self.rng.choice(["bug", "feature", "docs", "a11y"])),
                        ),
                    )
                )
        else:
            form = []
            for _ in range(self.rng.randint(1, 4)):
                form.append(self._el("textbox", self._phrase(1, 2).capitalize()))
            for _ in range(self.rng.randint(0, 4)):
                form.append(
                    self._el("checkbox", self._phrase(1, 1), props=("checked",) if self.rng.random() < 0.3 else ())
                )
            form.append(self._el("button", self.rng.choice(["Submit", "Login", "OK", "Search", "Next"])))
            body.append(self._el("form", children=tuple(form)))
        return State((nav, self._el("main", children=tuple(body))))

    def transition(self, index: int, episode: str) -> tuple[str, Step]:
        instruction = self.rng.choice(self.intents)
        state = self.page()
        candidates = candidate_actions(state, instruction)
        action = self.rng.choice(candidates) if candidates else parse_action("scroll [down]")
        observation = Observation(state=state.render(), url=f"http://127.0.0.1:8000/{index}")
        step = Step(
            source="real",
            task_id=f"task-{zlib.crc32(instruction.encode()) % 997}",
            episode_id=episode,
            step_index=index % 20,
            observation=observation,
            action=action,
            next_observation=observation,
            seed=index % 10,
        )
        return instruction, step


def transitions(n: int, seed: int = 0) -> Iterator[tuple[str, Step]]:
    """``n`` (instruction, step) pairs, 20 steps an episode."""
    maker = PageMaker(seed)
    for i in range(n):
        yield maker.transition(i, f"ep-{seed}-{i // 20}")
