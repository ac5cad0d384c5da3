"""Export and import of a store: JSONL, and a Hugging Face ``datasets.Dataset`` of episodes.

JSONL format: one record per line, as :func:`~dreamgym.core.types.record_to_json`
writes it (each line has ``kind`` and ``schema_version``): tasks first, then
steps in sequence order, then episodes. Importing appends the steps to the
target store under new sequence numbers; tasks and episodes are put by id.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from dreamgym.core.errors import RecordFormatError
from dreamgym.core.types import Episode, Record, Step, Task, decode_record, record_from_json, record_to_json
from dreamgym.replay.store import LmdbReplayStore

__all__ = ["episodes_dataset", "export_jsonl", "import_jsonl"]

_ORDER = (("tasks", Task), ("steps", Step), ("episodes", Episode))


async def export_jsonl(store: LmdbReplayStore, path: str | Path) -> int:
    """Write every task, step and episode to ``path``; returns the number of lines."""

    def write() -> int:
        lines = 0
        with Path(path).open("wb") as out:
            for db, _ in _ORDER:
                for _, value in store.iter_records(db):
                    out.write(record_to_json(_decode(db, value)) + b"\n")
                    lines += 1
        return lines

    return await anyio.to_thread.run_sync(write)


def _decode(db: str, value: bytes) -> Any:
    kind: Any = dict(_ORDER)[db]
    return decode_record(value, kind)


async def import_jsonl(store: LmdbReplayStore, path: str | Path, *, batch: int = 1000) -> dict[str, int]:
    """Add the records of a JSONL export to ``store``; returns counts per kind.

    Raises:
        RecordFormatError: A line is not a record; the message names the line.
    """
    counts = {"task": 0, "step": 0, "episode": 0}
    pending: list[Step] = []
    for number, line in enumerate(_lines(path), start=1):
        try:
            record: Record = record_from_json(line)
        except RecordFormatError as exc:
            raise RecordFormatError(f"{path}:{number}: {exc}") from exc
        if isinstance(record, Task):
            await store.put_task(record)
        elif isinstance(record, Episode):
            await store.put_episode(record)
        elif isinstance(record, Step):
            pending.append(record)
            if len(pending) >= batch:
                await store.append(pending)
                pending = []
        else:
            raise RecordFormatError(f"{path}:{number}: a {type(record).__name__} cannot stand alone in an export")
        counts[str(record.__struct_config__.tag)] += 1
    if pending:
        await store.append(pending)
    return counts


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
