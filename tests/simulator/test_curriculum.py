from __future__ import annotations

import hashlib
import logging
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamgym.core import BackendError, ChatMessage, Completion, ConfigError, Sampling, Task, TextBackend
from dreamgym.replay import HashingEmbedder, LmdbReplayStore
from dreamgym.simulator import (
    VARIATION_TEMPLATE_ID,
    CurriculumConfig,
    CurriculumStats,
    TaskPool,
    propose_variations,
    select_seed_tasks,
    task_value,
    variation_messages,
)

PARENT = Task(
    task_id="shop/12",
    instruction="Add a red T-shirt to the cart",
    site="shopping",
    start_url="http://127.0.0.1:8000/",
    benchmark="webarena",
    max_steps=15,
    config_json='{"eval": "url_match"}',
)


class ScriptedBackend:
    """A text backend that answers from a script and records every prompt it got."""

    backend_id = "scripted"

    def __init__(self, answer: Callable[[Sequence[ChatMessage]], str]) -> None:
        self.answer = answer
        self.calls: list[tuple[list[ChatMessage], Sampling]] = []

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        self.calls.append((list(messages), sampling))
        return Completion(text=self.answer(messages))

    async def aclose(self) -> None:
        pass


def answering(text: str) -> ScriptedBackend:
    return ScriptedBackend(lambda _: text)


def by_original(answers: dict[str, str]) -> ScriptedBackend:
    """Answers with the entry whose key is the original instruction in the prompt."""

    def answer(messages: Sequence[ChatMessage]) -> str:
        return next(text for key, text in answers.items() if f"Original task: {key}\n" in messages[-1].content)

    return ScriptedBackend(answer)


def task(task_id: str, instruction: str = "") -> Task:
    return Task(task_id=task_id, instruction=instruction or f"do {task_id}", site="miniwob", max_steps=5)


def test_backend_fake_implements_the_protocol() -> None:
    assert isinstance(answering(""), TextBackend)


@pytest.mark.parametrize(
    ("rewards", "value"),
    [([0.0, 1.0], 0.25), ([0, 0, 0, 1], 0.1875), ([0.5, 1.0], 0.0625), ([1, 1, 1, 1], 0.0), ([0, 0], 0.0),
     ([1.0], 0.0), ([], 0.0)],
)  # fmt: skip
def test_task_value_is_the_population_variance_of_the_group(rewards: list[float], value: float) -> None:
    assert task_value(rewards) == pytest.approx(value)


def test_seed_tasks_are_ranked_by_value_then_id_and_skip_zero_value_tasks() -> None:
    groups = {
        "c": [0.0, 1.0],  # 0.25
        "a": [1.0, 0.0],  # 0.25, wins the tie by id
        "b": [0.0, 0.0, 0.0, 1.0],  # 0.1875
        "solved": [1.0, 1.0, 1.0],
        "failed": [0.0, 0.0],
        "alone": [1.0],
    }
    assert select_seed_tasks(groups, 10) == [("a", 0.25), ("c", 0.25), ("b", 0.1875)]
    assert select_seed_tasks(groups, 2) == [("a", 0.25), ("c", 0.25)]
    assert select_seed_tasks(groups, 10, min_value=0.2) == [("a", 0.25), ("c", 0.25)]
    assert select_seed_tasks(groups, 0) == []
    assert select_seed_tasks({"tiny": [0.1, 0.1 + 1e-9]}, 5) == []  # below the default min_value


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_seed_tasks", 0), ("variations_per_task", 0), ("max_instruction_chars", 0), ("max_generated_share", 1.5),
     ("max_generated_share", -0.1), ("min_value", -1.0)],
)  # fmt: skip
def test_config_rejects_out_of_range_settings_with_the_field_name(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"CurriculumConfig.{field} must be"):
        CurriculumConfig(**{field: value})  # type: ignore[arg-type]


def test_variation_prompt_shows_the_task_site_context_and_answer_format() -> None:
    messages = variation_messages(PARENT, 3, context='[e1] button "Add to cart"')
    assert [m.role for m in messages] == ["system", "user"]
    user = messages[1].content
    for part in (
        PARENT.instruction,
        "shopping",
        PARENT.start_url,
        '[e1] button "Add to cart"',
        "Write 3 new",
        "<task>",
    ):
        assert part in user
    assert "Page context" not in variation_messages(PARENT, 3)[1].content
    assert VARIATION_TEMPLATE_ID == "curriculum/variation-v1"
    with pytest.raises(ConfigError, match="n >= 1"):
        variation_messages(PARENT, 0)


LONG = "Buy " + "x" * 300


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "expected", "rejected"),
    [
        ("<task>Add two blue T-shirts</task>\n<task>Add a red T-shirt in size XL</task>",
         ["Add two blue T-shirts", "Add a red T-shirt in size XL"], 0),
        ("Here you go:\n1. Add two blue T-shirts\n2) Add a red hat", ["Add two blue T-shirts", "Add a red hat"], 0),
        ("- Add two blue T-shirts\n* Add a red hat\n• Add three socks", ["Add two blue T-shirts", "Add a red hat",
                                                                         "Add three socks"], 0),
        ("<task>Add a red hat</task><task>add a  RED hat</task><task>add a red t-shirt to the cart</task>",
         ["Add a red hat"], 2),
        ("<task></task><task>   </task><task>Add a red hat</task>", ["Add a red hat"], 2),
        (f"<task>{LONG}</task>\n<task>Add a red hat</task>", ["Add a red hat"], 1),
        ("<task>Add a red hat</task>\n<task>Add a blue hat and", ["Add a red hat"], 0),  # cut off mid-task
        ('1. "Add a red hat"\n2. **Add a blue hat**', ["Add a red hat", "Add a blue hat"], 0),
        ("".join(f"<task>Add {i} hats</task>" for i in range(6)), [f"Add {i} hats" for i in range(3)], 3),
    ],
)  # fmt: skip
async def test_proposals_are_parsed_tolerantly_and_filtered(answer: str, expected: list[str], rejected: int) -> None:
    stats = CurriculumStats()
    config = CurriculumConfig(variations_per_task=3)
    children = await propose_variations(answering(answer), PARENT, config, stats=stats)
    assert [child.instruction for child in children] == expected
    assert stats == CurriculumStats(proposals=1, accepted=len(expected), rejected=rejected, unparseable=0)


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["", "Sure! I would make the task harder by changing the colour.", "<task"])
async def test_an_unparseable_answer_gives_no_tasks_and_a_warning(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    stats = CurriculumStats()
    with caplog.at_level(logging.WARNING, logger="dreamgym.simulator._curriculum"):
        assert await propose_variations(answering(answer), PARENT, CurriculumConfig(), stats=stats) == []
    assert stats == CurriculumStats(proposals=1, unparseable=1)
    assert "no task variations" in caplog.text and "shop/12" in caplog.text


@pytest.mark.anyio
async def test_children_carry_their_parent_and_a_deterministic_id() -> None:
    backend = answering("<task>Add two blue T-shirts to the cart</task>")
    config = CurriculumConfig(variations_per_task=2)
    [child] = await propose_variations(backend, PARENT, config, context="ctx", rng_seed=7)
    digest = hashlib.sha1(b"add two blue t-shirts to the cart").hexdigest()[:8]
    assert child == Task(
        task_id=f"shop/12/v-{digest}",
        instruction="Add two blue T-shirts to the cart",
        site="shopping",
        start_url=PARENT.start_url,
        benchmark="curriculum",
        max_steps=15,
        parent_task_id="shop/12",
        generated=True,
        config_json="",  # no evaluator exists for a generated task
    )
    messages, sampling = backend.calls[0]
    assert messages == variation_messages(PARENT, 2, "ctx")
    assert (sampling.seed, sampling.temperature, sampling.max_new_tokens) == (7, 0.8, 256)
    again = await propose_variations(answering("<task>add two blue  t-shirts to the cart</task>"), PARENT, config)
    assert again[0].task_id == child.task_id


def test_generated_tasks_need_a_known_parent_and_ids_stay_unique() -> None:
    pool = TaskPool([task("a")])
    orphan = Task(task_id="x/v-1", instruction="harder", generated=True, parent_task_id="x")
    with pytest.raises(ConfigError, match="add the parent task first"):
        pool.add_tasks([orphan])
    with pytest.raises(ConfigError, match="different task with id 'a'"):
        pool.add_tasks([task("b"), task("a", "something else")])
    assert [t.task_id for t in pool] == ["a"]  # nothing of a failed add_tasks stays
    pool.add_tasks([task("a"), task("x"), orphan])  # a parent earlier in the same call counts
    assert [t.task_id for t in pool.real_tasks()] == ["a", "x"]
    assert pool.generated_tasks() == [orphan]
    assert "x/v-1" in pool and len(pool) == 3 and pool.get("x/v-1") == orphan


def test_values_come_from_the_latest_group_only() -> None:
    pool = TaskPool([task("a")])
    assert pool.value("a") is None
    pool.record_group("a", [0.0, 1.0])
    assert pool.value("a") == 0.25
    pool.record_group("a", [1.0, 1.0])
    assert pool.value("a") == 0.0
    with pytest.raises(KeyError, match="not in the pool"):
        pool.record_group("missing", [1.0])


def pool_with_generated(real: int, generated: int, share: float) -> TaskPool:
    pool = TaskPool([task(f"r{i}") for i in range(real)], config=CurriculumConfig(max_generated_share=share))
    children = [
        Task(task_id=f"g{i}", instruction=f"g{i}", generated=True, parent_task_id="r0") for i in range(generated)
    ]
    pool.add_tasks(children)
    return pool


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6), st.integers(0, 12), st.sampled_from([0.0, 0.1, 0.29, 0.5, 0.7, 1.0]), st.integers(0, 40),
    st.integers(0, 2**32),
)  # fmt: skip
def test_generated_tasks_never_exceed_their_share_of_a_batch(
    real: int, generated: int, share: float, n: int, seed: int
) -> None:
    pool = pool_with_generated(real, generated, share)
    batch = pool.sample_batch(n, random.Random(seed))
    drawn = [t for t in batch if t.generated]
    assert len(batch) == n
    assert len(drawn) == min(math.floor(share * n + 1e-9), generated)
    assert len({t.task_id for t in drawn}) == len(drawn)  # generated tasks are drawn without replacement


def test_a_zero_share_gives_only_real_tasks_and_real_tasks_spread_evenly() -> None:
    pool = pool_with_generated(3, 10, 0.0)
    for seed in range(50):
        assert not any(t.generated for t in pool.sample_batch(8, random.Random(seed)))
    counts = [t.task_id for t in pool.sample_batch(9, random.Random(0))]
    assert sorted(counts) == sorted(["r0", "r1", "r2"] * 3)
    assert pool_with_generated(3, 0, 0.5).sample_batch(29, random.Random(1)).count(task("r0")) >= 9
    with pytest.raises(ConfigError, match="no real tasks"):
        TaskPool().sample_batch(1, random.Random(0))
    assert TaskPool().sample_batch(0, random.Random(0)) == []


@pytest.mark.anyio
async def test_refresh_varies_seed_tasks_stores_children_and_keeps_them_out_of_real_tasks(tmp_path: Path) -> None:
    real = [task("a", "click yes"), task("b", "click no"), task("c", "type hi"), task("d", "scroll")]
    pool = TaskPool(real, config=CurriculumConfig(num_seed_tasks=2, variations_per_task=2))
    pool.record_group("a", [0.0, 1.0, 1.0, 1.0])
    pool.record_group("b", [0.0, 1.0, 0.0, 1.0])
    pool.record_group("c", [0.0, 0.0, 1.0, 1.0])
    pool.record_group("d", [1.0, 1.0, 1.0, 1.0])  # solved every time: never a seed
    backend = by_original(
        {
            "click no": "<task>click no twice</task>\n<task>click no, then yes</task>",
            "type hi": "1. type hi there\n2. type hello world\n3. type more",
            "click yes": "<task>never asked</task>",
        }
    )
    async with LmdbReplayStore(tmp_path, embedder=HashingEmbedder(64)) as store:
        new = await pool.refresh(backend, store=store, context_for=lambda t: f"page of {t.task_id}")
        assert [(t.parent_task_id, t.instruction) for t in new] == [
            ("b", "click no twice"),
            ("b", "click no, then yes"),
            ("c", "type hi there"),
            ("c", "type hello world"),
        ]
        for child in new:
            assert child.generated and child.benchmark == "curriculum"
            assert await store.get_task(child.task_id) == child
    assert sorted(call[0][1].content.split("\n")[2] for call in backend.calls) == ["page of b", "page of c"]
    assert pool.real_tasks() == real
    assert pool.generated_tasks() == new
    assert pool.stats == CurriculumStats(proposals=2, accepted=4, rejected=1, unparseable=0)

    again = await pool.refresh(backend)  # known proposals are dropped, and a fresh one takes the free slot
    assert [t.instruction for t in again] == ["type more"] and len(pool) == 9
    assert pool.stats == CurriculumStats(proposals=4, accepted=5, rejected=5, unparseable=0)
    assert [call[1].seed for call in backend.calls] == [0, 0, 1, 1]  # each refresh samples anew


@pytest.mark.anyio
async def test_generated_tasks_can_seed_further_variations() -> None:
    pool = TaskPool([task("a", "click yes")], config=CurriculumConfig(num_seed_tasks=1, variations_per_task=1))
    pool.record_group("a", [0.0, 1.0])
    [child] = await pool.refresh(answering("<task>click yes twice</task>"))
    pool.record_group("a", [1.0, 1.0])
    pool.record_group(child.task_id, [1.0, 0.0])
    [grandchild] = await pool.refresh(answering("<task>click yes three times</task>"))
    assert grandchild.parent_task_id == child.task_id and grandchild.task_id.startswith(child.task_id + "/v-")
    assert pool.real_tasks() == [task("a", "click yes")]


@pytest.mark.anyio
async def test_a_failing_backend_raises_backend_error_and_adds_nothing() -> None:
    class Failing(ScriptedBackend):
        async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
            raise BackendError("server down")

    pool = TaskPool([task("a"), task("b")])
    pool.record_group("a", [0.0, 1.0])
    pool.record_group("b", [1.0, 0.0])
    with pytest.raises(BackendError, match="server down"):
        await pool.refresh(Failing(lambda _: ""))
    assert pool.generated_tasks() == [] and pool.stats == CurriculumStats()
    assert await pool.refresh(answering("")) == []  # an empty answer is counted, not raised
    assert pool.stats.unparseable == 2
