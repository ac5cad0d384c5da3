"""Waiting for a live page to settle before it is captured: no request in flight, no DOM change for a while.

Live pages keep building themselves after ``DOMContentLoaded``: a script
fetches data and adds rows, a framework renders a second time. Captured too
early, the same task, seed and actions give different observations (an
element missing, ids shifted), which breaks groups, retrieval and replayed
actions. Every document of an episode's context gets :data:`SETTLE_SCRIPT`
before its own scripts run; it counts the page's ``fetch`` and
``XMLHttpRequest`` calls in flight (a fetch until the page has read its
body: ``fetch`` resolves with the headers, and on a busy machine the body
can come well after; a body that never ends, read whole, keeps it in
flight to the deadline, as a long poll does) and notes the time of the last
DOM mutation.
:func:`settle` then waits, inside the page, until nothing is in flight and
nothing has changed for ``quiet_ms``, or until ``deadline_ms``
(a page that never stops changing: the step's info says so).

A page that is already quiet costs one round trip: MiniWoB++'s pages change
inside the action itself, so their quiet window has mostly passed when the
action returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = ["SETTLE_SCRIPT", "settle"]

SETTLE_SCRIPT = """
(() => {
  if (window.__dreamgymSettle) return;
  const state = { inflight: 0, last: performance.now() };
  const watch = () => new MutationObserver(() => { state.last = performance.now(); })
    .observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  watch();
  const begin = () => {  // one more in flight; the function it returns ends it, once
    state.inflight++;
    let done = false;
    return () => { if (!done) { done = true; state.inflight--; state.last = performance.now(); } };
  };
  const track = (start) => {  // a promise in flight until it settles
    const end = begin();
    try {
      return start().then((value) => { end(); return value; }, (error) => { end(); throw error; });
    } catch (error) { end(); throw error; }
  };
  const fetch = window.fetch;
  if (fetch) window.fetch = function (...args) { return track(() => fetch.apply(this, args)); };
  // fetch resolves with the headers; the body comes later, and the page builds itself once it has read it
  for (const name of ["json", "text", "arrayBuffer", "blob", "formData"]) {
    const read = window.Response && Response.prototype[name];
    if (read) Response.prototype[name] = function (...args) { return track(() => read.apply(this, args)); };
  }
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    const end = begin();
    this.addEventListener("loadend", end, { once: true });
    try { return send.apply(this, args); } catch (error) { end(); throw error; }  // a send that throws never loads
  };
  window.__dreamgymSettle = (quietMs, deadlineMs) => new Promise((resolve) => {
    const start = performance.now();
    const tick = () => {
      const now = performance.now();
      if (state.inflight === 0 && now - state.last >= quietMs) return resolve(true);
      if (now - start >= deadlineMs) return resolve(false);
      setTimeout(tick, Math.max(1, Math.min(quietMs - (now - state.last), 10)));
    };
    tick();
  });
})();
"""
"""Installed with ``BrowserContext.add_init_script``: it runs in every document before the page's scripts."""

_WAIT = "([quiet, deadline]) => window.__dreamgymSettle ? window.__dreamgymSettle(quiet, deadline) : true"


async def settle(page: Page, *, quiet_ms: float, deadline_ms: float) -> bool:
    """Wait until ``page`` has no request in flight and no DOM change for ``quiet_ms``; ``False`` when
    ``deadline_ms`` came first. A navigation under way is waited for (to ``domcontentloaded``) once."""
    from playwright.async_api import Error as PlaywrightError

    for attempt in range(2):
        try:
            return bool(await page.evaluate(_WAIT, [quiet_ms, deadline_ms]))
        except PlaywrightError:  # the document went away under the call: a navigation
            if page.is_closed() or attempt:
                raise
            await page.wait_for_load_state("domcontentloaded", timeout=deadline_ms + 5000)
    return False
