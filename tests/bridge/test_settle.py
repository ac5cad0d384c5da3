"""Live pages that build themselves after DOMContentLoaded are captured once they settle: the same task, seed and
actions give byte-identical observations, and a page that never stops changing is captured at its deadline."""

from __future__ import annotations

import http.server
import json
import random
import threading
import time
from collections.abc import Iterator

import pytest

from dreamgym.bridge import BrowserEnv, BrowserPool, EnvConfig, generic_task
from dreamgym.core import parse_action

pytestmark = pytest.mark.anyio

LATE = """<!doctype html><title>Late rows</title>
<h1>Orders</h1><ul id="rows"></ul>
<script>
function load(kind) {
  fetch("/items?kind=" + kind).then((r) => r.json()).then((items) => {
    const list = document.getElementById("rows");
    list.replaceChildren();
    for (const item of items) {
      const row = document.createElement("li");
      const link = document.createElement("a");
      link.href = "#" + item; link.textContent = item;
      row.append(link);
      list.append(row);
    }
    const more = document.createElement("button");
    more.textContent = kind === "first" ? "Show more" : "Shown";
    more.onclick = () => load("more");
    list.append(more);
  });
}
load("first");
</script>"""

SLOW_BODY = """<!doctype html><title>Slow body</title><ul id="rows"></ul>
<script>
fetch("/items?kind=first&body=slow").then((r) => r.json()).then((items) => {
  for (const item of items) document.getElementById("rows").append(Object.assign(document.createElement("li"), {
    textContent: item }));
});
</script>"""

RESTLESS = """<!doctype html><title>Restless</title><p id="t">0</p>
<script>let n = 0; setInterval(() => { document.getElementById("t").textContent = String(++n); }, 5);
fetch("/hang");  // a long poll: a request always in flight</script>"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/hang"):
            time.sleep(5)
        if self.path.startswith("/items"):
            time.sleep(random.uniform(0.0, 0.4))  # a server that answers late, by a different amount each time
            count = 3 if "first" in self.path else 6
            body, kind = json.dumps([f"order {n}" for n in range(count)]).encode(), "application/json"
        else:
            pages = {"/late": LATE, "/slow-body": SLOW_BODY}
            body, kind = pages.get(self.path.split(".")[0], RESTLESS).encode(), "text/html"  # /hang too
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if "body=slow" in self.path:  # the headers now (fetch resolves), the body later
            self.wfile.flush()
            time.sleep(0.3)
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def late_site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_page_that_fetches_late_gives_the_same_observations_on_every_run(
    pool: BrowserPool, late_site: str
) -> None:
    task = generic_task("test/late", f"{late_site}/late.html", "Show every order")
    env = BrowserEnv(pool)
    runs: list[list[str]] = []
    for _ in range(10):
        first = await env.reset(task, seed=0)
        button = next(line for line in first.state.splitlines() if 'button "Show more"' in line)
        result = await env.step(parse_action(f"click [{button.split()[0].strip('[]')}]"))
        assert result.info["settled"] is True
        runs.append([first.state, result.observation.state])
    await env.aclose()
    assert "order 2" in runs[0][0]
    assert "order 5" in runs[0][1] and 'button "Shown"' in runs[0][1]
    assert all(run == runs[0] for run in runs)  # byte-identical, whatever the server's delay


async def test_a_page_is_captured_after_it_has_read_the_body_of_a_response_whose_headers_came_first(
    pool: BrowserPool, late_site: str
) -> None:
    env = BrowserEnv(pool)
    first = await env.reset(generic_task("test/slow-body", f"{late_site}/slow-body.html", "Read the rows"), seed=0)
    await env.aclose()
    assert "order 2" in first.state  # fetch resolved 0.3 s before the rows could be built


async def test_a_page_that_never_stops_changing_is_captured_at_its_settle_deadline(
    pool: BrowserPool, late_site: str
) -> None:
    env = BrowserEnv(pool, config=EnvConfig(settle_deadline_s=0.3))
    await env.reset(generic_task("test/restless", f"{late_site}/restless.html", "Watch"), seed=0)
    result = await env.step(parse_action("scroll [down]"))
    assert result.info["settled"] is False
    assert not result.truncated
    await env.aclose()
