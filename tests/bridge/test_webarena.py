"""WebArena-format tasks on a local shop, forum and code host: every evaluator and helper."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import openai_server
from webarena_fixture import webarena_sites

from dreamgym.bridge import BrowserEnv, BrowserPool
from dreamgym.bridge.evaluators import Judge, SiteUrls, call_helper
from dreamgym.bridge.webarena import SITE_VARIABLES, WebArenaSite, load_webarena, site_urls_from_env
from dreamgym.core import BackendError, ConfigError, parse_action

pytestmark = pytest.mark.anyio

WEBARENA = Path(__file__).resolve().parents[3] / "shared" / "data" / "webarena"


@pytest.fixture(scope="module")
def sites() -> Iterator[dict[str, str]]:
    with webarena_sites() as urls:
        yield urls


def config(task_id: int, eval_: dict[str, Any], *, sites: tuple[str, ...] = ("shopping",),
           start: str = "__SHOPPING__", **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "task_id": task_id,
        "sites": list(sites),
        "intent": extra.pop("intent", "Answer the question"),
        "start_url": start,
        "require_login": False,
        "storage_state": None,
        "eval": eval_,
        **extra,
    }


def string_eval(**answers: Any) -> dict[str, Any]:
    return {"eval_types": ["string_match"], "reference_answers": answers, "reference_url": "", "program_html": []}


def html_eval(*targets: dict[str, Any], types: tuple[str, ...] = ("program_html",), url: str = "") -> dict[str, Any]:
    return {"eval_types": list(types), "reference_answers": None, "reference_url": url, "program_html": list(targets)}


async def run(pool: BrowserPool, site: WebArenaSite, cfg: dict[str, Any], actions: list[str], tmp_path: Path) -> float:
    """Load the config through the loader, act, and return the reward of the final step."""
    file = tmp_path / f"task-{cfg['task_id']}.json"
    file.write_text(json.dumps(cfg))
    (task,) = load_webarena(file)
    env = BrowserEnv(pool, sites=[site])
    await env.reset(task, seed=0)
    reward = 0.0
    for index, text in enumerate(actions):
        result = await env.step(parse_action(site.urls.resolve(text)))
        assert result.observation.last_action_error == "", result.observation.last_action_error
        if index < len(actions) - 1:
            assert result.reward == 0.0 and not result.terminated  # evaluated only when the agent stops
        reward = result.reward
    assert result.terminated
    await env.aclose()
    return reward


@pytest.fixture
def shop_site(sites: dict[str, str]) -> WebArenaSite:
    return WebArenaSite(site_urls_from_env(sites))


@pytest.mark.parametrize(
    ("answers", "answer", "expected"),
    [
        ({"exact_match": "Blue Running Shoes"}, "'blue running shoes'", 1.0),
        ({"exact_match": "Blue Running Shoes"}, "Blue Running Shoes, I think", 0.0),
        ({"must_include": ["12", "shoes |OR| sneakers"]}, "12 dollars for sneakers", 1.0),
        ({"must_include": ["2"]}, "It costs 12", 0.0),  # a lone one-word reference must be a whole word
        ({"must_include": ["shoes", "jacket"]}, "shoes only", 0.0),
    ],
)
async def test_string_match(pool: BrowserPool, shop_site: WebArenaSite, tmp_path: Path,
                            answers: dict[str, Any], answer: str, expected: float) -> None:  # fmt: skip
    reward = await run(pool, shop_site, config(1, string_eval(**answers)), [f"stop [{answer}]"], tmp_path)
    assert reward == expected


async def test_fuzzy_match_and_ua_match_ask_an_llm_judge_with_webarenas_prompts(
    pool: BrowserPool, sites: dict[str, str], tmp_path: Path
) -> None:
    with openai_server() as (url, state):
        judge = Judge("judge-model", base_url=url)
        site = WebArenaSite(site_urls_from_env(sites), judge=judge)
        cfg = config(2, string_eval(fuzzy_match=["driving: 2min", "walking: 16min"]), intent="How long to go?")
        assert await run(pool, site, cfg, ["stop [Walking: 16min, and driving: 2min.]"], tmp_path) == 1.0
        assert await run(pool, site, cfg, ["stop [about an hour]"], tmp_path) == 0.0
        asked = len(state.requests)
        na = config(3, string_eval(fuzzy_match="N/A"))
        na["eval"]["string_note"] = "the store sells no hats"
        assert await run(pool, site, na, ["stop [N/A]"], tmp_path) == 1.0
        assert len(state.requests) == asked  # an answer of N/A is taken as is
        assert await run(pool, site, na, ["stop [It sells no hats, the store.]"], tmp_path) == 1.0  # ua_match
        assert await run(pool, site, na, ["stop [The page did not load]"], tmp_path) == 0.0
        state.chat_replies = ["The answer is partially correct."]  # WebArena's rule: partially correct fails
        assert await run(pool, site, cfg, ["stop [Walking: 16min, and driving: 2min.]"], tmp_path) == 0.0
        state.chat_replies = ["I cannot tell."]
        with pytest.raises(BackendError, match="holds no verdict"):
            await run(pool, site, cfg, ["stop [Walking: 16min]"], tmp_path)
        await judge.aclose()
    fuzzy, unachievable = state.requests[0]["messages"], state.requests[asked]["messages"]
    assert fuzzy[0] == {"role": "system", "content": "You are a helpful assistant"}
    assert fuzzy[1]["content"].startswith("Help a teacher to grade the answer of a student given a question.")
    assert "question: How long to go?\nreference answer: driving: 2min\n" in fuzzy[1]["content"]
    assert "student answer: walking: 16min, and driving: 2min.\n" in fuzzy[1]["content"]  # cleaned: lower case
    assert "Reason_1 = the store sells no hats\nReport_1 = it sells no hats, the store." in unachievable[1]["content"]
    assert state.requests[0]["temperature"] == 0 and state.requests[0]["max_tokens"] == 768
    with pytest.raises(ConfigError, match="needs an LLM judge"):
        await run(pool, WebArenaSite(site_urls_from_env(sites)), cfg, ["stop [x]"], tmp_path)


async def test_url_match_with_query_parameters(pool: BrowserPool, shop_site: WebArenaSite, tmp_path: Path) -> None:
    def gold(reference: str) -> dict[str, Any]:
        return {"eval_types": ["url_match"], "reference_answers": None, "program_html": [],
                "reference_url": reference, "url_note": "GOLD in PRED"}  # fmt: skip

    search = config(4, gold("__SHOPPING__/catalogsearch/result/?q=shoes"))
    shoes = "goto [__SHOPPING__/catalogsearch/result/?q=shoes&page=1]"
    assert await run(pool, shop_site, search, [shoes, "stop []"], tmp_path) == 1.0
    hats = "goto [__SHOPPING__/catalogsearch/result/?q=hats]"
    assert await run(pool, shop_site, search, [hats, "stop []"], tmp_path) == 0.0
    either = config(5, gold("__SHOPPING__/product/SKU1 |OR| __SHOPPING__/product/SKU2"))
    assert await run(pool, shop_site, either, ["goto [__SHOPPING__/product/SKU2]", "stop []"], tmp_path) == 1.0
    assert await run(pool, shop_site, either, ["goto [__SHOPPING__/product/SKU3]", "stop []"], tmp_path) == 0.0


async def test_program_html_locators_and_required_contents(
    pool: BrowserPool, shop_site: WebArenaSite, tmp_path: Path
) -> None:
    whole_page = {"url": "last", "locator": "", "required_contents": {"must_include": ["Red Rain Jacket |OR| x"]}}
    price = {"url": "__SHOPPING__/product/SKU1", "locator": "document.querySelector('.price').outerText",
             "required_contents": {"exact_match": "$12.00"}}  # fmt: skip
    missing = {"url": "last", "locator": "document.querySelector('.nothing').outerText",
               "required_contents": {"must_include": ["anything"]}}  # fmt: skip
    cfg = config(5, html_eval(whole_page, price))
    assert await run(pool, shop_site, cfg, ["goto [__SHOPPING__/product/SKU2]", "stop []"], tmp_path) == 1.0
    assert await run(pool, shop_site, cfg, ["goto [__SHOPPING__/product/SKU3]", "stop []"], tmp_path) == 0.0
    assert await run(pool, shop_site, config(6, html_eval(missing)), ["stop []"], tmp_path) == 0.0


async def test_func_helpers_against_the_fixture_sites(
    pool: BrowserPool, shop_site: WebArenaSite, tmp_path: Path
) -> None:
    latest_order = {"url": "func:shopping_get_latest_order_url()",
                    "locator": "document.querySelector('.item').outerText",
                    "required_contents": {"exact_match": "Red Rain Jacket"}}  # fmt: skip
    author = {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('SKU1')",
              "required_contents": {"exact_match": "Emma"}}  # fmt: skip
    rating = {"url": "last", "locator": "func:shopping_get_sku_latest_review_rating('SKU1')",
              "required_contents": {"exact_match": "4"}}  # fmt: skip
    assert await run(pool, shop_site, config(7, html_eval(latest_order, author, rating)), ["stop []"], tmp_path) == 1.0

    post = {"url": "func:reddit_get_post_url('__last_url__')", "locator": "document.querySelector('h1').outerText",
            "required_contents": {"must_include": ["Post 42 in books"]}}  # fmt: skip
    forum = config(8, html_eval(post), sites=("reddit",), start="__REDDIT__")
    assert await run(pool, shop_site, forum, ["goto [__REDDIT__/f/books/42/a-title/comment/7]", "stop []"], tmp_path)

    role = {"url": "__GITLAB__/project/members",
            "locator": "func:gitlab_get_project_memeber_role(__page__, 'koush')",
            "required_contents": {"must_include": ["Maintainer"]}}  # fmt: skip
    assert await run(pool, shop_site, config(9, html_eval(role), sites=("gitlab",), start="__GITLAB__"), ["stop []"],
                     tmp_path) == 1.0  # fmt: skip


async def test_evaluators_combine_by_product(pool: BrowserPool, shop_site: WebArenaSite, tmp_path: Path) -> None:
    on_page = {"url": "last", "locator": "", "required_contents": {"must_include": ["Blue Running Shoes"]}}
    both = config(10, html_eval(on_page, types=("url_match", "program_html"), url="__SHOPPING__/product/SKU1"))
    assert await run(pool, shop_site, both, ["goto [__SHOPPING__/product/SKU1]", "stop []"], tmp_path) == 1.0
    assert await run(pool, shop_site, both, ["goto [__SHOPPING__/product/SKU2]", "stop []"], tmp_path) == 0.0
    answer_and_url = config(11, {"eval_types": ["string_match", "url_match"], "program_html": [],
                                 "reference_answers": {"must_include": ["12"]},
                                 "reference_url": "__SHOPPING__/product/SKU1"})  # fmt: skip
    assert await run(pool, shop_site, answer_and_url, ["goto [__SHOPPING__/product/SKU1]", "stop [$12]"], tmp_path)
    assert not await run(pool, shop_site, answer_and_url, ["stop [$12]"], tmp_path)  # right answer, wrong page


async def test_a_task_that_requires_login_starts_from_its_storage_state(
    pool: BrowserPool, sites: dict[str, str], tmp_path: Path
) -> None:
    auth = tmp_path / "auth"
    auth.mkdir()
    host = sites["SHOPPING"].split("//")[1].split(":")[0]
    cookie = {"name": "session", "value": "ok", "domain": host, "path": "/", "expires": -1,
              "httpOnly": False, "secure": False, "sameSite": "Lax"}  # fmt: skip
    (auth / "shopping_state.json").write_text(json.dumps({"cookies": [cookie], "origins": []}))
    welcome = {"url": "__SHOPPING__/customer/account/", "locator": "",
               "required_contents": {"must_include": ["Welcome, Emma Lopez"]}}  # fmt: skip
    cfg = config(12, html_eval(welcome), require_login=True, storage_state="./.auth/shopping_state.json")
    site = WebArenaSite(site_urls_from_env(sites), auth_dir=str(auth))
    assert await run(pool, site, cfg, ["stop []"], tmp_path) == 1.0
    without = WebArenaSite(site_urls_from_env(sites), auth_dir=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="needs the login state"):
        await run(pool, without, cfg, ["stop []"], tmp_path)


async def test_a_login_command_renews_a_missing_or_expired_login_state_and_only_then(
    pool: BrowserPool, sites: dict[str, str], tmp_path: Path
) -> None:
    auth, count = tmp_path / "auth", tmp_path / "logins"
    auth.mkdir()
    login = tmp_path / "login.py"  # logs in as a site's own script would: writes the state the site accepts
    login.write_text(
        "import json, os, time, urllib.parse\n"
        "host = urllib.parse.urlsplit(os.environ['SHOPPING']).hostname\n"
        "assert os.environ['DREAMGYM_LOGIN_SITES'] == 'shopping'\n"
        "cookie = {'name': 'session', 'value': 'ok', 'domain': host, 'path': '/', 'expires': time.time() + 3600,\n"
        "          'httpOnly': False, 'secure': False, 'sameSite': 'Lax'}\n"
        "open(os.environ['DREAMGYM_LOGIN_STATE'], 'w').write(json.dumps({'cookies': [cookie], 'origins': []}))\n"
        f"open({str(count)!r}, 'a').write('login\\n')\n"
    )
    host = sites["SHOPPING"].split("//")[1].split(":")[0]
    stale = {"name": "session", "value": "ok", "domain": host, "path": "/", "expires": time.time() - 10,
             "httpOnly": False, "secure": False, "sameSite": "Lax"}  # fmt: skip
    (auth / "shopping_state.json").write_text(json.dumps({"cookies": [stale], "origins": []}))
    welcome = {"url": "__SHOPPING__/customer/account/", "locator": "",
               "required_contents": {"must_include": ["Welcome, Emma Lopez"]}}  # fmt: skip
    cfg = config(13, html_eval(welcome), require_login=True, storage_state="./.auth/shopping_state.json")
    urls = site_urls_from_env(sites)
    with pytest.raises(ConfigError, match="holds an expired cookie: log in again"):
        await run(pool, WebArenaSite(urls, auth_dir=str(auth)), cfg, ["stop []"], tmp_path)
    site = WebArenaSite(urls, auth_dir=str(auth), login_command=f"{sys.executable} {login}")
    assert await run(pool, site, cfg, ["stop []"], tmp_path) == 1.0
    assert await run(pool, site, cfg, ["stop []"], tmp_path) == 1.0
    assert site.logins == 1 and count.read_text() == "login\n"  # the renewed state is fresh: no second login
    (auth / "shopping_state.json").unlink()
    broken = WebArenaSite(urls, auth_dir=str(auth), login_command="echo wrong password >&2; exit 1")
    with pytest.raises(BackendError, match="the login command exited with status 1 before task webarena/13: wrong"):
        await run(pool, broken, cfg, ["stop []"], tmp_path)
    idle = WebArenaSite(urls, auth_dir=str(auth), login_command="true")
    with pytest.raises(BackendError, match="left no fresh login state"):
        await run(pool, idle, cfg, ["stop []"], tmp_path)


async def test_helper_calls_are_parsed_never_run_as_code(pool: BrowserPool, sites: dict[str, str]) -> None:
    urls = site_urls_from_env(sites)
    page: Any = None
    with pytest.raises(ConfigError, match="unknown helper 'shopping_drop_tables'"):
        await call_helper("func:shopping_drop_tables()", page, urls)
    with pytest.raises(ConfigError, match="must be literals"):
        await call_helper("func:reddit_get_post_url(__import__('os').getcwd())", page, urls)
    with pytest.raises(ConfigError, match="malformed"):
        await call_helper("func:reddit_get_post_url(", page, urls)
    assert await call_helper("func:reddit_get_post_url('__REDDIT__/f/books/42/x/comment/9')", page, urls) == (
        f"{sites['REDDIT']}/f/books/42/"
    )


def test_all_812_webarena_configs_and_the_older_examples_load() -> None:
    if not WEBARENA.exists():
        pytest.skip("../shared/data/webarena is not beside this checkout")
    tasks = load_webarena(WEBARENA / "test.raw.json")
    assert len(tasks) == 812 and len({t.task_id for t in tasks}) == 812
    examples = [t for n in range(1, 5) for t in load_webarena(WEBARENA / f"example_{n}.json")]
    assert len(examples) == 4 and isinstance(json.loads(examples[0].config_json)["eval"]["reference_answers"], list)
    urls = SiteUrls({var: f"http://127.0.0.1:{7000 + i}" for i, var in enumerate(SITE_VARIABLES.values())})
    for task in tasks:  # every placeholder resolves once the variables are set
        config = json.loads(task.config_json)
        assert "__" not in urls.resolve(task.start_url)
        assert "__" not in urls.resolve(str(config["eval"].get("reference_url") or ""))
    with pytest.raises(
        ConfigError, match=r"__SHOPPING__, which no site URL fills: give --site shopping=URL \(or set SHOPPING\)"
    ):
        SiteUrls({}).resolve("__SHOPPING__/x")


def test_a_malformed_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"task_id": 1, "intent": "x"}))
    with pytest.raises(ConfigError, match="bad.json: config 1 lacks"):
        load_webarena(tmp_path / "bad.json")
