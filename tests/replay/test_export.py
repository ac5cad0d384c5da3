from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_step

from dreamgym.core import Episode, RecordFormatError, Task, record_to_json
from dreamgym.replay import (
    STEP_COLUMNS,
    HashingEmbedder,
    LmdbReplayStore,
    episodes_dataset,
    export_jsonl,
    import_jsonl,
    steps_dataset,
)

pytestmark = pytest.mark.anyio


async def _fill(store: LmdbReplayStore) -> list:
    await store.put_task(Task(task_id="task-a", instruction="click the button"))
    steps = [make_step(i, episode_id=f"ep-{i // 3}", source="synthetic" if i >= 3 else "real") for i in range(6)]
    await store.append(steps)
    await store.put_episode(
        Episode(episode_id="ep-0", task_id="task-a", source="real", num_steps=3, success=True, total_reward=1.0)
    )
    return steps


async def test_jsonl_export_then_import_reproduces_every_record(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path / "a", embedder=HashingEmbedder(32)) as source:
        steps = await _fill(source)
        assert await export_jsonl(source, tmp_path / "out.jsonl") == 8
    async with LmdbReplayStore(tmp_path / "b", embedder=HashingEmbedder(32)) as target:
        counts = await import_jsonl(target, tmp_path / "out.jsonl")
        assert counts == {"task": 1, "step": 6, "episode": 1, "skipped": 0}
        assert await target.get_steps(list(range(1, 7))) == steps
        assert (await target.get_task("task-a")).instruction == "click the button"  # type: ignore[union-attr]
        assert (await target.get_episode("ep-0")).success  # type: ignore[union-attr]
        await target.flush()
        assert (await target.stats()).vectors == 3


async def test_a_bad_line_names_its_place_and_nothing_is_imported(tmp_path: Path) -> None:
    lines = [record_to_json(make_step(0)), b'{"kind": "step", "source": "real"}', record_to_json(make_step(1))]
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    async with LmdbReplayStore(tmp_path / "s", embedder=HashingEmbedder(32)) as store:
        with pytest.raises(RecordFormatError, match="bad.jsonl:2.*nothing was imported"):
            await import_jsonl(store, tmp_path / "bad.jsonl")
        assert (await store.stats()).last_seq == 0


async def test_a_truncated_file_then_the_fixed_one_then_again_stores_each_step_once(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path / "a", embedder=HashingEmbedder(32)) as source:
        steps = await _fill(source)
        await export_jsonl(source, tmp_path / "full.jsonl")
    full = (tmp_path / "full.jsonl").read_bytes()
    (tmp_path / "cut.jsonl").write_bytes(full[: len(full) - 40])  # the last line loses its end
    async with LmdbReplayStore(tmp_path / "b", embedder=HashingEmbedder(32)) as target:
        with pytest.raises(RecordFormatError, match="cut.jsonl:8"):
            await import_jsonl(target, tmp_path / "cut.jsonl")
        first = await import_jsonl(target, tmp_path / "full.jsonl")
        again = await import_jsonl(target, tmp_path / "full.jsonl")
        stats = await target.stats()
        stored = {(s.episode_id, s.step_index) for s in await target.get_steps(list(range(1, stats.last_seq + 1)))}
    assert first == {"task": 1, "step": 6, "episode": 1, "skipped": 0}
    assert again == {"task": 1, "step": 0, "episode": 1, "skipped": 6}
    assert stats.last_seq == 6 and stats.steps == {"real": 3, "synthetic": 3}
    assert stored == {(s.episode_id, s.step_index) for s in steps}


async def test_an_import_over_a_partial_one_adds_only_the_missing_steps(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path / "a", embedder=HashingEmbedder(32)) as source:
        steps = await _fill(source)
        await export_jsonl(source, tmp_path / "full.jsonl")
    async with LmdbReplayStore(tmp_path / "b", embedder=HashingEmbedder(32)) as target:
        await target.append(steps[:2])  # what an earlier, interrupted copy left
        counts = await import_jsonl(target, tmp_path / "full.jsonl")
        assert counts["step"] == 4 and counts["skipped"] == 2
        assert len(await target.episode_steps("ep-0")) == 3


async def test_episodes_become_a_hugging_face_dataset(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(32)) as store:
        await _fill(store)
        dataset = await episodes_dataset(store)
    assert len(dataset) == 2
    first = dataset[0]
    assert (first["episode_id"], first["source"], first["success"]) == ("ep-0", "real", True)
    assert first["actions"] == ["click [e1]"] * 3
    assert first["states"][1] == make_step(1).observation.state
    assert dataset[1]["source"] == "synthetic" and dataset[1]["experience_model_id"] == "test-model"


async def test_steps_become_a_dataset_with_the_documented_columns(tmp_path: Path) -> None:
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(32)) as store:
        steps = await _fill(store)
        dataset = await steps_dataset(store)
    assert dataset.column_names == list(STEP_COLUMNS)
    assert len(dataset) == len(steps)
    row = dataset[4]
    assert (row["episode_id"], row["step_index"], row["source"]) == ("ep-1", steps[4].step_index, "synthetic")
    assert (row["action"], row["state"], row["next_state"]) == (
        "click [e1]",
        steps[4].observation.state,
        steps[4].next_observation.state,
    )
    assert row["experience_model_id"] == "test-model" and dataset[0]["experience_model_id"] == ""


@pytest.mark.anyio(False)
def test_parquet_export_loads_as_one_hugging_face_dataset(tmp_path: Path) -> None:
    """``dreamgym replay export --format parquet``, then ``datasets.load_dataset("parquet", ...)`` as a user would."""
    import anyio
    from datasets import load_dataset
    from helpers import dreamgym

    async def fill() -> list:
        async with LmdbReplayStore(tmp_path / "store", embedder=HashingEmbedder(32)) as store:
            return await _fill(store)

    steps = anyio.run(fill)
    out = tmp_path / "export"
    result = dreamgym("replay", "export", str(tmp_path / "store"), "-o", str(out), "--format", "parquet")
    assert "wrote 2 episodes and 6 steps" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["episodes.parquet", "steps.parquet"]  # no partial file left
    loaded = {
        n: load_dataset("parquet", data_files=str(out / f"{n}.parquet"), split="train") for n in ("episodes", "steps")
    }
    assert (len(loaded["episodes"]), len(loaded["steps"])) == (2, 6)
    assert loaded["steps"].column_names == list(STEP_COLUMNS)
    assert loaded["steps"][5]["next_state"] == steps[5].next_observation.state
    assert loaded["episodes"][0]["actions"] == ["click [e1]"] * 3 and loaded["episodes"][0]["success"]
    refused = dreamgym(
        "replay", "export", str(tmp_path / "store"), "-o", str(out), "--push-to-hub", "me/x", check=False
    )
    assert refused.returncode != 0 and "--push-to-hub needs --format parquet" in refused.stderr
