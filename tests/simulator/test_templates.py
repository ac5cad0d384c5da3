"""Prompt templates and the answer parser."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
import toy_form
from hypothesis import given
from hypothesis import strategies as st

from dreamgym.core import (
    ConfigError,
    ExperienceQuery,
    ModelOutputError,
    Neighbour,
    Observation,
    Step,
    parse_action,
    parse_state,
)
from dreamgym.simulator import (
    MAX_ANSWER_CHARS,
    MAX_PAST_ACTIONS,
    ServedModel,
    TemplateConfig,
    answer_pattern,
    answer_text,
    history_of,
    initial_answer_text,
    parse_answer,
    parse_initial_answer,
)

FIRST, SUBMIT = toy_form.episode(0, "Ana")
WRONG = toy_form.episode(5, "Bo")


def query(**kwargs: object) -> ExperienceQuery:
    defaults: dict[str, object] = {
        "task": toy_form.TASK,
        "history": history_of([FIRST]),
        "observation": SUBMIT.observation,
        "action": SUBMIT.action,
        "neighbours": (Neighbour(seq=7, score=0.9, step=WRONG[1]),),
    }
    return ExperienceQuery(**{**defaults, **kwargs})  # type: ignore[arg-type]


def user_text(config: TemplateConfig, q: ExperienceQuery | None = None) -> str:
    return config.messages(q or query())[-1].content


def test_prompt_holds_task_history_neighbours_state_and_action() -> None:
    text = user_text(TemplateConfig(history=2, neighbours=3))
    assert text.startswith('Task: Enter "Ana" and press Submit.')
    assert "Similar real transitions" in text and 'Enter "Flo" and press Submit.' in text
    assert "outcome: reward 0, episode ended" in text
    assert "History (oldest first):\nstep 1: type [e2] [Ana] [0]" in text
    assert "+ [e2] textbox: Ana" in text
    assert text.endswith('Action: click [e3] "Submit"')
    assert SUBMIT.observation.state in text


def test_ablation_switches_remove_their_part_and_change_the_template_id() -> None:
    full = TemplateConfig(history=2, neighbours=3, reasoning=True)
    bare = TemplateConfig(history=0, neighbours=0, reasoning=False)
    assert "History" not in user_text(bare) and "Similar real transitions" not in user_text(bare)
    assert "<think>" in full.messages(query())[0].content
    assert "<think>" not in bare.messages(query())[0].content
    ids = {full.template_id, bare.template_id, TemplateConfig(output="state").template_id}
    assert len(ids) == 3
    assert full.template_id == "experience/v1:h2:k3:think:diff"


def test_a_template_without_instructions_is_the_same_query_alone_under_its_own_id() -> None:
    with_system = TemplateConfig(history=1, neighbours=2)
    bare = TemplateConfig(history=1, neighbours=2, instructions=False)
    assert [m.role for m in bare.messages(query())] == ["user"]
    assert bare.messages(query())[0] == with_system.messages(query())[1]
    assert with_system.template_id == "experience/v1:h1:k2:direct:diff"
    assert bare.template_id == "experience/v1:h1:k2:direct:diff:bare"


def test_past_actions_name_every_earlier_action_beyond_the_history_window_under_their_own_id() -> None:
    steps = toy_form.episode(1, "Bo") + toy_form.episode(1, "Cyd")
    config = TemplateConfig(history=1, neighbours=2, past_actions=True)
    later = user_text(config, query(history=history_of(steps[:3]), observation=steps[3].observation))
    assert "step 1:" not in later and "step 2:" not in later  # out of the history window, still named
    assert later.splitlines()[-2] == f"Actions so far: {steps[0].action} | {steps[1].action} | {steps[2].action}"
    first = user_text(config, query(history=()))
    assert first.splitlines()[-2:] == ["Actions so far: (none)", f"Action: {SUBMIT.action}"]
    assert "Actions so far" not in user_text(TemplateConfig(history=1))
    assert config.template_id == "experience/v1:h1:k2:direct:diff:acts"
    assert TemplateConfig(history=1, instructions=False, past_actions=True).template_id.endswith(":bare:acts")


def test_the_target_line_repeats_the_page_line_of_the_actions_element_after_the_action() -> None:
    config = TemplateConfig(history=1, neighbours=2, past_actions=True, target_line=True)
    assert config.template_id == "experience/v1:h1:k2:direct:diff:acts:tgt"
    assert user_text(config).splitlines()[-3:] == [
        "Actions so far: type [e2] [Ana] [0]",
        'Action: click [e3] "Submit"',
        'Target: [e3] button "Submit"',
    ]
    nested = Observation(state='[e1] form\n  [e2] checkbox "kp6"\n  [e12] checkbox "kp"', goal="Select kp.")
    lines = [
        user_text(config, query(observation=nested, action=parse_action(text))).splitlines()[-1]
        for text in ("click [e12]", "click [e2]", "click [e9]", "scroll [down]", "type [e2] [kp] [0]")
    ]
    assert lines == [
        'Target:   [e12] checkbox "kp"',  # the page's line as written, indent and all, not [e1]'s prefix match
        'Target:   [e2] checkbox "kp6"',
        "Target: (not on the page)",
        "Target: (none)",
        'Target:   [e2] checkbox "kp6"',
    ]
    assert "Target:" not in user_text(TemplateConfig(history=1, past_actions=True))


def test_a_long_episode_names_its_latest_actions_and_counts_the_rest() -> None:
    steps = [step for n in range(MAX_PAST_ACTIONS) for step in toy_form.episode(n, "Bo")]
    line = user_text(TemplateConfig(past_actions=True), query(history=history_of(steps))).splitlines()[-2]
    named = line.removeprefix("Actions so far: ").split(" | ")
    assert named[0] == f"({len(steps) - MAX_PAST_ACTIONS} earlier)"
    assert named[1:] == [str(step.action) for step in steps[-MAX_PAST_ACTIONS:]]


def test_empty_history_and_no_neighbours_render_without_their_sections() -> None:
    text = user_text(TemplateConfig(), query(history=(), neighbours=()))
    assert "History" not in text and "Similar" not in text
    assert text.splitlines()[2] == "Current state:"


def test_history_window_keeps_the_last_steps_with_their_numbers() -> None:
    steps = toy_form.episode(1, "Bo") + toy_form.episode(1, "Cyd")
    q = query(history=history_of(steps[:3]), observation=steps[3].observation)
    text = user_text(TemplateConfig(history=2), q)
    assert "step 1:" not in text and "step 2: click [e3]" in text and "step 3: type [e2] [Cyd]" in text


def test_long_states_and_long_changes_are_cut_with_a_note() -> None:
    long_state = "\n".join(f'[e{n}] link "Result {n}"' for n in range(400))
    observation = Observation(state=long_state)
    config = TemplateConfig(max_state_chars=500, max_change_lines=3)
    text = user_text(config, query(observation=observation))
    assert "more lines cut)" in text and len(text) < 3000
    many = msgspec.structs.replace(WRONG[0], next_observation=observation)
    text = user_text(config, query(neighbours=(Neighbour(seq=1, score=1.0, step=many),)))
    assert "more changed lines)" in text


def test_bad_template_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        TemplateConfig(history=-1)
    with pytest.raises(ConfigError):
        TemplateConfig(output="html")  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [TemplateConfig(), TemplateConfig(output="state", reasoning=True)])
@pytest.mark.parametrize("step", [FIRST, SUBMIT, *WRONG])
def test_answer_text_parses_back_to_the_real_transition(config: TemplateConfig, step: Step) -> None:
    text = answer_text(config, observation=step.observation, next_observation=step.next_observation,
                       reward=step.reward, done=step.terminated, reasoning="because")  # fmt: skip
    parsed = parse_answer(text, step.observation.state)
    assert parsed.state == parse_state(step.next_observation.state)
    assert (parsed.reward, parsed.done) == (step.reward, step.terminated)
    assert parsed.reasoning == ("because" if config.reasoning else "")


def test_answer_diffs_are_lean_and_carry_the_action_error() -> None:
    text = answer_text(TemplateConfig(), observation=FIRST.observation, next_observation=FIRST.next_observation,
                       reward=0.0, done=False)  # fmt: skip
    assert text.startswith("<diff>\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>")
    failed = msgspec.structs.replace(FIRST.observation, last_action_error="element is hidden")
    text = answer_text(TemplateConfig(), observation=FIRST.observation, next_observation=failed, reward=0, done=False)
    assert parse_answer(text, FIRST.observation.state).error == "element is hidden"


CURRENT = FIRST.observation.state


@pytest.mark.parametrize(
    "answer",
    [
        "<diff>\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>\n<reward>0</reward>\n<done>no</done>",
        "Sure!\n```\n<DIFF>\n-[e2] textbox\n+[e2] textbox: Ana\n</DIFF>\n<Reward>0.0</Reward>\n<done>No.</done>\n```",
        "<think>typing fills the box</think><diff>\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>"
        "<reward>+0</reward><done>false",
        "<state>\n" + toy_form.page(0, "Ana").state + "\n</state>\n<reward>0</reward>\n<done>no</done>",
        "- [e2] textbox\n+ [e2] textbox: Ana\n</diff>\n<reward>0</reward>\n<done>no</done>",  # <diff> left out
        toy_form.page(0, "Ana").state + "\n</STATE><reward>0</reward><done>no</done>",
    ],
)
def test_parser_tolerates_formatting_noise(answer: str) -> None:
    parsed = parse_answer(answer, CURRENT)
    assert parsed.state == parse_state(toy_form.page(0, "Ana").state)
    assert (parsed.reward, parsed.done) == (0.0, False)


def test_empty_or_none_diff_means_unchanged() -> None:
    for diff in ("", "(none)", "no change"):
        parsed = parse_answer(f"<diff>{diff}</diff><reward>1</reward><done>yes</done>", CURRENT)
        assert parsed.state == parse_state(CURRENT) and parsed.done
    # the opening tag left out of an empty diff (a small model's slip): still no change
    parsed = parse_answer("</diff>\n<reward>0</reward>\n<done>no</done>", CURRENT)
    assert parsed.state == parse_state(CURRENT) and not parsed.done


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ("<diff>\n</diff>\n<done>no</done>", "no <reward>"),
        ("<diff>\n</diff>\n<reward>0</reward>", "no <done>"),
        ("<reward>0</reward><done>no</done>", "neither <diff> nor <state>"),
        ("<diff>\n</diff><reward>lots</reward><done>no</done>", "not a number"),
        ("<diff>\n</diff><reward>0</reward><done>maybe</done>", "yes or no"),
        ('<diff>\n+     [e9] link "Too deep"\n</diff><reward>0</reward><done>no</done>', "does not apply"),
        ("<state>\n  [e1] indented first line\n</state><reward>0</reward><done>no</done>", "state format"),
        ("<diff>\n- [e2] textbox\n+ [e2] textb", "no <reward>"),  # truncated mid-answer
        ("I cannot help with that.", "neither"),
    ],
)
def test_malformed_answers_raise_model_output_errors_that_say_why(answer: str, complaint: str) -> None:
    with pytest.raises(ModelOutputError, match=complaint):
        parse_answer(answer, CURRENT)


def test_diff_lines_naming_absent_page_lines_are_dropped_and_counted() -> None:
    answer = (
        '<diff>\n- [e9] link "Nope"\n  option "Not here"\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>'
        "<reward>0</reward><done>no</done>"
    )
    parsed = parse_answer(answer, CURRENT)
    assert parsed.state == parse_state(toy_form.page(0, "Ana").state)
    assert parsed.dropped_lines == 2
    assert parse_answer(answer.replace('- [e9] link "Nope"\n  option "Not here"\n', ""), CURRENT).dropped_lines == 0


NESTED = '[e1] generic: Enter "t8FBY"\n[e2] paragraph\n  text: Password\n  [e3] textbox\n[e6] button "Submit"'


@pytest.mark.parametrize(
    "diff",
    [
        "- [e3] textbox\n+ [e3] textbox: t8FBY",  # the removal and the addition at the wrong depth
        "-   [e3] textbox: 9x\n+   [e3] textbox: t8FBY",  # the removal with text the field does not hold
        "-     [e3] textbox: 9x\n+ [e3] textbox: t8FBY",  # both wrong, differently
    ],
)
def test_diff_lines_that_get_a_line_wrong_but_name_its_id_are_read_as_that_line(diff: str) -> None:
    parsed = parse_answer(f"<diff>\n{diff}\n</diff><reward>0</reward><done>no</done>", NESTED)
    assert parsed.state == parse_state(NESTED.replace("  [e3] textbox", "  [e3] textbox: t8FBY"))
    assert (parsed.anchored_lines, parsed.dropped_lines) == (1, 0)


def test_an_id_the_page_lacks_is_still_dropped_not_anchored() -> None:
    diff = '- [e9] textbox: 9x\n  [e1] generic: Enter "t8FBY"\n+ text: hello'
    parsed = parse_answer(f"<diff>\n{diff}\n</diff><reward>0</reward><done>no</done>", NESTED)
    assert (parsed.anchored_lines, parsed.dropped_lines) == (0, 1)
    assert parsed.state.render().split("\n")[:2] == ['[e1] generic: Enter "t8FBY"', "text: hello"]


def test_additions_replacing_absent_lines_are_dropped_with_them_only_where_the_diff_breaks_the_page() -> None:
    # replacing lines the page lacks (at the top, an option line under nothing would break the page): all dropped
    borrowed = '-   option "Theo"\n+   option "Theo" [selected]\n-   [e9] link "Nope"\n+   [e9] link "Yes"'
    parsed = parse_answer(f"<diff>\n{borrowed}\n</diff><reward>0</reward><done>no</done>", NESTED)
    assert (parsed.state, parsed.dropped_lines) == (parse_state(NESTED), 4)
    # an addition after the next line the page has stands: the change it makes has a place
    mixed = f"{borrowed}\n  [e2] paragraph\n+   text: hi"
    parsed = parse_answer(f"<diff>\n{mixed}\n</diff><reward>0</reward><done>no</done>", NESTED)
    assert parsed.state == parse_state(NESTED.replace("  text: Password", "  text: hi\n  text: Password"))
    assert parsed.dropped_lines == 4
    # where the diff applies as it is, an addition after an absent line is placed as before
    placed = '- [e9] link "Nope"\n+ [e7] generic: new'
    parsed = parse_answer(f"<diff>\n{placed}\n</diff><reward>0</reward><done>no</done>", NESTED)
    assert parsed.state.render().split("\n")[0] == "[e7] generic: new" and parsed.dropped_lines == 1


def test_huge_answers_are_refused_unread() -> None:
    with pytest.raises(ModelOutputError, match="characters"):
        parse_answer("<diff>" + "+ text: x\n" * (MAX_ANSWER_CHARS // 8), CURRENT)


def test_initial_page_prompt_and_answer() -> None:
    messages = TemplateConfig().initial_messages(toy_form.TASK, seed=3)
    assert "Seed: 3" in messages[-1].content and toy_form.TASK.instruction in messages[-1].content
    page = toy_form.page(3)
    assert parse_initial_answer(initial_answer_text(page)) == parse_state(page.state)
    with pytest.raises(ModelOutputError):
        parse_initial_answer("<diff></diff>")


@given(st.text(max_size=300))
def test_parser_never_raises_anything_but_model_output_errors(text: str) -> None:
    with contextlib.suppress(ModelOutputError):
        parse_answer(text, CURRENT)


def test_action_in_prompt_is_the_canonical_text() -> None:
    action = parse_action("type [e2] [Ana] [1]")
    assert user_text(TemplateConfig(), query(action=action)).endswith("Action: type [e2] [Ana] [1]")


def test_a_diff_that_does_not_apply_is_salvaged_only_when_asked() -> None:
    """The model's last resort: the lines that can be placed stand (counted), the rest are dropped."""
    answer = (
        '<diff>\n+     [e9] link "Too deep"\n- [e2] textbox\n+ [e2] textbox: Ana\n</diff>'
        "<reward>1</reward><done>yes</done>"
    )
    with pytest.raises(ModelOutputError, match="does not apply"):
        parse_answer(answer, CURRENT)
    salvaged = parse_answer(answer, CURRENT, salvage=True)
    assert salvaged.state == parse_state(toy_form.page(0, "Ana").state)
    assert (salvaged.dropped_lines, salvaged.reward, salvaged.done) == (1, 1.0, True)
    with pytest.raises(ModelOutputError, match="no <reward>"):  # salvage never invents a missing part
        parse_answer(answer.replace("<reward>1</reward>", ""), CURRENT, salvage=True)


def test_a_garbled_diff_is_not_salvaged_into_an_unchanged_page_with_its_reward() -> None:
    answer = '<diff>\n+     [e9] link "Too deep"\n- [e77] nothing\n</diff><reward>1</reward><done>yes</done>'
    with pytest.raises(ModelOutputError, match="none of the <diff>'s lines can be placed"):
        parse_answer(answer, CURRENT, salvage=True)


@given(st.text(max_size=300))
def test_salvaging_parser_never_raises_anything_but_model_output_errors(text: str) -> None:
    with contextlib.suppress(ModelOutputError):
        parse_answer("<diff>\n" + text + "\n</diff><reward>0</reward><done>no</done>", CURRENT, salvage=True)


TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30).map(lambda t: " ".join(t.split()))


@given(
    reasoning=st.booleans(), output=st.sampled_from(["diff", "state"]), seed=st.integers(0, 7), typed=TEXT,
    reward=st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e-5, 2.25]), done=st.booleans(), error=TEXT,
    thought=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<"), max_size=60),
)  # fmt: skip
def test_every_answer_the_template_writes_matches_its_pattern(
    reasoning: bool, output: str, seed: int, typed: str, reward: float, done: bool, error: str, thought: str
) -> None:
    """The pattern a server's structured output is held to admits every SFT target the template writes."""
    import re

    config = TemplateConfig(reasoning=reasoning, output=output)  # type: ignore[arg-type]
    before, after = toy_form.page(seed), toy_form.page(seed, typed)
    after = msgspec.structs.replace(after, last_action_error=error)
    text = answer_text(config, observation=before, next_observation=after, reward=reward, done=done,
                       reasoning=thought)  # fmt: skip
    assert re.fullmatch(answer_pattern(config), text), text
    parsed = parse_answer(text, before.state)  # and what it admits here, the parser reads
    assert (parsed.reward, parsed.done) == (reward, done)


def test_the_pattern_refuses_what_is_not_the_templates_form() -> None:
    import re

    pattern = answer_pattern(TemplateConfig())
    assert re.fullmatch(pattern, "<diff>\n</diff>\n<reward>1</reward>\n<done>yes</done>")
    for wrong in ("the page changes", "<diff>\n</diff>\n<reward>yes</reward>\n<done>yes</done>",
                  "<state>\n[e1] generic\n</state>\n<reward>0</reward>\n<done>no</done>",
                  "<diff>\nx\n</diff>\n<reward>0</reward>\n<done>no</done>"):  # fmt: skip
        assert not re.fullmatch(pattern, wrong), wrong


def test_a_served_model_passes_its_servers_structured_output_option() -> None:
    pattern = answer_pattern(TemplateConfig())
    served = {mode: ServedModel(model="m", url="http://127.0.0.1:1/v1", structured=mode).request_fields()
              for mode in ("none", "vllm", "vllm-guided", "sglang")}  # fmt: skip
    assert served == {
        "none": {},
        "vllm": {"structured_outputs": {"regex": pattern}},
        "vllm-guided": {"guided_regex": pattern},
        "sglang": {"regex": pattern},
    }
    with pytest.raises(ConfigError, match="structured must be one of"):
        ServedModel(model="m", url="http://127.0.0.1:1/v1", structured="outlines")  # type: ignore[arg-type]
