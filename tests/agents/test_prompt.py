"""The policies' prompt text and the strict answer parser: pure functions."""

from __future__ import annotations

import pytest
from helpers import make_step

from dreamgym.agents import (
    IN_GOAL,
    agent_messages,
    goal_first,
    parse_agent_answer,
    render_observation,
    system_message,
    user_message,
)
from dreamgym.agents._prompt import choice_lines
from dreamgym.core import Observation, Task, describe_actions, parse_action


def test_render_observation_shows_the_page_facts_that_are_present() -> None:
    observation = Observation(
        state='[e1] button "OK"',
        url="http://127.0.0.1/a",
        tabs=("Inbox", "Compose"),
        active_tab=1,
        focused_id="e1",
        last_action_error="there is no element [e9] on the page",
        cut_note="40 lines cut",
    )
    text = render_observation(observation)
    assert text.splitlines() == [
        "URL: http://127.0.0.1/a",
        "Tabs: 0: Inbox | 1: Compose (active)",
        "Focused: [e1]",
        "Error of the last action: there is no element [e9] on the page",
        "Page:",
        '[e1] button "OK"',
        "(40 lines cut)",
    ]
    assert render_observation(Observation(state='[e1] button "OK"')) == 'Page:\n[e1] button "OK"'


def test_system_message_lists_the_generated_action_definitions_and_the_format() -> None:
    tagged = system_message("tagged")
    assert describe_actions() in tagged
    assert "<think>" in tagged and "<action>" in tagged
    bare = system_message("action", actions=["click", "stop"], list_actions=True)
    assert describe_actions(["click", "stop"]) in bare and "goto" not in bare
    assert "Actions:" not in system_message("action", list_actions=False)


def test_agent_messages_show_the_goal_the_last_actions_and_the_page() -> None:
    task = Task(task_id="t", instruction="Task instruction")
    history = [make_step(n, action=f"click [e{n}]") for n in range(7)]
    observation = Observation(state='[e1] button "Go"', url="http://127.0.0.1/p", goal="Page goal")
    system, user = agent_messages(task, history, observation, history_actions=3)
    assert (system.role, user.role) == ("system", "user")
    assert describe_actions() in system.content
    lines = user.content.splitlines()
    assert lines[:4] == ["Previous actions (oldest first):", "- click [e4]", "- click [e5]", "- click [e6]"]
    assert lines[-1] == "Goal: Page goal"  # the page's own goal wins over the task's instruction, and comes last
    assert "\n".join(lines[4:-1]) == render_observation(observation)
    _, bare = agent_messages(task, [], Observation(state="text: hi"), history_actions=3)
    assert bare.content.splitlines()[-1] == "Goal: Task instruction" and "Previous" not in bare.content


def test_user_message_without_previous_actions_is_observation_then_goal() -> None:
    observation = Observation(state="text: hi")
    assert user_message("Do it", observation) == render_observation(observation) + "\nGoal: Do it"


def test_a_tagged_answer_gives_its_action_and_reasoning() -> None:
    action, reasoning = parse_agent_answer(
        ' <think>The goal says "Yes".</think>\n<action> click [e5] "Yes" </action>\n'
    )
    assert action == parse_action('click [e5] "Yes"')
    assert reasoning == 'The goal says "Yes".'
    action, reasoning = parse_agent_answer("<action>type [e2] [lyda] [0]</action>")
    assert (action.name, action.args, reasoning) == ("type", ("e2", "lyda", "0"), "")


@pytest.mark.parametrize(
    ("answer", "raw", "reason"),
    [
        ("<think>hmm</think> click [e5]", "click [e5]", "no <action>"),
        ("<action>click [e1]</action><action>click [e2]</action>",
         "<action>click [e1]</action><action>click [e2]</action>", "exactly one"),
        ("<action>click [e1]", "<action>click [e1]", "exactly one"),
        ("<action>press the button</action>", "press the button", "does not hold one action"),
        ("<action></action>", "", "does not hold one action"),
    ],
)  # fmt: skip
def test_a_malformed_answer_is_an_invalid_action_with_the_reason(answer: str, raw: str, reason: str) -> None:
    action, _ = parse_agent_answer(answer)
    assert action.is_invalid
    assert action.raw == raw
    assert reason in action.error


def test_index_choices_the_goal_names_come_first_and_are_marked() -> None:
    goal = 'Select "Blue" from the list and click Submit.'
    help_, submit = parse_action('click [e1] "Help"'), parse_action('click [e9] "submit"')
    pick = parse_action("select [e4] [Blue]")
    other = parse_action("select [e4] [Blue Green]")  # one of its words is not the goal's
    unnamed = parse_action("click [e7]")
    ranked = goal_first([help_, other, pick, unnamed, submit], goal)
    assert ranked == (pick, submit, help_, other, unnamed)  # named first, each part in page order
    lines = choice_lines(ranked, goal)
    assert [line.endswith(IN_GOAL) for line in lines] == [True, True, False, False, False]
    assert lines[0] == f"<a0> select [e4] [Blue] {IN_GOAL}"
    typed = parse_action('type [e2] [Blue] [0] "Colour"')  # typed text is the goal's own: not a target
    assert choice_lines([typed], goal) == ['<a0> type [e2] [Blue] [0] "Colour"']
    assert IN_GOAL in user_message(goal, Observation(state='[e9] button "submit"'), choices=[submit])
