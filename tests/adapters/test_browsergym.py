"""BrowserGym agents on dreamgym: actions translated both ways and read by BrowserGym's own parser, BrowserGym's
observation dict rendered by its own flatten_axtree_to_str, and a scripted agent that speaks only BrowserGym solving
real MiniWoB++ tasks and running on the simulated env."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium
import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dreamgym  # noqa: F401  (registers the ids)
from dreamgym.adapters import (
    BROWSERGYM_OBSERVATION_KEYS,
    BrowserGymEnv,
    browsergym_observation,
    from_browsergym,
    to_browsergym,
)
from dreamgym.core import ActionParseError, ConfigError, Observation
from dreamgym.core.actions import (
    click,
    close_tab,
    go_back,
    go_forward,
    goto,
    hover,
    invalid_action,
    new_tab,
    press,
    scroll,
    select,
    stop,
    tab_focus,
    type_text,
)
from dreamgym.core.state import ID_PATTERN, flatten, parse_state
from dreamgym.core.types import Action

# --------------------------------------------------------------------------- BrowserGym itself (setup installs it)


@pytest.fixture(scope="module")
def bgym_obs() -> Any:
    """``browsergym.utils.obs``: flatten_axtree_to_str, flatten_dom_to_str, prune_html."""
    return pytest.importorskip("browsergym.utils.obs")


@pytest.fixture(scope="module")
def bgym_parser() -> Any:
    """BrowserGym's parser of high-level action strings."""
    return pytest.importorskip("browsergym.core.action.parsers").highlevel_action_parser


@pytest.fixture(scope="module")
def bgym_action_set() -> Any:
    """BrowserGym's action set with every subset dreamgym writes to, strict, multi-actions allowed (for fill+Enter)."""
    highlevel = pytest.importorskip("browsergym.core.action.highlevel")
    subsets = ["bid", "coord", "nav", "tab", "chat", "infeas"]
    return highlevel.HighLevelActionSet(subsets=subsets, strict=True, multiaction=True)


# --------------------------------------------------------------------------- actions: the translation table


@pytest.mark.parametrize(
    ("browsergym", "dreamgym_action"),
    [
        ("click('e5')", "click [e5]"),
        ("click(bid='e5', button='left', modifiers=[])", "click [e5]"),
        ("dblclick('e5')", "click [e5]"),
        ("fill('e3', 'lyda')", "type [e3] [lyda] [0]"),
        ("fill('e3', 'Montre', True)", "type [e3] [Montre] [0]"),
        ("fill('e3', 'lyda')\npress('e3', 'Enter')", "type [e3] [lyda] [1]"),
        ("clear('e3')", "type [e3] [] [0]"),
        ("select_option('e9', 'Blue')", "select [e9] [Blue]"),
        ("select_option('e9', ['Blue', 'Red'])", "select [e9] [Blue]"),
        ("hover('e4')", "hover [e4]"),
        ("press('e3', 'Enter')", "press [Enter]"),
        ("keyboard_press('ControlOrMeta+a')", "press [ControlOrMeta+a]"),
        ("scroll(0, 200)", "scroll [down]"),
        ("scroll(10, -50.5)", "scroll [up]"),
        ("goto('http://127.0.0.1:8000/a')", "goto [http://127.0.0.1:8000/a]"),
        ("go_back()", "go_back"),
        ("go_forward()", "go_forward"),
        ("new_tab()", "new_tab"),
        ("tab_close()", "close_tab"),
        ("tab_focus(1)", "tab_focus [1]"),
        ("send_msg_to_user('1751')", "stop [1751]"),
        ("report_infeasible('there is no email field')", "stop [N/A]"),
        ("  # the okay button\n  click('e5')  # click it\n", "click [e5]"),
    ],
)
def test_browsergym_actions_translate_to_dreamgym_actions(browsergym: str, dreamgym_action: str) -> None:
    action = from_browsergym(browsergym)
    assert str(action) == dreamgym_action
    assert action.raw == browsergym
    assert not action.is_invalid


@pytest.mark.parametrize(
    ("browsergym", "error"),
    [
        ("", "the action is empty"),
        ("noop()", "noop() has no dreamgym form"),
        ("noop(500)", "nothing to wait for"),
        ("focus('e3')", "use click(bid)"),
        ("mouse_click(10, 20)", "not at coordinates"),
        ("drag_and_drop('e1', 'e2')", "no drag and drop"),
        ("dance('e5')", "unknown BrowserGym action 'dance'"),
        ("click('e5') click('e6')", "is not a BrowserGym action call"),
        ("I will click('e5')", "is not a BrowserGym action call"),
        ("click('e5')\nclick('e6')", "one action a step, not 2"),
        ("fill('e3', 'x')\npress('e4', 'Enter')", "one action a step, not 2"),
        ("click(12)", "element ids are strings such as 'e5'"),
        ("click('e 5')", "element ids are strings"),
        ("click('e5', button='right')", "left button and no modifier keys"),
        ("click('e5', modifiers=['Shift'])", "left button and no modifier keys"),
        ("click()", "click(): missing a required argument: 'bid'; e.g. click('e5')"),
        ("click('e5', 'left', [], 'extra')", "click(): too many positional arguments"),
        ("click(bid)", "must be literals"),
        ("click(**{'bid': 'e5'})", "**unpacked"),
        ("x = click('e5')", "is not a call of a BrowserGym action"),
        ("__import__('os').system('touch /tmp/pwned')", "is not a call of a BrowserGym action"),
        ("fill('e3', 42)", "the text to fill must be a string"),
        ("select_option('e9', [])", "needs an option"),
        ("scroll(0, 0)", "up or down only"),
        ("scroll('down', 1)", "delta_x must be a number"),
        ("tab_focus(-1)", "no negative indices"),
        ("tab_focus(True)", "tab index"),
        ("keyboard_press('')", "press needs a key"),
    ],
)
def test_what_dreamgym_cannot_express_becomes_an_invalid_action_that_says_why(browsergym: str, error: str) -> None:
    action = from_browsergym(browsergym)
    assert action.is_invalid
    assert error in action.error
    assert action.raw == browsergym


@pytest.mark.parametrize(
    ("action", "browsergym"),
    [
        (click("e5"), "click('e5')"),
        (type_text("e3", "it's", "0"), "fill('e3', \"it's\")"),
        (type_text("e3", "lyda", "1"), "fill('e3', 'lyda')\npress('e3', 'Enter')"),
        (hover("e4"), "hover('e4')"),
        (press("Control+a"), "keyboard_press('Control+a')"),
        (scroll("down"), "scroll(0, 500)"),
        (scroll("up"), "scroll(0, -500)"),
        (select("e9", "Blue"), "select_option('e9', 'Blue')"),
        (new_tab(), "new_tab()"),
        (tab_focus("2"), "tab_focus(2)"),
        (close_tab(), "tab_close()"),
        (goto("http://127.0.0.1/"), "goto('http://127.0.0.1/')"),
        (go_back(), "go_back()"),
        (go_forward(), "go_forward()"),
        (stop(""), "send_msg_to_user('')"),
        (Action(name="click", args=("e5",), label="okay"), "click('e5')"),
    ],
)
def test_dreamgym_actions_are_written_as_browsergym_calls(action: Action, browsergym: str) -> None:
    assert to_browsergym(action) == browsergym


def test_an_invalid_action_is_written_as_its_raw_text_and_an_unknown_name_is_an_error() -> None:
    assert to_browsergym(invalid_action("dance wildly", "unknown action")) == "dance wildly"
    with pytest.raises(ActionParseError, match="dreamgym has no action 'dance'"):
        to_browsergym(Action(name="dance"))


def dreamgym_actions() -> st.SearchStrategy[Action]:
    """Every dreamgym action with a BrowserGym form, with arbitrary Unicode text."""
    ids = st.from_regex(ID_PATTERN, fullmatch=True)
    text = st.text(max_size=30)
    return st.one_of(
        st.builds(click, ids),
        st.builds(type_text, ids, text, st.sampled_from(["0", "1"])),
        st.builds(hover, ids),
        st.builds(press, st.text(min_size=1, max_size=12)),
        st.builds(scroll, st.sampled_from(["up", "down"])),
        st.builds(select, ids, text),
        st.just(new_tab()),
        st.builds(tab_focus, st.integers(0, 999).map(str)),
        st.just(close_tab()),
        st.builds(goto, text),
        st.just(go_back()),
        st.just(go_forward()),
        st.builds(stop, text),
    )


@given(dreamgym_actions())
def test_every_dreamgym_action_round_trips_through_its_browsergym_form(action: Action) -> None:
    written = to_browsergym(action)
    back = from_browsergym(written)
    assert back.raw == written
    assert msgspec.structs.replace(back, raw="") == action


@settings(max_examples=60)
@given(action=dreamgym_actions())
def test_browsergyms_own_parser_reads_every_string_to_browsergym_writes(
    action: Action, bgym_parser: Any, bgym_action_set: Any
) -> None:
    written = to_browsergym(action)
    bgym_action_set.to_python_code(written)  # raises on an action BrowserGym does not know
    calls = bgym_parser.parse_string(written, parse_all=True).as_list()
    assert "\n".join(f"{name}({', '.join(repr(arg) for arg in args)})" for name, args in calls) == written


# --------------------------------------------------------------------------- observations

PAGE = """[e1] heading "Sign in" [level=1]
[e2] form "Login"
  [e3] textbox "Username": lyda
  [e4] checkbox "Remember me" [checked]
  [e5] generic [cursor=pointer]: Forgot?
  [e6] button "Sign in" [disabled]
  combobox "Language"
    option "English" [selected]
text: Need help?"""


@pytest.fixture
def page_observation() -> Observation:
    return Observation(
        state=PAGE,
        url="http://127.0.0.1/login",
        tabs=("Home", "Sign in"),
        active_tab=1,
        focused_id="e3",
        last_action_error="there is no element [e9] on the page",
    )


def test_the_observation_has_browsergyms_keys_and_what_dreamgym_knows(page_observation: Observation) -> None:
    obs = browsergym_observation(page_observation, goal="Sign in as lyda.", last_action="click('e9')")
    assert tuple(obs) == BROWSERGYM_OBSERVATION_KEYS
    assert obs["goal"] == "Sign in as lyda."
    assert obs["goal_object"] == ({"type": "text", "text": "Sign in as lyda."},)
    assert obs["chat_messages"] == ({"role": "user", "timestamp": 0.0, "message": "Sign in as lyda."},)
    assert obs["url"] == "http://127.0.0.1/login"
    assert obs["open_pages_urls"] == ("", "http://127.0.0.1/login")
    assert obs["open_pages_titles"] == ("Home", "Sign in")
    assert obs["active_page_index"].tolist() == [1]
    assert obs["focused_element_bid"] == "e3"
    assert obs["last_action"] == "click('e9')"
    assert obs["last_action_error"] == "there is no element [e9] on the page"
    assert obs["screenshot"] is None
    assert obs["elapsed_time"].tolist() == [0.0]


def test_extra_element_properties_keep_every_element_through_browsergyms_filters(
    page_observation: Observation,
) -> None:
    extra = browsergym_observation(page_observation, goal="")["extra_element_properties"]
    assert list(extra) == ["e1", "e2", "e3", "e4", "e5", "e6"]
    assert {bid for bid, props in extra.items() if props["clickable"]} == {"e3", "e4", "e5", "e6"}
    assert all(props["visibility"] == 1.0 and props["set_of_marks"] for props in extra.values())


def test_flatten_axtree_to_str_renders_the_page_as_browsergym_prints_a_live_one(
    page_observation: Observation, bgym_obs: Any
) -> None:
    obs = browsergym_observation(page_observation, goal="")
    assert bgym_obs.flatten_axtree_to_str(obs["axtree_object"]) == "\n".join(
        [
            "RootWebArea 'Sign in'",
            "\t[e1] heading 'Sign in'",  # BrowserGym leaves out level=
            "\t[e2] form 'Login'",
            "\t\t[e3] textbox 'Username' value='lyda', focused",
            "\t\t[e4] checkbox 'Remember me', checked='true'",
            "\t\t[e5] generic, cursor='pointer'",
            "\t\t\tStaticText 'Forgot?'",
            "\t\t[e6] button 'Sign in', disabled=True",
            "\t\tcombobox 'Language'",
            "\t\t\toption 'English', selected=True",
            "\tStaticText 'Need help?'",
        ]
    )
    filtered = bgym_obs.flatten_axtree_to_str(
        obs["axtree_object"],
        extra_properties=obs["extra_element_properties"],
        filter_visible_only=True,
        filter_som_only=True,
        with_clickable=True,
    )
    assert [f"[e{n}]" in filtered for n in range(1, 7)] == [True] * 6
    assert "[e6] button 'Sign in', clickable, disabled=True" in filtered


def test_browsergyms_dom_preprocessing_runs_on_the_empty_dom(page_observation: Observation, bgym_obs: Any) -> None:
    obs = browsergym_observation(page_observation, goal="")
    assert bgym_obs.prune_html(bgym_obs.flatten_dom_to_str(obs["dom_object"])) == ""


# --------------------------------------------------------------------------- the real env

TASKS = ("click-button", "enter-text", "login-user")


@pytest.fixture(scope="module")
def real_env() -> Iterator[Callable[[str], BrowserGymEnv]]:
    """Opens ``dreamgym/miniwob.<task>-v0`` wrapped in BrowserGymEnv, once per task for the module."""
    opened: dict[str, BrowserGymEnv] = {}

    def open_task(task: str) -> BrowserGymEnv:
        if task not in opened:
            opened[task] = BrowserGymEnv(gymnasium.make(f"dreamgym/miniwob.{task}-v0", max_steps=5))
        return opened[task]

    yield open_task
    for env in opened.values():
        env.close()


class ScriptedBrowserGymAgent:
    """An AgentLab-style agent for click-button, enter-text and login-user that knows only BrowserGym.

    It preprocesses each observation as BrowserGym's default agent does (the DOM and the accessibility tree to text),
    reads only BrowserGym's keys (goal_object, axtree_object through flatten_axtree_to_str, last_action_error), and
    answers BrowserGym action strings whose bids it finds in the flattened tree, as a language model would.
    """

    def __init__(self, bgym_obs: Any) -> None:
        self.bgym_obs = bgym_obs
        self.plan: list[str] | None = None

    def obs_preprocessor(self, obs: dict[str, Any]) -> dict[str, Any]:
        obs = dict(obs)
        obs["dom_txt"] = self.bgym_obs.flatten_dom_to_str(obs["dom_object"])
        obs["axtree_txt"] = self.bgym_obs.flatten_axtree_to_str(
            obs["axtree_object"], extra_properties=obs["extra_element_properties"], with_clickable=True
        )
        obs["pruned_html"] = self.bgym_obs.prune_html(obs["dom_txt"])
        return obs

    def get_action(self, obs: dict[str, Any]) -> str:
        if obs["last_action_error"]:
            return f"report_infeasible({obs['last_action_error']!r})"
        if self.plan is None:
            self.plan = plan(obs["goal_object"][0]["text"], obs["axtree_txt"])
        return self.plan.pop(0) if self.plan else "send_msg_to_user('done')"


def plan(goal: str, axtree: str) -> list[str]:
    """The BrowserGym actions that do ``goal`` on the page ``axtree`` (flatten_axtree_to_str's text)."""

    def bid(pattern: str) -> str:
        match = re.search(pattern, axtree)
        assert match is not None, (pattern, axtree)
        return match.group(1)

    def button(label: str) -> str:
        return bid(rf"\[(\S+)\] button {re.escape(repr(label))}")

    if match := re.fullmatch(r'Click on the "(.+)" button\.', goal):
        return [f"click({button(match[1])!r})"]
    if match := re.fullmatch(r'Enter "(.+)" into the text field and press Submit\.', goal):
        field = bid(r"\[(\S+)\] textbox")
        return [f"fill({field!r}, {match[1]!r})", f"click({button('Submit')!r})"]
    if match := re.fullmatch(r'Enter the username "(.+)" and the password "(.+)" into the text fields.*', goal):
        username = bid(r"StaticText 'Username'\n\s*\[(\S+)\] textbox")
        password = bid(r"StaticText 'Password'\n\s*\[(\S+)\] textbox")
        return [f"fill({username!r}, {match[1]!r})", f"fill({password!r}, {match[2]!r})", f"click({button('Login')!r})"]
    raise AssertionError(f"no plan for {goal!r}")


def run_episode(env: BrowserGymEnv, agent: ScriptedBrowserGymAgent, seed: int) -> tuple[float, list[dict[str, Any]]]:
    """One episode of ``agent`` on ``env``: its reward and every observation it saw."""
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    while True:
        action = agent.get_action(agent.obs_preprocessor(obs))
        obs, reward, terminated, truncated, _ = env.step(action)
        seen.append(obs)
        if terminated or truncated:
            return reward, seen


@pytest.mark.parametrize("task", TASKS)
def test_a_scripted_browsergym_agent_solves_real_miniwob_tasks(
    task: str, real_env: Callable[[str], BrowserGymEnv], bgym_obs: Any
) -> None:
    env = real_env(task)
    for seed in (0, 1):
        reward, seen = run_episode(env, ScriptedBrowserGymAgent(bgym_obs), seed)
        assert reward > 0, (task, seed)
        assert [obs["last_action_error"] for obs in seen] == [""] * len(seen)
        assert all(obs in env.observation_space for obs in seen)


def test_flattened_real_pages_show_every_element_id_name_and_text(
    real_env: Callable[[str], BrowserGymEnv], bgym_obs: Any
) -> None:
    for task in ("click-button", "login-user"):
        env = real_env(task)
        obs, _ = env.reset(seed=2)
        elements = [flat.element for flat in flatten(parse_state(env.unwrapped.last_observation.state))]
        text = bgym_obs.flatten_axtree_to_str(obs["axtree_object"])
        every_id = bgym_obs.flatten_axtree_to_str(obs["axtree_object"], skip_generic=False)
        # BrowserGym hides the bids of unnamed generic elements without props (their text shows), as on live pages
        shown = [e.id for e in elements if e.id and (e.role != "generic" or e.name or e.props)]
        assert [bid for bid in shown if f"[{bid}] " not in text] == []
        assert [e.id for e in elements if e.id and f"[{e.id}] " not in every_id] == []
        assert [e.name for e in elements if e.name and repr(e.name) not in text] == []
        assert [e.text for e in elements if e.text and e.text not in text] == []


def test_a_browsergym_action_dreamgym_cannot_express_comes_back_as_last_action_error(
    real_env: Callable[[str], BrowserGymEnv],
) -> None:
    env = real_env("click-button")
    env.reset(seed=1)
    for action, error in [("noop()", "noop() has no dreamgym form"), ("click(", "is not a BrowserGym action call")]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert error in obs["last_action_error"]
        assert obs["last_action"] == action
        assert reward == 0.0
        assert (terminated, truncated) == (False, False)
        assert info["action"] == action
    obs, *_ = env.step("click('e99')")
    assert obs["last_action_error"] == "there is no element [e99] on the page; use the ids of the latest observation"


def test_web_env_carries_out_an_action_record_as_it_is(real_env: Callable[[str], BrowserGymEnv]) -> None:
    web_env = real_env("click-button").unwrapped
    web_env.reset(seed=1)
    observation, *_ = web_env.step(invalid_action("wave()", "the adapter's own reason"))
    assert observation["last_action_error"] == "the adapter's own reason"
    assert web_env.last_observation.last_action_error == "the adapter's own reason"


def test_browsergym_env_wraps_only_a_web_env_and_takes_only_strings(
    real_env: Callable[[str], BrowserGymEnv],
) -> None:
    with pytest.raises(ConfigError, match="BrowserGymEnv wraps a dreamgym WebEnv"):
        BrowserGymEnv(gymnasium.make("CartPole-v1"))
    env = real_env("click-button")
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="BrowserGymEnv actions are strings"):
        env.step(click("e3"))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the simulated env


def test_the_scripted_agent_runs_on_the_simulated_env_and_its_observations_are_browsergyms(
    tiny_models: tuple[Path, Path], bgym_obs: Any
) -> None:
    _, sim_dir = tiny_models
    sim = gymnasium.make(
        "dreamgym/sim.miniwob.click-button-v0", model=str(sim_dir), store=str(sim_dir.parent / "store"), max_steps=3
    )
    env = BrowserGymEnv(sim)
    try:
        reward, seen = run_episode(env, ScriptedBrowserGymAgent(bgym_obs), seed=0)
        assert reward in (0.0, 1.0)
        assert seen[1]["last_action"].startswith("click('e")
        for obs in seen:
            assert tuple(obs) == BROWSERGYM_OBSERVATION_KEYS
            assert obs in env.observation_space
            assert isinstance(obs["active_page_index"], np.ndarray)
            assert bgym_obs.flatten_axtree_to_str(obs["axtree_object"]).startswith("RootWebArea")
    finally:
        env.close()
