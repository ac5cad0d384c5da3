"""A page longer than the state's cap stays navigable: its tail (pagination, controls) is in the first state, and
scrolling down reaches the last row of a 500-row table."""

from __future__ import annotations

import pytest

from dreamgym.bridge import BrowserEnv, BrowserPool, EnvConfig, generic_task
from dreamgym.core import parse_action

pytestmark = pytest.mark.anyio


async def test_a_500_row_table_keeps_its_pagination_and_scrolling_reaches_its_last_row(
    pool: BrowserPool, site_url: str
) -> None:
    env = BrowserEnv(pool, config=EnvConfig(max_steps=100))
    first = await env.reset(generic_task("test/long", f"{site_url}/long.html", "Find the last order"), seed=0)
    assert len(first.state) <= EnvConfig().max_state_chars
    assert 'link "Next page"' in first.state and 'button "Export"' in first.state
    assert "Order 0" in first.state and "Order 499" not in first.state
    assert "scroll down" in first.cut_note
    seen, scrolls = first.state, 0
    while "Order 499" not in seen and scrolls < 60:
        result = await env.step(parse_action("scroll [down]"))
        seen, scrolls = result.observation.state, scrolls + 1
        assert 'link "Next page"' in seen  # every state keeps the page's tail
    assert "Order 499" in seen, f"not reached in {scrolls} scrolls"
    again = await env.reset(generic_task("test/long", f"{site_url}/long.html", "Find the last order"), seed=0)
    assert again.state == first.state  # deterministic
    await env.aclose()
