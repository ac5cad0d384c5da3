"""MiniWoB++ through BrowserEnv in real Chromium: rewards, demonstrators, determinism, crashes."""

from __future__ import annotations

import difflib
import logging
import os
import signal
import socket

import anyio
import pytest

from dreamgym.agents import RandomExplorer
from dreamgym.bridge import (
    DEMONSTRATORS,
    EXCLUDED,
    NONDETERMINISTIC,
    BrowserConfig,
    BrowserEnv,
    BrowserPool,
    MiniWobDemonstrator,
    MiniWobSite,
    NearMissDemonstrator,
    all_tasks,
    mistaken_goal,
    text_tasks,
)
from dreamgym.bridge.miniwob import PORT
from dreamgym.core import (
    ConfigError,
    Observation,
    Policy,
    Task,
    candidate_actions,
    check_environment,
    parse_action,
    parse_state,
)
from dreamgym.runtime import run_episode
from dreamgym.simulator import CHECK_ROLES, checked_page, focus_after, selected_option_page, typed_text_page

pytestmark = pytest.mark.anyio


def test_the_manifest_covers_every_task_and_excludes_each_for_a_reason(miniwob: MiniWobSite) -> None:
    names = all_tasks()
    assert len(names) == 134  # 130 pages + 4 flight sites
    assert set(EXCLUDED) <= set(names)
    assert set(text_tasks()) == set(names) - set(EXCLUDED)
    assert all(reason for reason in EXCLUDED.values())
    assert not set(text_tasks(deterministic_only=True)) & NONDETERMINISTIC
    with pytest.raises(ConfigError, match="needs dragging"):
        miniwob.task("drag-box")
    with pytest.raises(ConfigError, match="no MiniWoB task"):
        miniwob.task("no-such-task")


async def final_reward(env: BrowserEnv, task: Task, seed: int, policy: Policy, max_steps: int = 10) -> float:
    steps, episode = await run_episode(env, policy, task, seed=seed, max_steps=max_steps)
    assert episode.num_steps == len(steps) and episode.success == (steps[-1].reward > 0)
    return steps[-1].reward


async def test_demonstrators_reach_reward_1_on_every_task_they_solve(pool: BrowserPool, miniwob: MiniWobSite) -> None:
    assert len(DEMONSTRATORS) >= 15
    demonstrator = MiniWobDemonstrator()
    env = BrowserEnv(pool, sites=[miniwob])
    for name in DEMONSTRATORS:
        for seed in (0, 1):
            reward = await final_reward(env, miniwob.task(name), seed, demonstrator)
            assert reward == 1.0, f"{name} seed {seed}"
    await env.aclose()


async def test_random_valid_actions_rarely_succeed(pool: BrowserPool, miniwob: MiniWobSite) -> None:
    env = BrowserEnv(pool, sites=[miniwob])
    chooser = RandomExplorer(0)
    solved = {name: 0 for name in DEMONSTRATORS}
    for name in DEMONSTRATORS:
        for seed in (0, 1):
            solved[name] += int(await final_reward(env, miniwob.task(name), seed, chooser, max_steps=6))
    await env.aclose()
    episodes = 2 * len(DEMONSTRATORS)
    assert sum(solved.values()) <= episodes // 3, solved
    assert sum(1 for wins in solved.values() if wins == 0) >= len(DEMONSTRATORS) // 2, solved


async def test_near_miss_demonstrators_fail_one_detail_short_of_the_goal(
    pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    """On a goal wrong in one detail the demonstrator still fills the form and submits: a failure that ends the
    episode, one step from the success it resembles."""
    env = BrowserEnv(pool, sites=[miniwob])
    for name in ("click-checkboxes", "click-option", "login-user", "enter-password"):
        for seed in range(3):
            steps, episode = await run_episode(
                env, NearMissDemonstrator(seed=seed), miniwob.task(name), seed=seed, max_steps=8
            )
            assert steps[-1].terminated, f"{name} seed {seed}"
            assert not episode.success, f"{name} seed {seed}"
            assert "submit" in str(steps[-1].action).lower() or "login" in str(steps[-1].action).lower()
    await env.aclose()


async def test_real_pages_agree_with_the_simulators_typed_text_selected_option_and_focus_rules(
    pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    """The simulator's rules change nothing on a real page: after every ``type`` of the demonstrators (passwords,
    Enter pressed or not), the field still on the page holds exactly the typed text; after every ``select``, the
    chosen option is the list's only selected one; after every action, Chromium's focus is the rule's."""
    env = BrowserEnv(pool, sites=[miniwob])
    typed = selected = focused = 0
    for name in DEMONSTRATORS:
        for seed in (0, 1):
            steps, _ = await run_episode(env, MiniWobDemonstrator(), miniwob.task(name), seed=seed, max_steps=10)
            for step in steps:
                before, after = step.observation.state, step.next_observation.state
                # a page the episode ended on is never acted on; where the element acted on left the page, a
                # script may have put the focus anywhere (click-dialog's Close hands it back), and the rule says none
                left = step.action.args and parse_state(after).find(step.action.args[0]) is None
                if not step.terminated and not left:
                    rule = focus_after(step.observation.focused_id, after, step.action)
                    assert rule == step.next_observation.focused_id, (name, seed, str(step.action))
                    focused += bool(rule)
                if step.action.name == "type":
                    typed += 1
                    assert typed_text_page(before, after, step.action.args) is None, (name, seed, str(step.action))
                elif step.action.name == "select":
                    selected += 1
                    assert selected_option_page(before, after, step.action.args) is None, (name, seed, after)
                    # not by default: the rule would have chosen the same option on the page before the action
                    assert selected_option_page(before, before, step.action.args) in (None, after), (name, seed)
    await env.aclose()
    assert typed >= 10 and selected >= 2 and focused >= 20


async def test_real_pages_agree_with_the_check_rule_after_every_click_on_a_checkbox_or_radio(
    pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    """After every click on a checkbox or a radio button, of the demonstrators and of a random explorer (which
    ticks and unticks boxes in any order), the real page is what the check rule writes from the page before."""
    env = BrowserEnv(pool, sites=[miniwob])
    checked = unticked = 0
    for name in ("click-checkboxes", "click-option", "click-checkboxes-large"):
        for seed in range(3):
            demonstrated = (MiniWobDemonstrator(),) if name in DEMONSTRATORS else ()
            for chooser in (*demonstrated, RandomExplorer(seed)):
                steps, _ = await run_episode(env, chooser, miniwob.task(name), seed=seed, max_steps=8)
                for step in steps:
                    before, after = step.observation.state, step.next_observation.state
                    if step.action.name != "click" or not _check_control(before, step.action.args[0]):
                        continue
                    checked += 1
                    unticked += "checked" in parse_state(before).find(step.action.args[0]).props  # type: ignore[union-attr]
                    assert checked_page(before, after, step.action.args) is None, (name, seed, after)
                    # from the page before the click, the rule writes the page after it (None: that page is it)
                    assert (checked_page(before, before, step.action.args) or before) == after, (name, seed, after)
    await env.aclose()
    assert checked >= 15
    assert unticked >= 1


def _check_control(page: str, element_id: str) -> bool:
    element = parse_state(page).find(element_id)
    return element is not None and element.role in CHECK_ROLES


def test_a_mistaken_goal_changes_one_quoted_text_or_one_named_choice() -> None:
    import random

    login = 'Enter the username "lyda" and the password "Tb3" into the text fields and press login.'
    changed = mistaken_goal(login, parse_state('[e1] textbox "Username"'), random.Random(0))
    assert changed != login
    assert len(changed) == len(login)
    boxes = parse_state('[e1] checkbox "ab"\n[e2] checkbox "cd"\n[e3] checkbox "ef"\n[e4] button "Submit"')
    picked = mistaken_goal("Select ab, cd and click Submit", boxes, random.Random(1))
    assert picked in ("Select ef, cd and click Submit", "Select ab, ef and click Submit")
    assert mistaken_goal("Click the button", parse_state('[e1] button "Go"'), random.Random(0)) == "Click the button"


DETERMINISTIC = [n for n in text_tasks(deterministic_only=True) if not n.startswith("flight.")][:40:2]


async def test_the_same_task_and_seed_give_byte_identical_observations(pool: BrowserPool, miniwob: MiniWobSite) -> None:
    assert len(DETERMINISTIC) >= 15
    isolated = MiniWobSite(reuse_pages=False)  # a fresh context every episode (its own server, so its own port)
    env, fresh = BrowserEnv(pool, sites=[miniwob]), BrowserEnv(pool, sites=[isolated])
    differing = 0
    for name in DETERMINISTIC:
        task = miniwob.task(name)
        first = await env.reset(task, seed=7)
        again = await env.reset(task, seed=7)  # the same page, reset in place
        elsewhere = await fresh.reset(isolated.task(name), seed=7)  # another context, from scratch
        assert first == again, name
        # From scratch in another context (and origin): the same page and goal.
        diff = "\n".join(difflib.unified_diff(first.state.splitlines(), elsewhere.state.splitlines(), lineterm=""))
        assert (elsewhere.state, elsewhere.goal) == (first.state, first.goal), f"{name}\n{diff}"
        assert first.goal, name
        other = await env.reset(task, seed=8)
        differing += (other.state, other.goal) != (first.state, first.goal)
    # Some pages do not depend on the seed at all (click-test has one button, focus-text one box).
    assert differing >= len(DETERMINISTIC) // 2
    await env.aclose()
    await fresh.aclose()
    isolated.close()


async def test_a_page_reset_in_place_starts_as_a_fresh_one_whatever_the_last_episode_focused(
    pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    fresh_site = MiniWobSite(port=0, reuse_pages=False)
    env, fresh = BrowserEnv(pool, sites=[miniwob]), BrowserEnv(pool, sites=[fresh_site])
    try:
        for name in ("enter-password", "login-user"):  # their inputs stay on the page between episodes
            task = miniwob.task(name)
            first = await env.reset(task, seed=4)
            await env.step(parse_action("click [e3]"))  # the last episode leaves a box focused
            again = await env.reset(task, seed=4)
            assert again == first, name  # focused_id included
            assert (await fresh.reset(fresh_site.task(name), seed=4)).focused_id == first.focused_id, name
    finally:
        await env.aclose()
        await fresh.aclose()
        fresh_site.close()


async def test_a_site_serves_on_its_fixed_port_so_two_runs_observe_the_same_url(
    pool: BrowserPool, caplog: pytest.LogCaptureFixture
) -> None:
    assert MiniWobSite().port == PORT  # the default: one port for every run
    with socket.socket() as probe:  # a port free now, for this test alone (the session's site may hold PORT)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    observed = []
    for _ in range(2):  # two runs, one after the other, each with its own site
        site = MiniWobSite(port=port)
        env = BrowserEnv(pool, sites=[site])
        observed.append(await env.reset(site.task("click-checkboxes"), seed=3))
        await env.aclose()
        site.close()
    assert observed[0] == observed[1]  # the URL included
    assert observed[0].url == f"http://127.0.0.1:{port}/miniwob/click-checkboxes.html"

    # While one site holds the port, another still serves, on a free port, and says so.
    holder, other = MiniWobSite(port=port), MiniWobSite(port=port)
    try:
        with caplog.at_level(logging.INFO, logger="dreamgym.bridge.miniwob"):
            assert holder.base_url == f"http://127.0.0.1:{port}/" != other.base_url
        assert f"MiniWoB++ port {port} is not free" in caplog.text
        env = BrowserEnv(pool, sites=[other])
        assert (await env.reset(other.task("click-checkboxes"), seed=3)).state == observed[0].state
        await env.aclose()
    finally:
        holder.close()
        other.close()
    with pytest.raises(ConfigError, match="port"):
        MiniWobSite(port=70000)


async def test_miniwob_passes_check_environment(pool: BrowserPool, miniwob: MiniWobSite) -> None:
    await check_environment(BrowserEnv(pool, sites=[miniwob]), miniwob.task("click-checkboxes"), seed=3)


async def test_the_step_limit_ends_a_miniwob_episode_the_page_would_not(
    pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    env = BrowserEnv(pool, sites=[miniwob])
    await env.reset(miniwob.task("enter-text", max_steps=3), seed=0)
    results = [await env.step(parse_action("scroll [down]")) for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].truncation_reason == "step_limit" and results[-1].reward == 0.0
    await env.aclose()


async def test_killing_one_of_two_browsers_ends_only_its_episode(miniwob: MiniWobSite) -> None:
    async with BrowserPool(BrowserConfig(processes=2, max_contexts=4)) as pool:
        first, second = BrowserEnv(pool, sites=[miniwob]), BrowserEnv(pool, sites=[miniwob])
        task = miniwob.task("click-checkboxes")
        await first.reset(task, seed=1)
        await second.reset(task, seed=2)
        browsers = {first._episode.lease.browser_index, second._episode.lease.browser_index}  # type: ignore[union-attr]
        assert browsers == {0, 1}  # the pool spread the episodes over both processes
        victim = first._episode.lease.browser_index  # type: ignore[union-attr]
        pid = (await pool.pids())[victim]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(30):
            cut = await first.step(parse_action("scroll [down]"))
        assert cut.truncated and cut.truncation_reason == "browser_crashed"
        ongoing = await second.step(parse_action("scroll [down]"))  # the other browser's episode goes on
        assert not ongoing.truncated and ongoing.observation.last_action_error == ""
        launches = pool.launches
        restarted = await first.reset(task, seed=1)  # the pool relaunches the dead browser
        assert restarted.goal and pool.launches == launches + 1
        await first.aclose()
        await second.aclose()


@pytest.mark.slow
async def test_every_text_solvable_task_starts_and_takes_a_valid_action(
    pool: BrowserPool, miniwob: MiniWobSite
) -> None:
    env = BrowserEnv(pool, sites=[miniwob])
    for name in text_tasks():
        observation = await env.reset(miniwob.task(name), seed=0)
        assert observation.goal, name
        candidates = candidate_actions(parse_state(observation.state), observation.goal)
        result = await env.step(candidates[0])
        assert isinstance(result.observation, Observation), name
    await env.aclose()


async def test_browsers_are_recycled_after_serving_their_contexts(miniwob: MiniWobSite) -> None:
    async with BrowserPool(BrowserConfig(processes=1, recycle_every=2)) as pool:
        for _ in range(5):
            async with pool.context() as lease:
                page = await lease.context.new_page()
                await page.goto(miniwob.base_url + "miniwob/click-test.html")
        assert pool.launches == 3  # contexts 1-2, 3-4, then 5 on a fresh process
    assert pool.launches == 3
