"""Export and import of a store: JSONL; Hugging Face ``datasets`` of episodes and of steps; Parquet.

JSONL format: one record per line, as :func:`~dreamgym.core.types.record_to_json`
writes it (each line has ``kind`` and ``schema_version``): tasks first, then
steps in sequence order, then episodes. Importing checks the whole file,
then adds it in one transaction: the steps under new sequence numbers (a
step whose episode already holds its ``step_index`` is skipped), tasks and
episodes by id.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from dreamgym.core.errors import RecordFormatError
from dreamgym.core.types import Episode, Record, Step, Task, decode_record, record_from_json, record_to_json
from dreamgym.replay.store import LmdbReplayStore

__all__ = ["STEP_COLUMNS", "episodes_dataset", "export_jsonl", "export_parquet", "import_jsonl", "steps_dataset"]

_ORDER = (("tasks", Task), ("steps", Step), ("episodes", Episode))


async def export_jsonl(store: LmdbReplayStore, path: str | Path) -> int:
    """Write every task, step and episode to ``path``; returns the number of lines.

    The file appears at ``path`` only once it is complete (it is written beside it first), so an
    export that fails on a damaged store leaves nothing behind.
    """

    def write() -> int:
        lines = 0
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        try:
            with partial.open("wb") as out:
                for db, _ in _ORDER:
                    for _, value in store.iter_records(db):
                        out.write(record_to_json(_decode(db, value)) + b"\n")
                        lines += 1
            partial.replace(target)  # a failed export leaves no file that looks whole
        finally:
            partial.unlink(missing_ok=True)
        return lines

    return await anyio.to_thread.run_sync(write)


def _decode(db: str, value: bytes) -> Any:
    kind: Any = dict(_ORDER)[db]
    return decode_record(value, kind)


async def import_jsonl(store: LmdbReplayStore, path: str | Path) -> dict[str, int]:
    """Add the records of a JSONL export to ``store``, all or nothing; returns counts per kind.

    Every line is read and checked first: a file with one bad line (a
    truncated last line, say) adds nothing. Then the whole file is committed
    in one transaction (:meth:`~LmdbReplayStore.add_records`), skipping steps
    the store already holds, so importing a file again, or its fixed version
    after a failed try, adds each step once. Counts: ``task``, ``step``
    (added), ``episode``, ``skipped`` (steps already stored).

    Raises:
        RecordFormatError: A line is not a record; the message names the line, and nothing was added.
    """

    await anyio.to_thread.run_sync(check_export_file, path)
    return await store.add_records(lambda: (record_from_json(line) for line in _lines(path)))


def check_export_file(path: str | Path) -> None:
    """Read every line of a JSONL export and check it is a task, step or episode record (blocking).

    Raises:
        RecordFormatError: A line is not such a record; the message names the line.
    """
    for number, line in enumerate(_lines(path), start=1):
        try:
            record: Record = record_from_json(line)
        except RecordFormatError as exc:
            raise RecordFormatError(f"{path}:{number}: {exc}; nothing was imported") from exc
        if not isinstance(record, Task | Step | Episode):
            raise RecordFormatError(
                f"{path}:{number}: a {type(record).__name__} cannot stand alone in an export; nothing was imported"
            )


def _lines(path: str | Path) -> Iterator[bytes]:
    with Path(path).open("rb") as source:
        for line in source:
            if line.strip():
                yield line


async def episodes_dataset(store: LmdbReplayStore) -> Any:
    """A ``datasets.Dataset`` with one row per episode that has steps.

    Columns: the episode's ids and provenance, and per step lists of the
    observation state, action text, reward, next state and flags. Episodes
    without an ``Episode`` record (still running) get their fields from the steps.
    """
    import datasets

    def build() -> list[dict[str, Any]]:
        by_episode: dict[str, list[Step]] = {}
        for _, value in store.iter_records("steps"):
            step = _decode("steps", value)
            by_episode.setdefault(step.episode_id, []).append(step)
        episodes = {e.episode_id: e for e in (_decode("episodes", v) for _, v in store.iter_records("episodes"))}
        return [_row(steps, episodes.get(episode_id)) for episode_id, steps in by_episode.items()]

    rows = await anyio.to_thread.run_sync(build)
    return datasets.Dataset.from_list(rows)


def _row(steps: list[Step], episode: Episode | None) -> dict[str, Any]:
    first, last = steps[0], steps[-1]
    return {
        "episode_id": first.episode_id,
        "task_id": first.task_id,
        "group_id": first.group_id,
        "source": first.source,
        "seed": first.seed,
        "policy_id": first.policy_id,
        "experience_model_id": first.experience_model_id,
        "success": episode.success if episode else False,
        "total_reward": episode.total_reward if episode else sum(s.reward for s in steps),
        "terminated": last.terminated,
        "truncated": last.truncated,
        "truncation_reason": last.truncation_reason,
        "states": [s.observation.state for s in steps],
        "actions": [str(s.action) for s in steps],
        "rewards": [s.reward for s in steps],
        "next_states": [s.next_observation.state for s in steps],
        "urls": [s.observation.url for s in steps],
    }


STEP_COLUMNS = {
    "episode_id": "the episode the step belongs to (a shadow prediction's ends in ``/shadow``)",
    "step_index": "its place in the episode, from 0",
    "task_id": "the task, e.g. ``miniwob/click-button``",
    "source": "``real`` (live pages) or ``synthetic`` (the experience model)",
    "seed": "the episode's seed (``None`` where the task has none)",
    "group_id": "the group of episodes it was played in (GRPO's G)",
    "site": "the site or benchmark family",
    "policy_id": "the policy (and its weights' version) that chose the action",
    "experience_model_id": "synthetic steps: the experience model and a hash of its weights",
    "prompt_template_id": "synthetic steps: the experience model's prompt template",
    "goal": "the goal as the page states it (empty where the task's instruction says it all)",
    "state": "the page before the action, in ``core.state``'s text format",
    "url": "the page's address before the action",
    "action": "the action, as ``core.actions`` writes it (``click [e5]``)",
    "next_state": "the page after the action",
    "next_url": "the page's address after the action",
    "last_action_error": "why the action could not be carried out; empty when it was",
    "reward": "the step's reward (an episode's outcome is its terminating step's)",
    "terminated": "the task ended here",
    "truncated": "the episode was cut here from outside",
    "truncation_reason": "why it was cut: ``step_limit``, ``deadline``, ``model_output``, ...",
}
"""The columns of :func:`steps_dataset` (and of ``steps.parquet``), with what each holds. The policy's token
records and the timings stay in the store."""


async def steps_dataset(store: LmdbReplayStore) -> Any:
    """A ``datasets.Dataset`` with one row per stored step, in commit order (columns: :data:`STEP_COLUMNS`)."""
    import datasets

    def build() -> list[dict[str, Any]]:
        return [_step_row(_decode("steps", value)) for _, value in store.iter_records("steps")]

    rows = await anyio.to_thread.run_sync(build)
    features = datasets.Features(
        {name: datasets.Value(_STEP_TYPES.get(name, "string")) for name in STEP_COLUMNS}
    )  # fixed, so an empty store or a column of None still has its type
    return datasets.Dataset.from_list(rows, features=features)


_STEP_TYPES = {"step_index": "int64", "seed": "int64", "reward": "float64", "terminated": "bool", "truncated": "bool"}


def _step_row(step: Step) -> dict[str, Any]:
    before, after = step.observation, step.next_observation
    return {
        "episode_id": step.episode_id,
        "step_index": step.step_index,
        "task_id": step.task_id,
        "source": step.source,
        "seed": step.seed,
        "group_id": step.group_id,
        "site": step.site,
        "policy_id": step.policy_id,
        "experience_model_id": step.experience_model_id,
        "prompt_template_id": step.prompt_template_id,
        "goal": before.goal,
        "state": before.state,
        "url": before.url,
        "action": str(step.action),
        "next_state": after.state,
        "next_url": after.url,
        "last_action_error": after.last_action_error,
        "reward": step.reward,
        "terminated": step.terminated,
        "truncated": step.truncated,
        "truncation_reason": step.truncation_reason,
    }


async def export_parquet(store: LmdbReplayStore, directory: str | Path) -> dict[str, int]:
    """Write ``episodes.parquet`` (:func:`episodes_dataset`) and ``steps.parquet`` (:func:`steps_dataset`) into
    ``directory``; returns the rows of each. Each file appears only once it is complete.

    Each loads anywhere as a ``datasets.Dataset`` (their columns differ, so they are two datasets, not two splits
    of one): ``load_dataset("parquet", data_files="DIR/steps.parquet", split="train")``.
    """
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, dataset in (("episodes", await episodes_dataset(store)), ("steps", await steps_dataset(store))):
        partial = target / f"{name}.parquet.partial"
        try:
            await anyio.to_thread.run_sync(dataset.to_parquet, str(partial))
            partial.replace(target / f"{name}.parquet")
        finally:
            partial.unlink(missing_ok=True)
        counts[name] = len(dataset)
    return counts
