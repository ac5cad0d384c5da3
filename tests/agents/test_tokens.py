"""The append-only token record: the chat template's pieces, linking turns, the trainer's flat sequence."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dreamgym.agents import EpisodeSequence, episode_sequence, link_turns, sequence_ids
from dreamgym.agents._tokens import ChatTurns
from dreamgym.core import ConfigError, PolicyTokens

# Act-time records of a three-turn episode: turn 0 holds the prompt, later turns the env's answer first.
RECORDS = (
    PolicyTokens(prompt_ids=(1, 2, 3), action_ids=(10, 11), action_logprobs=(-0.5, -0.25)),
    PolicyTokens(prompt_ids=(4, 5), action_ids=(12,), action_logprobs=(-1.0,)),
    PolicyTokens(prompt_ids=(6,), action_ids=(13, 14, 15), action_logprobs=(-0.1, -0.2, -0.3)),
)


def test_link_turns_moves_each_env_answer_behind_the_action_it_answers() -> None:
    linked = link_turns(RECORDS)
    assert [r.prompt_ids for r in linked] == [(1, 2, 3), (), ()]
    assert [r.env_ids for r in linked] == [(4, 5), (6,), ()]
    assert [r.action_ids for r in linked] == [r.action_ids for r in RECORDS]
    assert sequence_ids(linked) == sequence_ids(RECORDS) == [1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14, 15]
    assert link_turns(linked) == linked


def test_episode_sequence_masks_everything_but_the_policys_ids() -> None:
    expected = EpisodeSequence(
        prompt_ids=(1, 2, 3),
        completion_ids=(10, 11, 4, 5, 12, 6, 13, 14, 15),
        logprobs=(-0.5, -0.25, 0.0, 0.0, -1.0, 0.0, -0.1, -0.2, -0.3),
        env_mask=(1, 1, 0, 0, 1, 0, 1, 1, 1),
    )
    assert episode_sequence(RECORDS) == expected
    assert episode_sequence(link_turns(RECORDS)) == expected
    with pytest.raises(ConfigError):
        episode_sequence([])


def test_chat_turns_cut_the_template_into_prompt_reply_and_env_pieces(tiny_chat: tuple[Any, Any]) -> None:
    _, tokenizer = tiny_chat
    turns = ChatTurns(tokenizer)
    assert turns.eos_id == tokenizer.convert_tokens_to_ids("<|end|>")
    assert tokenizer.decode(turns.prompt_ids("S", "U")) == "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"
    assert turns.reply_ids("click [e1]")[-1] == turns.eos_id
    assert tokenizer.decode(turns.env_ids("next page")) == "\n<|user|>\nnext page<|end|>\n<|assistant|>\n"


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        (None, "no chat template"),
        ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
         "{% if add_generation_prompt %}<|assistant|>\n{% endif %}", "not the EOS"),
        ("{% for m in messages %}<|{{ m['role'] }}|>\n{% if loop.last %}LAST {% endif %}{{ m['content'] }}<|end|>\n"
         "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}", "renders earlier turns differently"),
    ],
)  # fmt: skip
def test_a_template_that_cannot_make_an_append_only_record_is_refused(
    tiny_chat: tuple[Any, Any], template: str | None, problem: str
) -> None:
    tokenizer = copy.deepcopy(tiny_chat[1])
    tokenizer.chat_template = template
    with pytest.raises(ConfigError, match=problem):
        ChatTurns(tokenizer)
