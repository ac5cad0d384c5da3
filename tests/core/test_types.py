from __future__ import annotations

import msgspec
import pytest
from helpers import make_step

from dreamgym.core import (
    SCHEMA_VERSION,
    Action,
    Episode,
    Observation,
    PolicyTokens,
    RecordFormatError,
    SchemaVersionError,
    Step,
    StepTimings,
    Task,
    decode_record,
    encode_record,
    observation_hash,
    parse_action,
    record_from_json,
    record_to_json,
)

OBS = Observation(
    state='[e1] button "OK"',
    url="http://127.0.0.1:8000/",
    tabs=("Home", "Cart"),
    active_tab=1,
    focused_id="e1",
    last_action_error="element e9 not found",
    cut_note="cut 12 lines",
    goal='Click on the "no" button.',
)
RECORDS = [
    Task(
        task_id="webarena/0",
        instruction="What is the top-1 best-selling product in 2022",
        site="shopping_admin",
        start_url="http://127.0.0.1:7780/admin",
        benchmark="webarena",
        max_steps=30,
        config_json='{"a": 1}',
    ),
    Task(task_id="curriculum/1", instruction="x", parent_task_id="webarena/0", generated=True),
    OBS,
    Action(name="click", args=("e5",), label="Yes", raw='click [e5] "Yes"'),
    Action(name="invalid", raw="clik", error="unknown action"),
    PolicyTokens(prompt_ids=(1, 2, 3), action_ids=(4, 5), action_logprobs=(-0.25, -1e-9), env_ids=(6, 7)),
    StepTimings(started_at=1.7e9, policy_s=0.5, env_s=0.125),
    Step(
        source="synthetic",
        task_id="t",
        episode_id="e",
        group_id="g",
        step_index=3,
        seed=7,
        site="miniwob",
        observation=OBS,
        action=parse_action("type [e2] [bob] [0]"),
        next_observation=OBS,
        reward=1.0,
        truncated=True,
        truncation_reason="step_limit",
        policy_id="smollm2",
        experience_model_id="sim-v1",
        prompt_template_id="diff-v1",
        timings=StepTimings(started_at=1.0, policy_s=0.1, env_s=0.2),
        policy_tokens=PolicyTokens(action_ids=(9,), action_logprobs=(-0.5,), env_ids=(10, 11)),
    ),
    make_step(2),
    Episode(
        episode_id="e",
        task_id="t",
        source="real",
        group_id="g",
        seed=None,
        num_steps=4,
        total_reward=1.0,
        success=True,
        terminated=True,
        error="",
        started_at=1.0,
        ended_at=2.5,
        initial_observation_hash="ab",
    ),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_bytes_and_json(record: object) -> None:
    assert decode_record(encode_record(record), type(record)) == record  # type: ignore[arg-type]
    assert decode_record(encode_record(record)) == record  # type: ignore[arg-type]
    assert record_from_json(record_to_json(record), type(record)) == record  # type: ignore[arg-type]


def test_records_are_frozen() -> None:
    with pytest.raises(AttributeError):
        OBS.url = "x"  # type: ignore[misc]


def _with(record: object, **changes: object) -> bytes:
    raw = msgspec.msgpack.decode(encode_record(record))  # type: ignore[arg-type]
    raw.update(changes)
    return msgspec.msgpack.encode(raw)


def test_a_newer_schema_version_is_one_clear_error() -> None:
    with pytest.raises(SchemaVersionError, match="upgrade dreamgym"):
        decode_record(_with(make_step(), schema_version=SCHEMA_VERSION + 1), Step)
    # ... even when the newer record no longer decodes as this version's type
    with pytest.raises(SchemaVersionError, match="schema version 9"):
        decode_record(_with(make_step(), schema_version=9, reward="high"), Step)
    with pytest.raises(SchemaVersionError):
        record_from_json(msgspec.json.encode(msgspec.msgpack.decode(_with(OBS, schema_version=5))))


def test_garbage_and_wrong_kinds_are_record_format_errors() -> None:
    with pytest.raises(RecordFormatError):
        decode_record(b"\x00\x01garbage", Step)
    with pytest.raises(RecordFormatError):
        decode_record(encode_record(OBS), Step)
    with pytest.raises(RecordFormatError, match="source"):
        decode_record(_with(make_step(), source="simulated"), Step)


def test_steps_check_their_provenance() -> None:
    with pytest.raises(RecordFormatError, match="truncation_reason"):
        msgspec.structs.replace(make_step(0), truncated=True)
    with pytest.raises(RecordFormatError, match="experience_model_id"):
        msgspec.structs.replace(make_step(0, source="synthetic"), experience_model_id="")
    with pytest.raises(RecordFormatError, match="logprob"):
        PolicyTokens(action_ids=(1, 2), action_logprobs=(-1.0,))


def test_action_text_is_canonical() -> None:
    assert str(parse_action('  type [e3] [hello world] "Name" ')) == 'type [e3] [hello world] [1] "Name"'
    assert str(Action(name="invalid", raw="do something")) == "do something"


def test_observation_hash_depends_on_what_the_policy_sees() -> None:
    same = msgspec.structs.replace(OBS, last_action_error="", cut_note="")
    assert observation_hash(OBS) == observation_hash(same)
    assert observation_hash(OBS) != observation_hash(msgspec.structs.replace(OBS, url="http://127.0.0.1/other"))
