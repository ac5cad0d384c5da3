"""The offline default's sampling of no-op examples: which "nothing happened" steps the experience model sees."""

from __future__ import annotations

from dreamgym.jobs.sim_default import balance, no_op_answer
from dreamgym.simulator import SFTExample

CHANGED = "<diff>\n- [e2] checkbox\n+ [e2] checkbox [checked]\n</diff>\n<reward>0</reward>\n<done>no</done>"


def examples(task: str, action: str, count: int, *, no_op: bool) -> list[SFTExample]:
    return [
        SFTExample(
            messages=(),
            completion=no_op_answer() if no_op else CHANGED,
            episode_id=f"{task}-{action}-{no_op}-{n}",
            step_index=0,
            task_id=task,
            seed=n,
            action_name=action,
        )
        for n in range(count)
    ]


def corpus() -> list[SFTExample]:
    # task a: clicks mostly change the page, some do not (the contrast); scrolls never do.
    # task b: typing changes the page; its clicks never do, so they are sampled like the scrolls.
    return [
        *examples("a", "click", 10, no_op=False),
        *examples("a", "click", 6, no_op=True),
        *examples("a", "scroll", 40, no_op=True),
        *examples("b", "type", 10, no_op=False),
        *examples("b", "scroll", 30, no_op=True),
        *examples("b", "click", 5, no_op=True),
    ]


def ids(kept: list[SFTExample], task: str, action: str, *, no_op: bool) -> set[str]:
    idle = no_op_answer()
    return {e.episode_id for e in kept if (e.task_id, e.action_name, e.completion == idle) == (task, action, no_op)}


def test_every_no_op_of_an_action_that_changes_the_page_on_its_task_is_kept_and_the_rest_fill_the_share() -> None:
    kept = balance(corpus(), no_op_share=0.5, contrast=True)
    assert len({e.episode_id for e in kept}) == len(kept)  # nothing twice
    assert len(ids(kept, "a", "click", no_op=False)) == 10 and len(ids(kept, "b", "type", no_op=False)) == 10
    assert len(ids(kept, "a", "click", no_op=True)) == 6  # clicking ONE before TWO: all of them
    idle = [e for e in kept if e.completion == no_op_answer()]
    assert len(idle) == 20  # half of the 40 examples, as asked: 6 contrasting, 14 sampled from the 75 others
    sampled = (
        ids(kept, "a", "scroll", no_op=True)
        | ids(kept, "b", "scroll", no_op=True)
        | ids(kept, "b", "click", no_op=True)
    )
    assert len(sampled) == 14
    assert balance(corpus(), no_op_share=0.5, contrast=True) == kept  # the same sample on every build
    assert balance(corpus(), no_op_share=0.5, seed=1, contrast=True) != kept


def test_where_the_contrasting_no_ops_alone_exceed_the_share_they_are_all_kept_and_nothing_else() -> None:
    kept = balance(corpus(), no_op_share=0.2, contrast=True)  # room for 5 no-ops beside 20 changes; 6 contrast
    idle = [e for e in kept if e.completion == no_op_answer()]
    assert len(idle) == 6 and ids(kept, "a", "click", no_op=True) == {e.episode_id for e in idle}
    assert len(kept) == 26


def test_by_default_every_no_op_is_drawn_alike_to_fill_the_share() -> None:
    kept = balance(corpus(), no_op_share=0.5)
    idle = [e for e in kept if e.completion == no_op_answer()]
    assert len(idle) == 20 and len({e.episode_id for e in kept}) == len(kept)
    draws = [balance(corpus(), no_op_share=0.5, seed=seed) for seed in range(40)]
    contrasting = [len(ids(draw, "a", "click", no_op=True)) for draw in draws]
    assert min(contrasting) < 6  # a random share of them, as the offline default's recipe was trained
    assert sum(contrasting) / len(contrasting) < 3  # 20 of 81 no-ops drawn: about 1.5 of the 6 on average


def test_without_no_ops_nothing_is_sampled() -> None:
    changing = examples("a", "click", 4, no_op=False)
    assert balance(changing) == changing == balance(changing, contrast=True)
