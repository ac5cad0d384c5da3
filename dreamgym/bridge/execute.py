"""Carrying out ``core``'s actions on a live page.

Every failure an agent can cause (an unknown id, an element that cannot be
clicked, an option that is not there, a URL outside the allowed origins)
comes back as the text of ``last_action_error``. Only a page or browser that
is gone raises :class:`PageGone`, which ends the episode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dreamgym.bridge.allowlist import Allowlist
from dreamgym.bridge.capture import RefMap
from dreamgym.core.actions import missing_element_error
from dreamgym.core.types import Action

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Locator, Page

__all__ = ["PageGone", "Tabs", "execute_action"]


class PageGone(Exception):
    """The page or its browser is gone (crashed, killed, closed)."""


@dataclass
class Tabs:
    """The episode's open pages and which one the agent acts on."""

    context: BrowserContext
    pages: list[Page] = field(default_factory=list)
    active: int = 0

    @property
    def page(self) -> Page:
        return self.pages[self.active]

    def sync(self) -> None:
        """Pick up tabs the page opened itself (pop-ups) and forget closed ones."""
        current = self.page if self.pages else None
        open_pages = [p for p in self.context.pages if not p.is_closed()]
        if not open_pages and current is not None:
            return  # every tab closed: keep the closed one, so the episode sees its page is gone
        self.pages = open_pages
        if current is not None and current in self.pages:
            self.active = self.pages.index(current)
        else:
            self.active = max(0, len(self.pages) - 1)


async def execute_action(action: Action, tabs: Tabs, refs: RefMap, *, timeout_ms: float, allowed: Allowlist) -> str:
    """Carry out ``action``; returns ``""`` or why it could not be done.

    ``stop`` does nothing here (the environment ends the episode).

    Raises:
        PageGone: The page or the browser died while acting.
    """
    from playwright.async_api import Error as PlaywrightError

    if action.is_invalid:
        return action.error or f"not an action: {action.raw!r}"
    try:
        return await _ACTIONS[action.name](action, tabs, refs, timeout_ms, allowed)
    except PlaywrightError as exc:
        if tabs.page.is_closed() or not tabs.context.browser or not tabs.context.browser.is_connected():
            raise PageGone(str(exc).splitlines()[0]) from exc
        return f"{action} failed: {_first_line(exc)}"


def _first_line(exc: Exception) -> str:
    """Playwright's first line, and its reason where its log names one (the element that intercepts
    pointer events, say), which the first line alone ("Timeout 5000ms exceeded") leaves out."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not text:
        return type(exc).__name__
    reasons = [line.lstrip("- ") for line in text[1:] if "intercepts pointer events" in line or "not " in line]
    return text[0] + (f" ({reasons[-1]})" if reasons else "")


async def _on_element(action: Action, tabs: Tabs, refs: RefMap, act: Callable[[Locator], Awaitable[object]]) -> str:
    """Run ``act`` on the element ``action.args[0]`` names, or say why there is none."""
    element = action.args[0]
    ref = refs.ref(element)
    if ref is None:
        return missing_element_error(element)
    await act(tabs.page.locator(f"aria-ref={ref}"))
    return ""


_AIM = """(element) => {
    const before = element.getBoundingClientRect();
    const visible = before.top >= 0 && before.left >= 0 && before.bottom <= window.innerHeight
        && before.right <= window.innerWidth;
    if (!visible) element.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
    const box = element.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) return null;
    const x = box.left + box.width / 2, y = box.top + box.height / 2;
    const hit = element.ownerDocument.elementFromPoint(x, y);
    const ours = hit && (hit === element || element.contains(hit) || hit.contains(element)
        || (element.labels && Array.from(element.labels).some((label) => label.contains(hit))));
    if (!ours) {
        if (!hit) return null;
        const role = hit.getAttribute('role') || hit.tagName.toLowerCase();
        const name = (hit.getAttribute('aria-label') || hit.innerText || hit.value || '').trim().split('\\n')[0];
        return name ? `${role} "${name.slice(0, 60)}"` : role;
    }
    const direct = window.top === window && element.tagName !== 'OPTION' && !element.disabled
        && !element.closest('[disabled], [aria-disabled="true"]');
    return direct ? [x, y] : null;
}"""
"""Where a click on the element would land, in one call: scroll it into view first (at once: Playwright's own
scroll waits two animation frames for the element to be stable, and its click waits again), then look at what its
centre hits. A string names another element that covers it there; ``[x, y]`` is a point in the page, its own, to
click with the mouse straight away; null leaves the click to Playwright (an element in a frame, a disabled one it
should wait for, an option, one with no box), which waits and says why when it cannot."""


async def _click(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    async def click(target: Locator) -> None:
        handle = await target.element_handle(timeout=timeout)  # found once: each locator call finds it again
        try:
            aim = await handle.evaluate(_AIM)
            if isinstance(aim, str):  # a click at its centre would land on another element: fail now, naming it
                raise _Covered(f"the element is covered by {aim} at its centre; act on that, or uncover it first")
            if aim is None:
                await handle.click(timeout=timeout)
            else:
                await tabs.page.mouse.click(aim[0], aim[1])
        finally:
            await handle.dispose()

    try:
        return await _on_element(action, tabs, refs, click)
    except _Covered as exc:
        return f"{action} failed: {exc}"


class _Covered(Exception):
    """A click's target is under another element."""


async def _hover(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    return await _on_element(action, tabs, refs, lambda target: target.hover(timeout=timeout))


_TYPE = """(element, text) => {
    const field = element.tagName === 'TEXTAREA' || element.tagName === 'INPUT';
    if (element.closest('.CodeMirror, .cm-editor, .monaco-editor, .ace_editor, [data-editor]')) return 'editor';
    const box = element.getBoundingClientRect();
    if (field && (box.width < 4 || box.height < 4)) return 'editor';  // a hidden input a widget reads keys from
    const plain = ['', 'text', 'search', 'email', 'url', 'tel', 'password'];
    if (field ? element.tagName === 'INPUT' && !plain.includes(element.type) : !element.isContentEditable) {
        return 'fill';  // dates, numbers, colours...: Playwright's fill knows them; or no field: it says why
    }
    if (element.disabled || element.readOnly || box.width === 0 || box.height === 0) return 'fill';  // it waits
    element.focus();
    if (field) {
        element.select();
    } else {
        const range = document.createRange();
        range.selectNodeContents(element);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
    }
    document.execCommand(text ? 'insertText' : 'delete', false, text);
    const now = field ? element.value : element.innerText.trim();
    return now === (field ? text : text.trim()) ? '' : 'fill';
}"""
"""Type into a plain field in one call (select its content, insert the text as typing does: input events
included), or say how else: ``'editor'`` for (part of) a code-editor widget, which keeps its own document and
reads keys from a hidden input (``fill`` there appends to it, or waits for the input to show); ``'fill'`` for
what Playwright's ``fill`` handles best (dates, numbers, a field not yet editable, which it waits for)."""


async def _type(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    """Replace the element's content with the text: plain fields (inputs, textareas, contenteditable) in one
    call; code editors by focus, select-all and inserted text, as a person would; the rest by ``fill``."""
    text, enter = action.args[1], action.args[2] == "1"
    keyboard = tabs.page.keyboard

    async def fill(target: Locator) -> None:
        how = await target.evaluate(_TYPE, text, timeout=timeout)
        if how == "editor":
            await target.focus(timeout=timeout)
            await keyboard.press("ControlOrMeta+A")
            await (keyboard.insert_text(text) if text else keyboard.press("Delete"))
        elif how == "fill":
            await target.fill(text, timeout=timeout)
        if enter:
            await keyboard.press("Enter")  # the field has the focus either way

    return await _on_element(action, tabs, refs, fill)


async def _select(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    from playwright.async_api import Error as PlaywrightError

    async def choose(target: Locator) -> None:
        try:
            await target.select_option(label=action.args[1], timeout=timeout)
        except PlaywrightError:
            await target.select_option(value=action.args[1], timeout=timeout)  # the option's value, as a fallback

    return await _on_element(action, tabs, refs, choose)


async def _press(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    await tabs.page.keyboard.press(action.args[0])
    return ""


async def _scroll(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    size = tabs.page.viewport_size or {"height": 720}
    delta = size["height"] * 0.8 * (1 if action.args[0] == "down" else -1)
    await tabs.page.mouse.wheel(0, delta)
    return ""


async def _goto(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    url = action.args[0]
    if not allowed.allows(url):
        return f"goto [{url}] is outside the task's allowed sites"
    await tabs.page.goto(url, timeout=timeout, wait_until="domcontentloaded")
    return ""


async def _go_back(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    if await tabs.page.go_back(timeout=timeout, wait_until="domcontentloaded") is None:
        return "there is no previous page in this tab"
    return ""


async def _go_forward(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    if await tabs.page.go_forward(timeout=timeout, wait_until="domcontentloaded") is None:
        return "there is no next page in this tab"
    return ""


async def _new_tab(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    page = await tabs.context.new_page()
    tabs.sync()
    tabs.active = tabs.pages.index(page)
    return ""


async def _tab_focus(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    index = int(action.args[0])
    if not 0 <= index < len(tabs.pages):
        return f"there is no tab {index}; tabs are numbered 0 to {len(tabs.pages) - 1}"
    tabs.active = index
    await tabs.page.bring_to_front()
    return ""


async def _close_tab(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    if len(tabs.pages) == 1:
        return "cannot close the last tab"
    closing = tabs.page
    await closing.close()
    tabs.sync()
    await tabs.page.bring_to_front()
    return ""


async def _stop(action: Action, tabs: Tabs, refs: RefMap, timeout: float, allowed: Allowlist) -> str:
    return ""


_ACTIONS = {
    "click": _click,
    "hover": _hover,
    "type": _type,
    "select": _select,
    "press": _press,
    "scroll": _scroll,
    "goto": _goto,
    "go_back": _go_back,
    "go_forward": _go_forward,
    "new_tab": _new_tab,
    "tab_focus": _tab_focus,
    "close_tab": _close_tab,
    "stop": _stop,
}
