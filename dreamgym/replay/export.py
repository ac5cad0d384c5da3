"""Export and import of a store: JSONL, and a Hugging Face ``datasets.Dataset`` of episodes.

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

__all__ = ["episodes_dataset", "export_jsonl", "import_jsonl"]

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
