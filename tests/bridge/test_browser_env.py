"""BrowserEnv on a small site served from 127.0.0.1, in real headless Chromium."""

from __future__ import annotations

import contextlib
import json

import anyio
import pytest

from dreamgym.bridge import BrowserEnv, BrowserPool, EnvConfig, generic_task
from dreamgym.core import (
    ConfigError,
    Observation,
    State,
    Task,
    check_environment,
    parse_action,
    parse_state,
    try_parse_action,
)

pytestmark = pytest.mark.anyio


def shop(site_url: str, **fields: object) -> Task:
    return Task(
        task_id="test/shop",
        instruction='Search for "shoes".',
        benchmark="generic",
        start_url=f"{site_url}/index.html",
        **fields,
    )  # type: ignore[arg-type]


def find(observation: Observation, role: str, name: str) -> str:
    state = parse_state(observation.state)
    for flat in _flat(state):
        if flat.role == role and (flat.name == name or flat.text == name):
            return flat.id
    raise AssertionError(f"no {role} {name!r} in\n{observation.state}")


def _flat(state: State) -> list:
    from dreamgym.core import flatten

    return [f.element for f in flatten(state)]


async def test_the_browser_env_passes_check_environment(pool: BrowserPool, site_url: str) -> None:
    await check_environment(BrowserEnv(pool), shop(site_url))


async def test_actions_change_the_page_and_observations_report_it(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool)
    obs = await env.reset(shop(site_url), seed=0)
    assert obs.url == f"{site_url}/index.html" and obs.tabs == ("Test shop",)
    assert 'heading "Test shop"' in obs.state

    async def act(text: str) -> Observation:
        result = await env.step(parse_action(text))
        assert not result.terminated and not result.truncated
        assert result.observation.last_action_error == "", result.observation.last_action_error
        return result.observation

    obs = await act(f"click [{find(obs, 'button', 'Press me')}]")
    assert "paragraph: Clicked" in obs.state
    obs = await act(f"hover [{find(obs, 'button', 'Hover me')}]")
    assert "paragraph: Hovered" in obs.state
    obs = await act(f"type [{find(obs, 'textbox', 'Search')}] [shoes] [1]")
    assert "paragraph: Searched: shoes" in obs.state and 'textbox "Search": shoes' in obs.state
    obs = await act(f"select [{find(obs, 'combobox', 'Color')}] [Blue]")
    assert 'option "Blue" [selected]' in obs.state
    obs = await act(f"click [{find(obs, 'checkbox', 'Agree')}]")
    assert 'checkbox "Agree" [checked]' in obs.state
    obs = await act("press [k]")
    assert "paragraph: Key k" in obs.state
    await act("scroll [down]")
    obs = await act(f"click [{find(obs, 'link', 'Page two')}]")
    assert obs.url.endswith("/page2.html") and 'heading "Page two"' in obs.state
    obs = await act("go_back")
    assert obs.url.endswith("/index.html")
    obs = await act("go_forward")
    assert obs.url.endswith("/page2.html")
    obs = await act(f"goto [{site_url}/index.html]")
    assert obs.tabs == ("Test shop",)
    obs = await act("new_tab")
    assert obs.tabs == ("Test shop", "about:blank") and obs.active_tab == 1
    obs = await act("tab_focus [0]")
    assert obs.active_tab == 0 and 'heading "Test shop"' in obs.state
    obs = await act("tab_focus [1]")
    obs = await act("close_tab")
    assert obs.tabs == ("Test shop",) and obs.active_tab == 0
    stop = await env.step(parse_action("stop [done]"))
    assert stop.terminated and not stop.truncated and stop.reward == 0.0
    await env.aclose()


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("click [e999]", "no element [e999]"),
        ("clik [e1]", "unknown action 'clik'"),
        ("tab_focus [5]", "there is no tab 5"),
        ("close_tab", "cannot close the last tab"),
        ("goto [http://127.0.0.2:9/away.html]", "outside the task's allowed sites"),
    ],
)
async def test_impossible_actions_come_back_as_last_action_error(
    pool: BrowserPool, site_url: str, action: str, message: str
) -> None:
    env = BrowserEnv(pool)
    before = await env.reset(shop(site_url), seed=0)
    result = await env.step(try_parse_action(action))
    assert message in result.observation.last_action_error
    assert not result.terminated and not result.truncated
    assert result.observation.state == before.state
    await env.aclose()


async def test_an_element_that_cannot_be_acted_on_fails_within_the_action_timeout(
    pool: BrowserPool, site_url: str
) -> None:
    env = BrowserEnv(pool, config=EnvConfig(action_timeout_s=0.5))
    obs = await env.reset(shop(site_url), seed=0)
    result = await env.step(parse_action(f"click [{find(obs, 'button', 'Disabled')}]"))
    assert "failed" in result.observation.last_action_error
    assert not result.truncated
    result = await env.step(parse_action(f"type [{find(obs, 'button', 'Press me')}] [text] [0]"))
    assert "failed" in result.observation.last_action_error
    await env.aclose()


async def test_navigation_outside_the_allowlist_is_blocked_and_reported(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool)
    obs = await env.reset(shop(site_url), seed=0)
    result = await env.step(parse_action(f"click [{find(obs, 'link', 'Elsewhere')}]"))
    assert "navigation to http://127.0.0.2:9/away.html was blocked" in result.observation.last_action_error
    assert result.observation.url.startswith(site_url)
    allowed = shop(site_url, config_json=json.dumps({"allowed_origins": ["http://127.0.0.2:9"]}))
    await env.reset(allowed, seed=0)  # once allowed, the request goes out (and finds nothing there)
    result = await env.step(parse_action(f"click [{find(obs, 'link', 'Elsewhere')}]"))
    assert "was blocked" not in result.observation.last_action_error
    await env.aclose()


async def test_dialogs_are_accepted_and_pop_ups_become_tabs(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool)
    obs = await env.reset(shop(site_url), seed=0)
    result = await env.step(parse_action(f"click [{find(obs, 'button', 'Save')}]"))
    assert "a alert dialog said 'Saved!' and was accepted" in result.observation.last_action_error
    await env.step(parse_action(f"click [{find(obs, 'link', 'Open in new tab')}]"))
    # a pop-up opens asynchronously: it is a tab by the next observation at the latest
    with anyio.fail_after(10):
        while len((result := await env.step(parse_action("scroll [up]"))).observation.tabs) < 2:
            await anyio.sleep(0.05)
    assert result.observation.tabs == ("Test shop", "Page two") and result.observation.active_tab == 0
    await env.aclose()


async def test_the_step_limit_truncates(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool)
    await env.reset(shop(site_url, max_steps=2), seed=0)
    first = await env.step(parse_action("scroll [down]"))
    second = await env.step(parse_action("scroll [down]"))
    assert not first.truncated
    assert second.truncated and second.truncation_reason == "step_limit" and not second.terminated
    after = await env.step(parse_action("scroll [down]"))
    assert after.truncated and "episode is over" in after.observation.last_action_error
    await env.aclose()


async def test_a_hung_page_ends_the_episode_at_the_deadline(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool, config=EnvConfig(action_timeout_s=0.5, step_deadline_s=3))
    obs = await env.reset(shop(site_url), seed=0)
    result = await env.step(parse_action(f"click [{find(obs, 'button', 'Freeze')}]"))
    assert result.truncated and result.truncation_reason == "deadline"
    assert "did not answer" in result.observation.last_action_error
    again = await env.reset(shop(site_url), seed=0)  # a fresh context: the env goes on
    assert again.state == obs.state
    await env.aclose()


async def test_a_crashed_page_ends_the_episode_and_the_next_reset_works(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool)
    obs = await env.reset(shop(site_url), seed=0)
    page = env._episode.tabs.page  # type: ignore[union-attr]  # reach in only to crash the renderer
    session = await page.context.new_cdp_session(page)
    with anyio.move_on_after(2):  # the crash cuts the CDP reply short: it may never come
        with contextlib.suppress(Exception):
            await session.send("Page.crash")
    result = await env.step(parse_action("scroll [down]"))
    assert result.truncated and result.truncation_reason == "page_crashed"
    assert (await env.reset(shop(site_url), seed=0)).state == obs.state
    await env.aclose()


async def test_unknown_benchmarks_and_missing_resets_are_config_errors(pool: BrowserPool, site_url: str) -> None:
    from dreamgym.core import ConfigError

    env = BrowserEnv(pool)
    with pytest.raises(ConfigError, match="call reset"):
        await env.step(parse_action("scroll [down]"))
    with pytest.raises(ConfigError, match="no site runs benchmark 'webshop'"):
        await env.reset(Task(task_id="x", instruction="y", benchmark="webshop"))
    await env.aclose()


async def test_a_generic_task_is_evaluated_by_its_own_spec_when_the_agent_stops(
    pool: BrowserPool, site_url: str
) -> None:
    evaluator = {
        "eval_types": ["string_match", "url_match"],
        "reference_answers": {"must_include": ["two"]},
        "reference_url": f"{site_url}/page2.html",
    }
    task = generic_task(
        "test/page-two", f"{site_url}/index.html", "Open page two and say its name", evaluator=evaluator
    )
    env = BrowserEnv(pool)
    obs = await env.reset(task, seed=0)
    await env.step(parse_action(f"click [{find(obs, 'link', 'Page two')}]"))
    assert (await env.step(parse_action("stop [Page two]"))).reward == 1.0
    await env.reset(task, seed=0)
    assert (await env.step(parse_action("stop [Page two]"))).reward == 0.0  # right answer, wrong page
    with pytest.raises(ConfigError, match="eval_types"):
        generic_task("x", site_url, "y", evaluator={"reference_url": site_url})
    await env.aclose()


async def test_downloads_are_refused_without_harm(pool: BrowserPool, site_url: str) -> None:
    env = BrowserEnv(pool)
    obs = await env.reset(shop(site_url), seed=0)
    result = await env.step(parse_action(f"click [{find(obs, 'link', 'Download report')}]"))
    assert not result.truncated and result.observation.url == f"{site_url}/index.html"
    assert (await env.step(parse_action("scroll [down]"))).observation.tabs == ("Test shop",)
    await env.aclose()


async def test_a_covered_element_fails_at_once_naming_what_covers_it(pool: BrowserPool, site_url: str) -> None:
    """The action timeout is long: a click that waited for the covered button to become clickable
    would hang past the guard instead of answering."""
    env = BrowserEnv(pool, config=EnvConfig(action_timeout_s=100, step_deadline_s=200))
    task = Task(task_id="test/covered", instruction="Click Under.", benchmark="generic",
                start_url=f"{site_url}/covered.html")  # fmt: skip
    obs = await env.reset(task, seed=0)
    with anyio.fail_after(30):
        result = await env.step(parse_action(f"click [{find(obs, 'button', 'Under')}]"))
    assert 'covered by button "Top"' in result.observation.last_action_error
    assert "nothing clicked" in result.observation.state
    result = await env.step(parse_action(f"click [{find(obs, 'button', 'Top')}]"))
    assert result.observation.last_action_error == "" and "top clicked" in result.observation.state
    result = await env.step(
        parse_action(f"click [{find(obs, 'button', 'Free')}]")
    )  # under a pointer-events: none layer
    assert result.observation.last_action_error == "" and "free clicked" in result.observation.state
    await env.aclose()
