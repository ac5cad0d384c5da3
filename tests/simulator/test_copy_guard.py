"""A diff's removal and context lines kept to the page's lines as the local backend decodes (Sampling.copy_lines)."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import toy_form
from sim_helpers import TOY_TEMPLATE

from dreamgym.core import Sampling
from dreamgym.simulator import LLMExperienceModel, teacher_forced_queries
from dreamgym.simulator.backends import LocalBackend
from dreamgym.simulator.backends._copy import CopyGuard

PAGE = ('[e1] heading "Sign up"', '  [e2] checkbox "Tea"', '  [e3] checkbox "Coffee" [checked]',
        '  [e4] textbox "Name"', '[e5] button "Submit"')  # fmt: skip


def copied_lines(answer: str) -> list[str]:
    """The removal and context lines of the answer's diff, without their prefix."""
    body = answer.split("<diff>", 1)[1].split("</diff>", 1)[0]
    return [line[2:] for line in body.split("\n")[1:] if line[:2] in ("- ", "  ")]


def left_by(guard: CopyGuard | None, answer: str, vocabulary: int) -> list[int]:
    """The token ids the guard (none: no guard) leaves after ``answer`` on :data:`PAGE`."""
    constraint = guard.constraint(answer, frozenset(PAGE)) if guard is not None else None
    if constraint is None:
        return list(range(vocabulary))
    ids, only = constraint
    if only:
        return ids
    banned = set(ids)
    return [token for token in range(vocabulary) if token not in banned]


def random_walk(guard: CopyGuard | None, texts: list[str], rng: random.Random, *, lines: int) -> str:
    """An adversary's answer: tokens drawn at random (those that start a removal or context line favoured) from
    whatever the guard leaves, until ``lines`` lines are written."""
    answer = "<diff>\n"
    while answer.count("\n") <= lines:
        choices = left_by(guard, answer, len(texts))
        if answer.endswith("\n") and rng.random() < 0.7:  # start a removal or context line where one may start
            starting = [t for t in choices if texts[t][:1] in ("-", " ")]
            answer += texts[rng.choice(starting)] if guard is not None else rng.choice(("- ", "  "))
            continue
        answer += texts[rng.choice(choices)]
    return answer


def test_every_line_a_guarded_adversary_copies_is_a_page_line(tiny_sim_dir: Path) -> None:
    """Random tokens, steered only by the guard, write removal and context lines that are all the page's; the same
    adversary unguarded writes lines the page does not have (so the check can fail)."""
    backend = LocalBackend.load(tiny_sim_dir)
    guard = CopyGuard.for_tokenizer(backend.tokenizer)
    assert guard is not None  # the tiny model's byte-level BPE: each token decodes alone as in a row
    guarded = [line for n in range(6) for line in copied_lines(random_walk(guard, guard.texts, random.Random(n),
                                                                           lines=12))]  # fmt: skip
    assert len(guarded) >= 20 and set(guarded) <= set(PAGE)
    free = [line for n in range(6) for line in copied_lines(random_walk(None, guard.texts, random.Random(n), lines=12))]
    assert set(free) - set(PAGE)


def added_line(guard: CopyGuard | None, texts: list[str], rng: random.Random, start: str) -> str:
    """An adversary's added line after ``start``: random tokens from whatever the guard leaves, to its end."""
    answer = "<diff>\n" + start
    while not answer.endswith("\n") and len(answer) < 200:
        choices = left_by(guard, answer, len(texts))
        closing = [t for t in choices if texts[t][:1] == "]"]
        if answer.endswith("[e3") and closing and rng.random() < 0.8:  # close the id, as a model would
            choices = closing
        answer += texts[rng.choice(choices)]
    return answer.split("\n")[1]


def test_an_added_line_of_an_element_the_page_has_keeps_its_role_and_name(tiny_sim_dir: Path) -> None:
    """Whatever follows ``+ [e3``, an added line of the page's e3 is a checkbox named Coffee (checked or not); the
    unguarded adversary renames it; a new element's line stays free."""
    guard = CopyGuard.for_tokenizer(LocalBackend.load(tiny_sim_dir).tokenizer)
    assert guard is not None
    guarded = [added_line(guard, guard.texts, random.Random(n), "+   [e3") for n in range(30)]
    mine = [line for line in guarded if line.startswith("+   [e3]")]
    assert len(mine) >= 10 and all(line.startswith('+   [e3] checkbox "Coffee"') for line in mine), guarded
    free = [added_line(None, guard.texts, random.Random(n), "+   [e3] ") for n in range(30)]
    assert not all(line.startswith('+   [e3] checkbox "Coffee"') for line in free)
    assert guard.constraint('<diff>\n+ [e9] radio "new', frozenset(PAGE)) is None  # not on the page: free
    assert guard.constraint('<diff>\n+   [e3] checkbox "Coffee" [', frozenset(PAGE)) is None  # its head written


def test_outside_a_diff_and_on_new_elements_every_token_stays_allowed(tiny_sim_dir: Path) -> None:
    guard = CopyGuard.for_tokenizer(LocalBackend.load(tiny_sim_dir).tokenizer)
    assert guard is not None
    page = frozenset(PAGE)
    for answer in ("<think>the box", "<diff>\n+ [e9] check", "<diff>\n</diff>\n<reward>", ""):
        assert guard.constraint(answer, page) is None, answer
    assert guard.constraint("<diff>\n- [e2]", frozenset()) is None  # no page given: nothing to copy
    ids, only = guard.constraint('<diff>\n-   [e3] checkbox "Coffee"', page) or ([], False)
    assert only and {guard.texts[t] for t in ids} <= {" [checked]\n"[:n] for n in range(1, 12)}


def test_the_local_backends_sampler_writes_only_page_lines_where_the_diff_copies(tiny_sim_dir: Path) -> None:
    """The backend's own decoding step, on random logits (a model that knows nothing), greedy and sampled: a
    removal line is carried on as a page line to its end; a row that asks for no lines is left alone."""
    import torch

    from dreamgym.simulator.backends._local import _Request, _Row

    backend = LocalBackend.load(tiny_sim_dir)
    lines = tuple(PAGE)
    for temperature in (0.0, 1.0):
        sampling = Sampling(temperature=temperature, seed=3, copy_lines=lines)
        generator = torch.Generator().manual_seed(3) if temperature else None
        row = _Row(request=_Request(prompt_ids=[1], sampling=sampling), generator=generator)
        row.lines = backend._copy_lines(sampling)  # as generate_ids sets it up
        assert row.lines == frozenset(lines)
        row.text = "<diff>\n-   [e3] check"
        while not row.text.endswith("\n"):
            noise = torch.Generator().manual_seed(len(row.text))
            logits = torch.randn(backend.model.config.vocab_size, generator=noise)
            assert backend._advance(row, backend._sample(row, logits)) == "", row.text[-80:]
        assert row.text.endswith('-   [e3] checkbox "Coffee" [checked]\n'), row.text
    free = _Row(request=_Request(prompt_ids=[1], sampling=Sampling()), generator=None)
    free.text = "<diff>\n-   [e3] check"
    logits = torch.randn(backend.model.config.vocab_size, generator=torch.Generator().manual_seed(0))
    assert backend._sample(free, logits) == int(torch.argmax(logits))


def test_the_experience_model_asks_for_the_pages_lines_only_when_told_to() -> None:
    from dataclasses import replace

    from sim_helpers import ScriptedBackend

    from dreamgym.simulator import ExperienceModelConfig

    backend = ScriptedBackend(["<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"])
    query = anyio.run(toy_query)
    on = ExperienceModelConfig(template=TOY_TEMPLATE, copy_page_lines=True)
    anyio.run(LLMExperienceModel(backend, config=on).predict, query)
    asked = backend.calls[-1][1].copy_lines
    assert asked and asked == tuple(line for line in query.observation.state.split("\n") if line.strip())
    default = ExperienceModelConfig(template=replace(TOY_TEMPLATE, neighbours=0))
    anyio.run(LLMExperienceModel(backend, config=default).predict, query)
    assert backend.calls[-1][1].copy_lines == ()


async def toy_query() -> object:
    steps = next(iter(toy_form.episodes(range(1))))
    (_, query), *_ = await teacher_forced_queries(steps, store=None, neighbours=0)
    return query
