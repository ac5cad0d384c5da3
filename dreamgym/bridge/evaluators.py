"""WebArena's evaluators, run once when an episode ends (evaluating at every step leaks the answer).

- ``string_match``: the agent's answer against ``reference_answers``:
  ``exact_match``, ``must_include`` (each item; an item may be ``a |OR| b``),
  ``fuzzy_match`` (an LLM judge on an OpenAI-compatible endpoint, asked
  with WebArena's own prompt and read by its verdict rule, so scores compare
  with published ones); a ``"N/A"`` reference (an unachievable task) takes
  the answer ``N/A`` as is, and otherwise asks the judge whether the
  answer's reason is the config's ``string_note`` (WebArena's ``ua_match``).
- ``url_match``: the final URL against ``reference_url`` (alternatives joined
  by ``|OR|``); ``GOLD in PRED``: some reference's host+path is contained in
  the final one's, and every query parameter named by any reference has one
  of its values (WebArena pools the alternatives' parameters; so do we, to
  keep scores comparable).
- ``program_html``: for each target, open its URL (``last`` = stay; a
  ``func:`` URL helper), read the ``locator`` (empty = the page's HTML; a
  ``document...`` JavaScript expression run in the page; a ``func:`` helper)
  and check ``required_contents`` (``exact_match`` or ``must_include``).

A task's score is the product of its evaluators' scores, as in WebArena.
Helpers named in ``func:`` calls come from :data:`HELPERS`; their arguments are
parsed as literals (``__page__`` and ``__last_url__`` stand for the page and
its URL), never evaluated as code. An unknown helper is a ``ConfigError``.
"""

from __future__ import annotations

import ast
import html
import json
import logging
import re
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dreamgym.core.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = ["HELPERS", "Judge", "SiteUrls", "evaluate_webarena", "helper"]

log = logging.getLogger(__name__)

Helper = Callable[..., Awaitable[str]]
HELPERS: dict[str, Helper] = {}
"""``func:`` helpers by name; register more with :func:`helper`."""


def helper(name: str) -> Callable[[Helper], Helper]:
    def register(function: Helper) -> Helper:
        HELPERS[name] = function
        return function

    return register


@dataclass(frozen=True, slots=True)
class SiteUrls:
    """Base URLs of the WebArena sites, from the environment variables WebArena uses."""

    urls: Mapping[str, str]
    """``SHOPPING`` → ``http://127.0.0.1:7770`` and so on."""
    admin_user: str = "admin"
    admin_password: str = "admin1234"

    def resolve(self, text: str) -> str:
        """Replace ``__SHOPPING__``-style placeholders with the site URLs."""

        def swap(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.urls:
                raise ConfigError(
                    f"the task refers to __{name}__, which no site URL fills: give --site {name.lower()}=URL "
                    f"(or set {name})"
                )
            return self.urls[name].rstrip("/")

        return re.sub(r"__([A-Z_]+?)__", swap, text)


_JUDGE_SYSTEM = "You are a helpful assistant"
# The two judge prompts are WebArena's (evaluation_harness/helper_functions.py, Apache-2.0), word for word:
# a different prompt or verdict rule would make scores that do not compare with published ones.
_FUZZY_PROMPT = (
    "Help a teacher to grade the answer of a student given a question. Keep in mind that the student may use "
    "different phrasing or wording to answer the question. The goal is to evaluate whether the answer is "
    "semantically equivalent to the reference answer.\n"
    "question: {question}\n"
    "reference answer: {reference}\n"
    "all the string 'N/A' that you see is a special sequence that means 'not achievable'\n"
    "student answer: {answer}\n"
    "Conclude the judgement by correct/incorrect/partially correct."
)
_UNACHIEVABLE_PROMPT = (
    "A task described in Task_1 cannot be completed for reason listed in Reason_1. A person tried to complete "
    "the task and failed, he reported his attempt in Report_1, check if Report_1 is refering to Reason_1, even "
    "implicitly. If match, return same, else, return different\n"
    "Task_1 = {question}\n"
    "Reason_1 = {reason}\n"
    "Report_1 = {answer}\n"
    "return [same] or [different]"
)


class Judge:
    """An LLM on an OpenAI-compatible endpoint that decides ``fuzzy_match`` and ``ua_match`` as WebArena does.

    The prompts, the sampling (temperature 0, top-p 1, up to 768 tokens) and
    the verdict rules are WebArena's; only the model is yours (WebArena's
    published scores used ``gpt-4-1106-preview``). A reply that holds no
    verdict (WebArena asserts) is a :class:`~dreamgym.core.BackendError`
    naming the reply, as is a server that fails after its retries.

    Args:
        model: The model name the server knows.
        base_url: The server's ``/v1`` URL.
        api_key: The key (local servers accept any).
        timeout: Seconds per request.
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str = "EMPTY", timeout: float = 60) -> None:
        from openai import AsyncOpenAI

        self.model = model
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=3)

    async def same_meaning(self, question: str, reference: str, answer: str) -> bool:
        """WebArena's ``fuzzy_match``: "partially correct" or "incorrect" anywhere in the reply fails,
        else "correct" passes."""
        reply = await self._ask(_FUZZY_PROMPT.format(question=question, reference=reference, answer=answer))
        if "partially correct" in reply or "incorrect" in reply:
            return False
        if "correct" in reply:
            return True
        raise BackendError(f"the fuzzy_match judge's reply holds no verdict (correct/incorrect): {reply[:200]!r}")

    async def same_reason(self, question: str, reason: str, answer: str) -> bool:
        """WebArena's ``ua_match``: "different" anywhere in the reply fails, else "same" passes."""
        reply = await self._ask(_UNACHIEVABLE_PROMPT.format(question=question, reason=reason, answer=answer))
        if "different" in reply:
            return False
        if "same" in reply:
            return True
        raise BackendError(f"the ua_match judge's reply holds no verdict (same/different): {reply[:200]!r}")

    async def _ask(self, prompt: str) -> str:
        """The judge's reply, lower-cased."""
        import openai

        messages: list[Any] = [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": prompt}]
        try:
            response = await self._client.chat.completions.create(
                model=self.model, messages=messages, temperature=0, top_p=1.0, max_tokens=768
            )
        except openai.OpenAIError as exc:
            raise BackendError(f"the WebArena judge at {self._client.base_url} failed: {exc}") from exc
        if not response.choices:
            raise BackendError(f"the WebArena judge at {self._client.base_url} answered no choices")
        return (response.choices[0].message.content or "").lower()

    async def aclose(self) -> None:
        await self._client.close()


def _clean(answer: str) -> str:
    answer = answer.strip()
    for quote in ("'", '"'):
        if len(answer) >= 2 and answer.startswith(quote) and answer.endswith(quote):
            answer = answer[1:-1]
    return answer.lower()


def exact_match(reference: str, prediction: str) -> float:
    return float(_clean(reference) == _clean(prediction))


def must_include(reference: str, prediction: str, *, whole_word: bool = False) -> float:
    """``reference`` appears in ``prediction``; a single-word reference alone may have to be a whole word."""
    ref, pred = _clean(reference), _clean(prediction)
    if whole_word and len(ref.split()) == 1:
        return float(ref in re.findall(r"\w+|[^\w\s]", pred))
    return float(ref in pred)


async def string_score(config: Mapping[str, Any], answer: str, judge: Judge | None) -> float:
    references = config["eval"].get("reference_answers") or {}
    if isinstance(references, list):  # the older example configs: a list meant as must_include
        references = {"must_include": references}
    score = 1.0
    for approach, value in references.items():
        if approach == "exact_match":
            score *= exact_match(str(value), answer)
        elif approach == "must_include":
            items = value if isinstance(value, list) else [value]
            for item in items:
                options = str(item).split(" |OR| ")
                score *= max(must_include(o, answer, whole_word=len(items) == 1) for o in options)
        elif approach == "fuzzy_match":
            score *= await _fuzzy(config, value, answer, judge)
        else:
            raise ConfigError(f"unknown string_match approach {approach!r}")
    return score


async def _fuzzy(config: Mapping[str, Any], value: Any, answer: str, judge: Judge | None) -> float:
    """WebArena's ``fuzzy_match`` on the cleaned answer: every reference judged the same in meaning; for
    ``"N/A"`` (an unachievable task) the answer ``N/A``, or a reason the judge finds is the ``string_note``."""
    pred = _clean(answer)
    if value == "N/A" and exact_match("N/A", pred):
        return 1.0
    if judge is None:
        raise ConfigError(
            "this task's fuzzy_match needs an LLM judge: give the WebArena site a Judge(model, base_url=...)"
        )
    question = str(config.get("intent", ""))
    if value == "N/A":
        reason = str(config["eval"].get("string_note") or "")
        return float(await judge.same_reason(question, reason, pred))
    for reference in value if isinstance(value, list) else [value]:
        if not await judge.same_meaning(question, str(reference), pred):
            return 0.0  # the product is 0 already: no need to ask about the rest
    return 1.0


def url_score(config: Mapping[str, Any], final_url: str, urls: SiteUrls) -> float:
    references = [urls.resolve(u).rstrip("/") for u in str(config["eval"]["reference_url"]).split(" |OR| ")]
    rule = config["eval"].get("url_note") or "GOLD in PRED"
    if rule != "GOLD in PRED":
        raise ConfigError(f"unknown url_note {rule!r}")
    pred = urllib.parse.urlsplit(final_url.rstrip("/"))
    pred_path = pred.netloc + pred.path
    pred_query = urllib.parse.parse_qs(pred.query)
    parsed = [urllib.parse.urlsplit(r) for r in references]
    base = float(any(p.netloc + p.path in pred_path for p in parsed))
    wanted: dict[str, set[str]] = {}
    for p in parsed:
        for key, values in urllib.parse.parse_qs(p.query).items():
            wanted.setdefault(key, set()).update(values)
    query = 1.0
    for key, options in wanted.items():
        query *= float(any(v in pred_query.get(key, []) for v in options))
    return base * query


async def html_score(config: Mapping[str, Any], page: Page, urls: SiteUrls) -> float:
    score = 1.0
    for target in config["eval"].get("program_html") or []:
        url = str(target.get("url", ""))
        if url.startswith("func:"):
            url = await call_helper(url, page, urls)
        url = urls.resolve(url)
        if url and url != "last":
            await page.goto(url, wait_until="load")
        selected = html.unescape(await _locate(target, page, urls))
        required = target.get("required_contents") or {}
        if "exact_match" in required:
            score *= exact_match(str(required["exact_match"]), selected)
        elif "must_include" in required:
            for content in required["must_include"]:
                score *= max(must_include(o, selected) for o in str(content).split(" |OR| "))
        elif required:
            raise ConfigError(f"unknown required_contents {sorted(required)}")
    return score


async def _locate(target: Mapping[str, Any], page: Page, urls: SiteUrls) -> str:
    from playwright.async_api import Error as PlaywrightError

    locator = str(target.get("locator", "")).strip()
    if not locator:
        return await page.content()
    if locator.startswith("func:"):
        return await call_helper(locator, page, urls)
    if locator.startswith(("document.", "[...document.")):
        try:
            for prep in target.get("prep_actions", []):
                await page.evaluate(f"() => {prep}")
            value = await page.evaluate(f"() => {locator}")
        except PlaywrightError:  # the element is not there: nothing matches
            return ""
        return "" if value is None else str(value)
    raise ConfigError(f"unknown locator kind: {locator[:60]!r}")


async def call_helper(call: str, page: Page, urls: SiteUrls) -> str:
    """Run a ``func:name(args)`` helper; arguments must be literals or ``__page__``/``__last_url__``.

    Raises:
        ConfigError: The call is malformed or names an unknown helper.
    """
    source = call.removeprefix("func:").strip()
    if page is not None:  # configs quote it: func:reddit_get_post_url('__last_url__')
        source = source.replace("'__last_url__'", repr(page.url)).replace('"__last_url__"', repr(page.url))
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        raise ConfigError(f"malformed helper call {source!r}") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        raise ConfigError(f"a helper call must be name(arg, ...): {source!r}")
    function = HELPERS.get(node.func.id)
    if function is None:
        raise ConfigError(f"unknown helper {node.func.id!r}; known: {sorted(HELPERS)}")
    args: list[Any] = []
    for arg in node.args:
        if isinstance(arg, ast.Name) and arg.id == "__page__":
            args.append(page)
        elif isinstance(arg, ast.Name) and arg.id == "__last_url__":
            args.append(page.url)
        elif isinstance(arg, ast.Constant):
            args.append(urls.resolve(arg.value) if isinstance(arg.value, str) else arg.value)
        else:
            raise ConfigError(f"helper arguments must be literals, __page__ or __last_url__: {source!r}")
    return str(await function(urls, *args))


async def evaluate_webarena(
    config: Mapping[str, Any], page: Page, answer: str, urls: SiteUrls, judge: Judge | None = None
) -> float:
    """The task's outcome reward: the product of its evaluators' scores (0.0 or 1.0)."""
    score = 1.0
    final_url = page.url
    for kind in config["eval"]["eval_types"]:
        if kind == "string_match":
            score *= await string_score(config, answer, judge)
        elif kind == "url_match":
            score *= url_score(config, final_url, urls)
        elif kind == "program_html":
            score *= await html_score(config, page, urls)
        else:
            raise ConfigError(f"unknown eval_type {kind!r}")
    return score


# --------------------------------------------------------------------------- helpers


async def _rest(urls: SiteUrls, path: str, params: Mapping[str, str] | None = None) -> Any:
    """GET the shopping site's Magento REST API with an admin token."""
    import anyio

    base = urls.resolve("__SHOPPING__")

    def call() -> Any:
        credentials = json.dumps({"username": urls.admin_user, "password": urls.admin_password}).encode()
        request = urllib.request.Request(
            f"{base}/rest/V1/integration/admin/token",
            data=credentials,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            token = json.loads(response.read())
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(f"{base}{path}{query}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    try:
        return await anyio.to_thread.run_sync(call)
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        raise BackendError(f"the shopping site's REST API at {base} failed: {exc}") from exc


@helper("shopping_get_latest_order_url")
async def shopping_get_latest_order_url(urls: SiteUrls) -> str:
    """The URL of the newest order's page."""
    params = {
        "searchCriteria[sortOrders][0][field]": "created_at",
        "searchCriteria[sortOrders][0][direction]": "DESC",
        "searchCriteria[pageSize]": "1",
    }
    items = (await _rest(urls, "/rest/V1/orders", params))["items"]
    return f"{urls.resolve('__SHOPPING__')}/sales/order/view/order_id/{int(items[0]['increment_id'])}/"


async def _latest_review(urls: SiteUrls, sku: str) -> dict[str, Any] | None:
    reviews = await _rest(urls, f"/rest/V1/products/{urllib.parse.quote(sku)}/reviews")
    return reviews[-1] if reviews else None


@helper("shopping_get_sku_latest_review_author")
async def shopping_get_sku_latest_review_author(urls: SiteUrls, sku: str) -> str:
    review = await _latest_review(urls, sku)
    return str(review["nickname"]) if review else ""


@helper("shopping_get_sku_latest_review_rating")
async def shopping_get_sku_latest_review_rating(urls: SiteUrls, sku: str) -> str:
    review = await _latest_review(urls, sku)
    return str(review["ratings"][0]["value"]) if review and review.get("ratings") else ""


@helper("reddit_get_post_url")
async def reddit_get_post_url(urls: SiteUrls, url: str) -> str:
    """A post's own URL (``/f/<forum>/<id>/``) from any URL under it, e.g. a comment's."""
    parts = urllib.parse.urlsplit(url)
    segments = parts.path.split("/")
    if len(segments) > 3 and segments[1] == "f" and segments[3].isdigit():
        return f"{parts.scheme}://{parts.netloc}/f/{segments[2]}/{segments[3]}/"
    return url


_MEMBER_ROLE = """(account) => {
    const names = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
    const index = names.findIndex((el) => el.innerText.trim() === '@' + account);
    const roles = document.querySelectorAll("td.col-max-role span");
    return index >= 0 && roles[index] ? roles[index].innerText.trim() : "";
}"""


@helper("gitlab_get_project_memeber_role")  # sic: WebArena's configs spell it so
async def gitlab_get_project_member_role(urls: SiteUrls, page: Page, account: str) -> str:
    """The role of ``account`` on a GitLab project members page."""
    return str(await page.evaluate(_MEMBER_ROLE, account))
