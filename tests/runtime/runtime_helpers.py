"""The runtime's neighbours in its tests: a toy form page on both sides, policies, a scripted model.

The toy page asks to type a name and press Submit. ``ToyFormEnv`` is its
real side (a small Environment, as a live site would answer); the synthetic
side is the real ``SimulatedEnv`` over ``LLMExperienceModel``, whose text
backend answers like the page would.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import anyio

from dreamgym.core import (
    Action,
    ChatMessage,
    Completion,
    Observation,
    PolicyDecision,
    PolicyTokens,
    Sampling,
    Step,
    StepResult,
    Task,
    parse_action,
)
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.simulator import ExperienceModelConfig, LLMExperienceModel, SimulatedEnv, SimulatorConfig, TemplateConfig

NAMES = ("Ana", "Bo", "Cyd", "Dee")
TASK = Task(task_id="toy/form", instruction="Enter the name the page asks for and press Submit.", site="toy")


def open_store(path: Path) -> LmdbReplayStore:
    return LmdbReplayStore(path, embedder=HashingEmbedder(64))


def goal(seed: int | None) -> str:
    return f'Enter "{NAMES[(seed or 0) % len(NAMES)]}" and press Submit.'


def page(seed: int | None, typed: str = "") -> Observation:
    box = f"[e2] textbox: {typed}" if typed else "[e2] textbox"
    return Observation(state=f'[e1] generic: {goal(seed)}\n{box}\n[e3] button "Submit"', goal=goal(seed))


def solved(seed: int) -> list[Step]:
    """The toy form solved as a demonstrator would: type the asked name, then Submit (texts as parsed)."""
    name = NAMES[seed % len(NAMES)]
    first, typed = page(seed), page(seed, name)
    common = {"source": "real", "task_id": TASK.task_id, "episode_id": f"demo-{seed}", "seed": seed}
    return [
        Step(**common, step_index=0, observation=first, action=parse_action(f"type [e2] [{name}] [0]"),
             next_observation=typed),
        Step(**common, step_index=1, observation=typed, action=parse_action("click [e3]"), next_observation=typed,
             reward=1.0, terminated=True),
    ]  # fmt: skip


class Counts:
    """Shared counters of every environment a factory made."""

    def __init__(self) -> None:
        self.made = 0
        self.resets = 0
        self.finished_steps = 0
        self.loops: set[int] = set()


class ToyFormEnv:
    """The toy page, real side: typing fills the box; Submit ends the episode (reward 1 for the asked name).

    ``delay_s`` makes every step take that long (a slow site); ``scroll`` changes nothing.
    """

    source = "real"

    def __init__(self, counts: Counts | None = None, *, delay_s: float = 0.0) -> None:
        self.counts = counts or Counts()
        self.counts.made += 1
        self.delay_s = delay_s
        self.seed: int | None = None
        self.typed = ""

    async def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        import asyncio

        self.counts.loops.add(id(asyncio.get_running_loop()))
        self.counts.resets += 1
        self.seed, self.typed = seed, ""
        return page(seed)

    async def step(self, action: Action) -> StepResult:
        await anyio.sleep(self.delay_s)
        done = action.name == "click"
        if action.name == "type":
            self.typed = action.args[1]
        right = self.typed == NAMES[(self.seed or 0) % len(NAMES)]
        self.counts.finished_steps += 1  # nothing awaits between here and the runtime's record of the step
        return StepResult(
            observation=page(self.seed, self.typed), reward=float(done and right), terminated=done, truncated=False
        )

    async def aclose(self) -> None:
        pass


class ToyPolicy:
    """Types the asked name, then presses Submit; ``scrolls`` scroll actions first (longer episodes)."""

    policy_id = "toy-policy"

    def __init__(self, *, scrolls: int = 0) -> None:
        self.scrolls = scrolls
        self.histories: list[list[Step]] = []

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        self.histories.append(list(history))
        asked = re.findall(r'"([^"]*)"', observation.goal or task.instruction) or ["Ana"]
        done_scrolling = sum(step.action.name == "scroll" for step in history) >= self.scrolls
        if not done_scrolling:
            text = "scroll [down]"
        elif "textbox:" in observation.state:
            text = 'click [e3] "Submit"'
        else:
            text = f"type [e2] [{asked[0]}] [0]"
        return PolicyDecision(
            action=parse_action(text), tokens=PolicyTokens(action_ids=(len(history),), action_logprobs=(-0.1,))
        )


class FailingPolicy(ToyPolicy):
    """Acts like :class:`ToyPolicy` but raises on its second step."""

    policy_id = "failing-policy"

    async def act(self, task: Task, history: Sequence[Step], observation: Observation) -> PolicyDecision:
        if len(history) == 1:
            raise RuntimeError("the policy broke on its second step")
        return await super().act(task, history, observation)


class ToyBackend:
    """A text backend that answers like the toy page would, reading the action from the prompt."""

    backend_id = "toy-model"

    def __init__(self) -> None:
        self.calls: list[list[ChatMessage]] = []

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        self.calls.append(list(messages))
        prompt = messages[-1].content
        if "Action: " not in prompt:  # the first-page prompt
            return Completion(text=f"<state>\n{page(0).state}\n</state>")
        action = prompt.rsplit("Action: ", 1)[-1]
        if action.startswith("type"):
            name = action.split("[")[2].rstrip("] ")
            return Completion(
                text=f"<diff>\n- [e2] textbox\n+ [e2] textbox: {name}\n</diff>\n<reward>0</reward>\n<done>no</done>"
            )
        if action.startswith("click"):  # Submit pays only after a name was typed, as on the real side
            paid = int("textbox: " in prompt)
            return Completion(text=f"<diff>\n</diff>\n<reward>{paid}</reward>\n<done>yes</done>")
        return Completion(text="<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>")

    @property
    def step_prompts(self) -> list[str]:
        return [call[-1].content for call in self.calls if "Action: " in call[-1].content]

    async def aclose(self) -> None:
        pass


def simulator(backend: ToyBackend, store: LmdbReplayStore | None = None) -> SimulatedEnv:
    model = LLMExperienceModel(backend, config=ExperienceModelConfig(template=TemplateConfig(history=4, neighbours=0)))
    return SimulatedEnv(model, store=store, config=SimulatorConfig(neighbours=0, real_starts=store is not None))
