"""An answer kept to a diff that applies to the page as the local backend decodes (Sampling.copy_lines)."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import toy_form
from sim_helpers import TOY_TEMPLATE

from dreamgym.core import ModelOutputError, Sampling
from dreamgym.core.state import parse_state
from dreamgym.simulator import LLMExperienceModel, parse_answer, teacher_forced_queries
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
    constraint = guard.constraint(answer, PAGE) if guard is not None else None
    if constraint is None:
        return list(range(vocabulary))
    ids, only = constraint
    if only:
        return ids
    banned = set(ids)
    return [token for token in range(vocabulary) if token not in banned]


CLOSING = tuple('"]\n<>0123456789')
"""Characters that close what a line or a tag has open: the adversary favours tokens holding one, as a model
ends what it writes."""


def random_answer(guard: CopyGuard | None, texts: list[str], rng: random.Random) -> str:
    """An adversary's answer: random tokens from whatever the guard leaves (those that close something, and
    removal and context lines and the diff's close, favoured), until the guard says the answer is whole or
    1500 characters."""
    answer = "<diff>\n"
    while len(answer) < 1500 and not (guard is not None and guard.finished(answer)):
        choices = left_by(guard, answer, len(texts))
        if answer.endswith("\n"):  # a line starts: copy one, add one or close the diff
            draw = rng.random()
            starts = next(kinds for bound, kinds in ((0.4, "- "), (0.7, "+"), (0.9, "<"), (1, "")) if draw < bound)
            favoured = [t for t in choices if texts[t][:1] and texts[t][0] in starts]
            choices = favoured or choices
        elif len(answer) - answer.rfind("\n") > 30 and rng.random() < 0.5:  # a long line: end it where it may end
            ending = [t for t in choices if "\n" in texts[t]]
            choices = ending or choices
        elif rng.random() < 0.5:
            closing = [t for t in choices if any(char in texts[t] for char in CLOSING)]
            choices = closing or choices
        answer += texts[rng.choice(choices)]
    return answer


def test_every_answer_a_guarded_adversary_writes_applies_to_the_page_as_written(tiny_sim_dir: Path) -> None:
    """Random tokens, steered only by the guard, make answers that parse with no line dropped or repaired: their
    removal and context lines are the page's, in an order the diff can place, their added lines are state lines,
    their reward and end are there; the same adversary unguarded writes answers that do not parse (so the check
    can fail)."""
    backend = LocalBackend.load(tiny_sim_dir)
    guard = CopyGuard.for_tokenizer(backend.tokenizer)
    assert guard is not None  # the tiny model's byte-level BPE: each token decodes alone as in a row
    answers = [random_answer(guard, guard.texts, random.Random(n)) for n in range(40)]
    whole = [answer for answer in answers if guard.finished(answer)]
    assert len(whole) >= 20, answers  # the rest ran on past 1500 characters, writing random text
    for answer in whole:
        parsed = parse_answer(answer, "\n".join(PAGE))
        assert (parsed.dropped_lines, parsed.anchored_lines) == (0, 0), answer
        assert set(copied_lines(answer)) <= set(PAGE)
    assert sum(len(copied_lines(answer)) for answer in whole) >= 15  # the adversary did copy lines
    assert sum(answer.count("\n+ ") for answer in whole) >= 10  # and added some
    free = [random_answer(None, guard.texts, random.Random(n)) for n in range(40)]
    assert sum(not parses(answer) for answer in free) >= 20


def parses(answer: str) -> bool:
    try:
        parsed = parse_answer(answer, "\n".join(PAGE))
    except ModelOutputError:
        return False
    return (parsed.dropped_lines, parsed.anchored_lines) == (0, 0)


def test_a_copied_line_is_one_the_diff_can_still_reach_and_a_typed_text_is_not_empty() -> None:
    """Past a removed line, the lines above it are out of reach (``apply_diff`` places a removal at or after its
    cursor), and a context block goes on only with the line that follows it on the page."""
    guard = CopyGuard([*"- +\n<>/a", *PAGE])  # a vocabulary of characters and of whole page lines
    removal = guard.constraint('<diff>\n-   [e3] checkbox "Coffee" [checked]\n-', PAGE)
    assert removal is not None and removal[1]
    assert {guard.texts[t] for t in removal[0]} == {" "}
    reach = guard.constraint('<diff>\n-   [e3] checkbox "Coffee" [checked]\n- ', PAGE)
    assert reach is not None and reach[1]
    assert {guard.texts[t] for t in reach[0]} == {" ", '  [e4] textbox "Name"', '[e5] button "Submit"'}
    typed = guard.constraint('<diff>\n-   [e4] textbox "Name"\n+   [e4] textbox "Name": ', PAGE)
    assert typed is not None and "a" in left_texts(guard, typed)
    assert "\n" not in left_texts(guard, typed)  # a text is not empty (read back, ": " alone would break the line)
    block = guard.constraint('<diff>\n  [e1] heading "Sign up"\n  ', PAGE)
    assert block is not None and {guard.texts[t] for t in block[0]} == {" ", PAGE[1]}  # only e2 follows e1


def left_texts(guard: CopyGuard, constraint: tuple[list[int], bool]) -> set[str]:
    ids, only = constraint
    return {text for token, text in enumerate(guard.texts) if (token in set(ids)) == only}


def test_an_added_line_of_an_element_the_page_has_keeps_its_role_and_name(tiny_sim_dir: Path) -> None:
    """Whatever follows ``+ [e3``, an added line of the page's e3 is a checkbox named Coffee (checked or not); the
    unguarded adversary renames it; a new element's line is only kept to the grammar."""
    guard = CopyGuard.for_tokenizer(LocalBackend.load(tiny_sim_dir).tokenizer)
    assert guard is not None
    removed = '-   [e3] checkbox "Coffee" [checked]\n'  # an element's line is replaced: removed, then added
    guarded = [added_line(guard, guard.texts, random.Random(n), removed + "+   [e3") for n in range(30)]
    mine = [line for line in guarded if line.startswith("+   [e3]")]
    assert len(mine) >= 10 and all(line.startswith('+   [e3] checkbox "Coffee"') for line in mine), guarded
    ended = [line for line in guarded if len(line) < 150]  # the rest ran on with random text, unended
    assert len(ended) >= 20 and all(parse_state(line[2:].strip()) for line in ended)
    free = [added_line(None, guard.texts, random.Random(n), removed + "+   [e3] ") for n in range(30)]
    assert not all(line.startswith('+   [e3] checkbox "Coffee"') for line in free)
    new = guard.constraint('<diff>\n+ [e9] radio "new', PAGE)  # not on the page: any name, closed by a quote
    assert new is not None and not new[1] and '"' not in {guard.texts[t] for t in new[0]}


def test_a_token_that_closes_an_added_lines_id_closes_it_only_as_an_id_the_line_may_take() -> None:
    """Where a tokenizer keeps runs of non-space characters whole, ``[e5]`` or ``5]`` is one token: the id is
    written and closed at once. A build of the demo's model with such a tokenizer replaced a removed ``[e3]
    textbox`` with an added ``[e5] textbox`` beside the page's own e5 (two e5 on its page) and paid none of those
    login-user wins; the id check must hold for such tokens as for ``]`` alone."""
    tokens = ["[e2]", "[e3]", "[e5]", "[e9]", "[e", "2]", "3]", "5]", "9]", "3] checkbox", "3] textbox", "]", " "]
    guard = CopyGuard([*"- +\n<>/a", *tokens])
    removed = '<diff>\n-   [e3] checkbox "Coffee" [checked]\n+   '
    assert left_here(guard, removed, tokens) == {"[e3]", "[e9]", "[e", " "}  # e2 and e5 stay on the page
    # e3 as a checkbox only; "[e]" is a new element's id as the state format reads ids
    assert left_here(guard, removed + "[e", tokens) == {"3]", "9]", "3] checkbox", "]"}
    assert "]" not in left_here(guard, removed + "[e5", tokens)  # e5 is the page's, not removed
    assert {"2]", "9]"} <= left_here(guard, removed + "[e5", tokens)  # [e52] and [e59] are new
    again = removed + '[e9] radio "x"\n+ '
    assert "[e9]" not in left_here(guard, again, tokens) and "[e3]" in left_here(guard, again, tokens)


def left_here(guard: CopyGuard, answer: str, tokens: list[str]) -> set[str]:
    """Which of ``tokens`` the guard leaves after ``answer`` on :data:`PAGE`."""
    constraint = guard.constraint(answer, PAGE)
    left = left_texts(guard, constraint) if constraint is not None else set(guard.texts)
    return left & set(tokens)


def added_line(guard: CopyGuard | None, texts: list[str], rng: random.Random, start: str) -> str:
    """An adversary's added line after ``start``: random tokens from whatever the guard leaves, to its end."""
    answer = "<diff>\n" + start
    while not answer.endswith("\n") and len(answer) < 200:
        choices = left_by(guard, answer, len(texts))
        brackets = [t for t in choices if texts[t][:1] == "]"]
        closing = [t for t in choices if any(char in texts[t] for char in CLOSING)]
        if answer.endswith("[e3") and brackets and rng.random() < 0.8:  # close the id, as a model would
            choices = brackets
        elif closing and rng.random() < 0.5:  # close what is open
            choices = closing
        answer += texts[rng.choice(choices)]
    return answer.rstrip("\n").split("\n")[-1]


def test_before_the_diff_every_token_stays_allowed_and_after_it_the_tags_are_kept(tiny_sim_dir: Path) -> None:
    guard = CopyGuard.for_tokenizer(LocalBackend.load(tiny_sim_dir).tokenizer)
    assert guard is not None
    for answer in ("<think>the box", "", "<diff"):
        assert guard.constraint(answer, PAGE) is None, answer
    assert guard.constraint("<diff>\n- [e2]", ()) is None  # no page given: nothing to keep to
    ids, only = guard.constraint('<diff>\n-   [e3] checkbox "Coffee"', PAGE) or ([], False)
    assert only and {guard.texts[t] for t in ids} <= {" [checked]\n"[:n] for n in range(1, 12)}
    ids, only = guard.constraint("<diff>\n</diff>\n<reward>", PAGE) or ([], False)
    assert only and all(text[0] in "-0123456789" for text in (guard.texts[t] for t in ids))
    ids, only = guard.constraint("<diff>\n</diff>\n<reward>1</reward>\n<done>", PAGE) or ([], False)
    assert only and {guard.texts[t] for t in ids} <= {"y", "ye", "yes", "n", "no", "no<", "yes<"}
    assert not guard.finished("<diff>\n</diff>\n<reward>1</reward>\n<done>yes")
    assert guard.finished("<diff>\n</diff>\n<reward>1</reward>\n<done>yes</done>")
    assert guard.constraint("<diff>\n</diff>\n<reward>1</reward>\n<done>yes</done>", PAGE) is None


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
        assert row.lines == lines
        row.text = "<diff>\n-   [e3] check"
        while not row.text.endswith("\n"):
            noise = torch.Generator().manual_seed(len(row.text))
            logits = torch.randn(backend.model.config.vocab_size, generator=noise)
            assert backend._advance(row, backend._sample(row, logits)) == "", row.text[-80:]
        assert row.text.endswith('-   [e3] checkbox "Coffee" [checked]\n'), row.text
        row.text = "<diff>\n</diff>\n<reward>0</reward>\n<done>no</done"
        closing = next(t for t, text in enumerate(backend._guard.texts) if text == ">")  # type: ignore[union-attr]
        assert backend._advance(row, closing) == "stop"  # the answer is whole: decoding ends there
    free = _Row(request=_Request(prompt_ids=[1], sampling=Sampling()), generator=None)
    free.text = "<diff>\n-   [e3] check"
    logits = torch.randn(backend.model.config.vocab_size, generator=torch.Generator().manual_seed(0))
    assert backend._sample(free, logits) == int(torch.argmax(logits))


def test_the_sampler_counts_the_choices_it_overrules_but_not_a_copy_it_spells_nor_a_line_it_ends(
    tiny_sim_dir: Path,
) -> None:
    """``Completion.steered`` counts the tokens where the model's favourite was not allowed: a second line for an
    element the page keeps is one; spelling a chosen page line is not (a corrected copy), nor ending an added
    line of a page element where the model would run it on (the line ends there instead)."""
    import torch

    from dreamgym.simulator.backends._local import _Request, _Row

    backend = LocalBackend.load(tiny_sim_dir)
    vocabulary = backend.model.config.vocab_size

    def sample(text: str, favourite: str) -> tuple[str, int]:
        row = _Row(request=_Request(prompt_ids=[1], sampling=Sampling(copy_lines=PAGE)), generator=None)
        row.lines = backend._copy_lines(row.request.sampling)
        row.text = text
        guard = backend._guard
        assert guard is not None
        logits = torch.zeros(vocabulary)
        logits[guard.texts.index(favourite)] = 10.0
        token = backend._sample(row, logits)
        return guard.texts[token], row.request.steered

    _, steered = sample("<diff>\n+   [e3", "]")  # e3's line stays on the page: no second e3
    assert steered == 1
    _, steered = sample('<diff>\n-   [e3] checkbox "Cof', "6")  # a misspelt copy, corrected
    assert steered == 0
    chosen, steered = sample('<diff>\n-   [e3] checkbox "Coffee" [checked]\n+   [e3] checkbox "Coffee"', " [")
    assert (chosen, steered) == (" [", 0)  # allowed: the model's own choice
    chosen, steered = sample('<diff>\n-   [e3] checkbox "Coffee" [checked]\n+   [e3] checkbox "Coffee"', '"')
    assert (chosen, steered) == ("\n", 0)  # run on into another's text: the line ends there


def test_the_experience_model_asks_for_the_pages_lines_unless_told_not_to() -> None:
    from dataclasses import replace

    from sim_helpers import ScriptedBackend

    from dreamgym.simulator import ExperienceModelConfig

    backend = ScriptedBackend(["<diff>\n</diff>\n<reward>0</reward>\n<done>no</done>"])
    query = anyio.run(toy_query)
    anyio.run(LLMExperienceModel(backend, config=ExperienceModelConfig(template=TOY_TEMPLATE)).predict, query)
    asked = backend.calls[-1][1].copy_lines
    assert asked and asked == tuple(line for line in query.observation.state.split("\n") if line.strip())
    off = ExperienceModelConfig(template=replace(TOY_TEMPLATE, neighbours=0), copy_page_lines=False)
    anyio.run(LLMExperienceModel(backend, config=off).predict, query)
    assert backend.calls[-1][1].copy_lines == ()
    whole = ExperienceModelConfig(template=replace(TOY_TEMPLATE, output="state"))  # no diff: nothing to keep to
    anyio.run(LLMExperienceModel(backend, config=whole).predict, query)
    assert backend.calls[-1][1].copy_lines == ()


async def toy_query() -> object:
    steps = next(iter(toy_form.episodes(range(1))))
    (_, query), *_ = await teacher_forced_queries(steps, store=None, neighbours=0)
    return query
