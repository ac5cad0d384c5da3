"""``type`` replaces what any editable element holds: an input, a textarea, a contenteditable element, a real
code editor (CodeMirror 5, from the copy Playwright ships with its trace viewer: offline, found at run time;
CodeMirror 6, as Datasette bundles it), and a widget that keeps its own document and reads keys from a 1-pixel
input, as Monaco does (on it, Playwright's ``fill`` appends, or waits for the input to become visible)."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamgym.bridge import BrowserEnv, BrowserPool, generic_task
from dreamgym.core import Observation, parse_action

pytestmark = pytest.mark.anyio

PAGE = """<!doctype html><title>Editors</title><link rel="stylesheet" href="codemirror.css">
<h1>Editors</h1>
<label>Name <input id="name" value="old name"></label>
<label>Notes <textarea id="notes">old notes</textarea></label>
<div id="rich" contenteditable="true" role="textbox" aria-label="Rich">old rich text</div>
<div id="host"></div>
<div id="widget"><textarea aria-label="Query" style="width:1px;height:1px;opacity:0;border:0;padding:0"></textarea>
<pre id="doc">SELECT name FROM users;</pre></div>
<button id="run">Run</button>
<pre id="out"></pre>
<script type="module">
import CodeMirror from "./CODEMIRROR";
const editor = CodeMirror(document.getElementById("host"), { value: "SELECT * FROM orders;", lineNumbers: true });
// the widget: its document lives in JS; its input only carries keys and text on their way in
const input = document.querySelector("#widget textarea"), shown = document.getElementById("doc");
let doc = shown.textContent, all = false;
input.addEventListener("keydown", (event) => {
  if ((event.ctrlKey || event.metaKey) && event.code === "KeyA") { all = true; event.preventDefault(); }
  else if (event.key === "Delete" || event.key === "Backspace") { doc = all ? "" : doc.slice(0, -1); all = false; }
  shown.textContent = doc;
});
input.addEventListener("input", () => {
  doc = (all ? "" : doc) + input.value; all = false; input.value = ""; shown.textContent = doc;
});
document.getElementById("run").onclick = () => {
  document.getElementById("out").textContent = [
    document.getElementById("name").value, document.getElementById("notes").value,
    document.getElementById("rich").innerText, editor.getValue(), doc].join(" | ");
};
</script>"""


def _trace_viewer_codemirror() -> Path:
    import playwright

    assets = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "vite" / "traceViewer"
    found = sorted(assets.glob("assets/codeMirrorModule-*.js"))
    assert found, f"no CodeMirror in {assets}: Playwright's package layout changed"
    return found[0]


@pytest.fixture(scope="module")
def editors_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("editors")
    module = _trace_viewer_codemirror()
    shutil.copy(module, root / module.name)
    for imported in re.findall(r'from"\./([^"]+\.js)"', module.read_text()):  # its chunks, by the names it imports
        shutil.copy(module.parent / imported, root / imported)
    styles = sorted(module.parent.parent.glob("codeMirrorModule*.css"))
    if styles:
        shutil.copy(styles[0], root / "codemirror.css")
    (root / "index.html").write_text(PAGE.replace("CODEMIRROR", module.name))
    yield from _serve(root)


def _serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 until the generator is closed; yields its address."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def element(observation: Observation, pattern: str) -> str:
    line = next(line for line in observation.state.splitlines() if re.search(pattern, line))
    return line.split("]")[0].split("[")[-1]


async def test_type_replaces_the_content_of_every_kind_of_editable_element(
    pool: BrowserPool, editors_site: str
) -> None:
    env = BrowserEnv(pool)
    first = await env.reset(generic_task("test/editors", f"{editors_site}/index.html", "Fill every editor"), seed=0)
    assert "SELECT * FROM orders;" in first.state  # the code editor rendered its document
    textboxes = [line for line in first.state.splitlines() if "textbox" in line]
    assert len(textboxes) == 5, first.state
    ids = {
        "name": element(first, r'textbox "Name"'),
        "notes": element(first, r'textbox "Notes"'),
        "rich": element(first, r'textbox "Rich"'),
        "code": element(first, r"textbox(?! \")"),  # CodeMirror's input has no name
        "widget": element(first, r'textbox "Query"'),
    }
    for key, text in (
        ("name", "Ana"),
        ("notes", "two words"),
        ("rich", "bold move"),
        ("code", "SELECT 1;"),
        ("widget", "SELECT 2;"),
    ):
        result = await env.step(parse_action(f"type [{ids[key]}] [{text}] [0]"))
        assert result.observation.last_action_error == "", (key, result.observation.last_action_error)
    run = element(first, r'button "Run"')
    done = await env.step(parse_action(f"click [{run}]"))
    assert "Ana | two words | bold move | SELECT 1; | SELECT 2;" in done.observation.state
    await env.aclose()


CM6_PAGE = """<!doctype html><title>SQL</title>
<form onsubmit="return false">
<textarea id="sql-editor" name="sql">select name from customers order by name</textarea></form>
<button id="run">Run</button>
<pre id="out"></pre>
<script src="cm-editor-6.0.1.bundle.js"></script>
<script>
const editor = cm.editorFromTextArea(document.getElementById("sql-editor"), {});
document.getElementById("run").onclick = () => {
  document.getElementById("out").textContent = "ran: " + editor.state.doc.toString();
};
</script>"""
"""Datasette's SQL page, cut to its editor: CodeMirror 6 made from a textarea, as Datasette makes it."""


def _codemirror6_bundle() -> bytes:
    """CodeMirror 6 as Datasette 1.0a19 bundles it (``@codemirror/*`` 6.x in one script), read from the wheel
    that ``make setup`` downloads into ``.cache/fixtures``."""
    import zipfile

    wheels = sorted((Path(__file__).parents[2] / ".cache" / "fixtures").glob("datasette-1.0a19-*.whl"))
    assert wheels, "no datasette wheel in .cache/fixtures: run `make setup` (it downloads the test fixtures)"
    with zipfile.ZipFile(wheels[0]) as wheel:
        return wheel.read("datasette/static/cm-editor-6.0.1.bundle.js")


@pytest.fixture(scope="module")
def codemirror6_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("codemirror6")
    (root / "cm-editor-6.0.1.bundle.js").write_bytes(_codemirror6_bundle())
    (root / "index.html").write_text(CM6_PAGE)
    yield from _serve(root)


async def test_type_replaces_a_codemirror_6_documents_content_and_click_reaches_it(
    pool: BrowserPool, codemirror6_site: str
) -> None:
    env = BrowserEnv(pool)
    first = await env.reset(generic_task("test/sql", f"{codemirror6_site}/index.html", "Run a query"), seed=0)
    assert "select name from customers" in first.state, first.state  # the editor rendered its document
    code = element(first, r"textbox")
    clicked = await env.step(parse_action(f"click [{code}]"))
    assert clicked.observation.last_action_error == ""
    typed = await env.step(parse_action(f"type [{code}] [select count(*) from orders] [0]"))
    assert typed.observation.last_action_error == ""
    assert "customers" not in typed.observation.state, typed.observation.state
    again = await env.step(parse_action(f"type [{code}] [select 1] [0]"))  # replaces, a second time too
    assert again.observation.last_action_error == ""
    run = element(first, r'button "Run"')
    done = await env.step(parse_action(f"click [{run}]"))
    assert "ran: select 1" in done.observation.state, done.observation.state
    assert "orders" not in done.observation.state
    await env.aclose()
