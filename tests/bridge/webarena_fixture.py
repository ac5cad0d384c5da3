"""A tiny shop, forum and code host on 127.0.0.1, standing in for WebArena's sites in tests.

One handler serves every route; tests start it on three ports (SHOPPING, REDDIT,
GITLAB) so each "site" has its own origin. The shop has Magento-style REST
endpoints for WebArena's shopping_* helpers.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PRODUCTS = {
    "SKU1": ("Blue Running Shoes", "$12.00"),
    "SKU2": ("Red Rain Jacket", "$45.50"),
    "SKU3": ("Green Water Bottle", "$7.25"),
}
REVIEWS = {"SKU1": [("Ann", 3), ("Emma", 4)], "SKU2": [("Bob", 5)], "SKU3": []}
ORDERS = [("000000168", "2023-01-02", "SKU3"), ("000000170", "2023-03-04", "SKU2")]
MEMBERS = [("yjlou", "Developer"), ("koush", "Maintainer"), ("abisubramanya27", "Guest")]
TOKEN = "token-123"


def _page(title: str, body: str) -> str:
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str, content_type: str = "text/html") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value), "application/json")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/rest/V1/integration/admin/token" and body == {"username": "admin", "password": "admin1234"}:
            self._json(TOKEN)
        else:
            self._json({"message": "unauthorized"}, 401)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        if parts[:2] == ["rest", "V1"]:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._json({"message": "unauthorized"}, 401)
            elif parts[2:] == ["orders"]:
                newest = sorted(ORDERS, key=lambda o: o[1], reverse=True)
                self._json({"items": [{"increment_id": o[0], "created_at": o[1]} for o in newest]})
            elif len(parts) == 5 and parts[2] == "products" and parts[4] == "reviews":
                reviews = REVIEWS.get(parts[3], [])
                self._json([{"nickname": n, "ratings": [{"value": r}]} for n, r in reviews])
            else:
                self._json({"message": "no route"}, 404)
            return
        page = self._html(parts, urllib.parse.parse_qs(url.query))
        self._send(200 if page else 404, page or _page("Not found", "<h1>404</h1>"))

    def _html(self, parts: list[str], query: dict[str, list[str]]) -> str | None:
        cookie = self.headers.get("Cookie", "")
        links = "".join(f'<li><a href="/product/{sku}">{name}</a></li>' for sku, (name, _) in PRODUCTS.items())
        if not parts:
            search = (
                '<form action="/catalogsearch/result/"><input name="q" aria-label="Search"><button>Go</button></form>'
            )
            return _page("One Stop Market", f"<h1>One Stop Market</h1>{search}<ul>{links}</ul>")
        if parts[:2] == ["catalogsearch", "result"]:
            q = query.get("q", [""])[0].lower()
            found = "".join(f"<li>{name}</li>" for name, _ in PRODUCTS.values() if q in name.lower())
            return _page(f"Search results for: '{q}'", f"<h1>Results for {q}</h1><ul>{found}</ul>")
        if parts[0] == "product" and len(parts) == 2 and parts[1] in PRODUCTS:
            name, price = PRODUCTS[parts[1]]
            reviews = "".join(f"<li>{n}: {r} stars</li>" for n, r in REVIEWS[parts[1]])
            return _page(name, f'<h1>{name}</h1><span class="price">{price}</span><ul>{reviews}</ul>')
        if parts[:4] == ["sales", "order", "view", "order_id"] and len(parts) == 5:
            order = next((o for o in ORDERS if int(o[0]) == int(parts[4])), None)
            if order:
                item = PRODUCTS[order[2]][0]
                return _page(f"Order #{order[0]}", f'<h1>Order #{order[0]}</h1><p class="item">{item}</p>')
        if parts[:2] == ["customer", "account"]:
            text = "Welcome, Emma Lopez" if "session=ok" in cookie else "Please sign in"
            return _page("My Account", f"<h1>My Account</h1><p>{text}</p>")
        if parts[0] == "f" and len(parts) >= 3:
            title = f"Post {parts[2]} in {parts[1]}"
            comment = f"<p>Comment {parts[5]}</p>" if len(parts) >= 6 else ""
            return _page(title, f"<h1>{title}</h1>{comment}")
        if parts == ["project", "members"]:
            rows = "".join(
                f"<tr><td data-label='Account'><span class='gl-avatar-labeled-sublabel'>@{n}</span></td>"
                f"<td class='col-max-role'><span>{r}</span></td></tr>"
                for n, r in MEMBERS
            )
            return _page("Members", f"<h1>Project members</h1><table>{rows}</table>")
        return None


@contextmanager
def webarena_sites() -> Iterator[dict[str, str]]:
    """Start the three sites; yields the environment variables that point at them."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(3)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        names = ("SHOPPING", "REDDIT", "GITLAB")
        yield {name: f"http://127.0.0.1:{s.server_address[1]}" for name, s in zip(names, servers, strict=True)}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
