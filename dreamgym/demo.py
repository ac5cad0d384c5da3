"""``dreamgym demo``: the main job on a fresh machine.

Today it is a tour of the foundation, and says so: it writes hand-scripted
episodes of three MiniWoB-style tasks (login, click a button, enter text) in
the abstract state format into a real replay store, embeds them with the
offline MiniLM model, and retrieves the nearest stored transitions for an
unseen episode. The full job (real MiniWoB++ episodes in Chromium, the
experience model, mixed rollouts, training, held-out evaluation) lands with
the bridge, simulator, runtime and trainer issues.

The scripted steps are labelled ``synthetic`` with experience model
``demo:scripted``: no browser produced them, so they are never passed off as real.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from pathlib import Path

from dreamgym.core import (
    Element,
    Embedder,
    Episode,
    Observation,
    State,
    Step,
    Task,
    candidate_actions,
    describe_actions,
    diff_states,
    observation_hash,
    parse_action,
)
from dreamgym.replay import LmdbReplayStore, StoreConfig, transition_text

__all__ = ["run_demo"]

log = logging.getLogger(__name__)

_NAMES = ["lyda", "kasie", "bob", "ana", "rina", "joel", "mia", "theo", "ivy", "omar"]
_BUTTONS = ["Yes", "No", "OK", "Cancel", "Submit", "Next", "Previous", "Delete"]


def _page(*elements: Element) -> State:
    return State((Element(role="generic", id="e1", children=elements),))


def _login(rng: random.Random) -> tuple[Task, list[tuple[State, str]]]:
    user, password = rng.choice(_NAMES), f"{rng.randint(100, 999)}x"
    task = Task(
        task_id="miniwob/login-user",
        instruction=f'Enter the username "{user}" and the password "{password}" into the text fields and press login.',
        site="miniwob",
        benchmark="miniwob",
    )
    fields = [("", ""), (user, ""), (user, "*" * len(password))]
    pages = [
        _page(
            Element(role="textbox", name="Username", id="e2", text=u),
            Element(role="textbox", name="Password", id="e3", text=p),
            Element(role="button", name="Login", id="e4"),
        )
        for u, p in fields
    ]
    actions = [f"type [e2] [{user}] [0]", f"type [e3] [{password}] [0]", "click [e4]"]
    return task, list(zip(pages, actions, strict=True))


def _click_button(rng: random.Random) -> tuple[Task, list[tuple[State, str]]]:
    labels = rng.sample(_BUTTONS, 4)
    target = rng.randrange(4)
    task = Task(
        task_id="miniwob/click-button",
        instruction=f'Click on the "{labels[target]}" button.',
        site="miniwob",
        benchmark="miniwob",
    )
    page = _page(*(Element(role="button", name=label, id=f"e{i + 2}") for i, label in enumerate(labels)))
    return task, [(page, f"click [e{target + 2}]")]


def _enter_text(rng: random.Random) -> tuple[Task, list[tuple[State, str]]]:
    word = rng.choice(_NAMES)
    task = Task(
        task_id="miniwob/enter-text",
        instruction=f'Enter "{word}" into the text field and press Submit.',
        site="miniwob",
        benchmark="miniwob",
    )
    pages = [
        _page(Element(role="textbox", id="e2", text=t), Element(role="button", name="Submit", id="e3"))
        for t in ("", word)
    ]
    return task, list(zip(pages, [f"type [e2] [{word}] [0]", "click [e3]"], strict=True))


_DONE = _page(Element(role="text", text="Done."))


def _episode(task: Task, script: list[tuple[State, str]], episode_id: str, seed: int) -> list[Step]:
    steps = []
    for index, (state, action_text) in enumerate(script):
        last = index == len(script) - 1
        next_state = _DONE if last else script[index + 1][0]
        steps.append(
            Step(
                source="synthetic",
                experience_model_id="demo:scripted",
                prompt_template_id="none",
                policy_id="demo:scripted",
                task_id=task.task_id,
                episode_id=episode_id,
                group_id=f"{task.task_id}/{seed}",
                step_index=index,
                seed=seed,
                site=task.site,
                observation=Observation(state=state.render(), url=f"file:///miniwob/{task.task_id}.html"),
                action=parse_action(action_text),
                next_observation=Observation(state=next_state.render()),
                reward=1.0 if last else 0.0,
                terminated=last,
            )
        )
    return steps


def _summary(steps: list[Step]) -> Episode:
    first, last = steps[0], steps[-1]
    return Episode(
        episode_id=first.episode_id,
        task_id=first.task_id,
        source=first.source,
        group_id=first.group_id,
        seed=first.seed,
        site=first.site,
        policy_id=first.policy_id,
        experience_model_id=first.experience_model_id,
        num_steps=len(steps),
        total_reward=sum(step.reward for step in steps),
        success=last.reward > 0,
        terminated=last.terminated,
        initial_observation_hash=observation_hash(first.observation),
    )


async def run_demo(out: Path, embedder: Embedder | None = None) -> int:
    """Run the tour; writes the store under ``out`` and prints what it did."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.rule("dreamgym demo — foundation preview")
    console.print(
        "[yellow]The full demo (real MiniWoB++ in Chromium → experience model → mixed rollouts → GRPO →"
        " held-out evaluation) arrives with the bridge, simulator, runtime and trainer issues.[/]\n"
        "Today: the shared state and action formats, and the LMDB + usearch replay store with the offline"
        " MiniLM embedder, on hand-scripted episodes (stored as synthetic, model 'demo:scripted')."
    )
    store_path = out / "store"
    shutil.rmtree(store_path, ignore_errors=True)  # the demo starts from an empty store each run
    rng = random.Random(0)
    makers = [_login, _click_button, _enter_text]
    started = time.perf_counter()
    config = StoreConfig(index_sources=("real", "synthetic"))
    async with LmdbReplayStore(store_path, embedder=embedder, config=config) as store:
        for seed in range(30):
            task, script = makers[seed % 3](rng)
            await store.put_task(task)
            steps = _episode(task, script, f"demo-{seed}", seed)
            await store.append(steps)
            await store.put_episode(_summary(steps))
        console.print(f"wrote 30 episodes; embedding with {store.embedder.name} ...")
        await store.flush()
        stats = await store.stats()

        task, script = _login(random.Random(99))
        state, action_text = script[1]
        console.rule("an unseen login episode, step 2")
        console.print(state.render(), markup=False, highlight=False)
        candidates = "; ".join(str(a) for a in candidate_actions(state, task.instruction))
        console.print("\ncandidate actions: " + candidates, markup=False, highlight=False)
        query = transition_text(task.instruction, action_text, state.render())
        hits = await store.nearest(query, 3, exclude_episodes=())
        table = Table(title=Text(f"nearest stored transitions to '{action_text}'"))
        for column in ("seq", "score", "task", "action", "next state (diff)"):
            table.add_column(column)
        for hit in hits:
            diff = diff_states(hit.step.observation.state, hit.step.next_observation.state)
            cells = (str(hit.seq), f"{hit.score:.3f}", hit.step.task_id, str(hit.step.action), diff)
            table.add_row(*(Text(cell) for cell in cells))
        console.print(table)
    console.rule("store")
    console.print(
        f"{store_path}: {stats.steps['synthetic']} synthetic steps, {stats.tasks} tasks, "
        f"{stats.vectors} vectors ({stats.embedder}, dim {stats.dim}); {time.perf_counter() - started:.1f} s"
    )
    console.print("\naction space (generated from core.actions):\n" + describe_actions(), markup=False, highlight=False)
    console.print(f"\nInspect the store: dreamgym replay stats {store_path}")
    return 0
