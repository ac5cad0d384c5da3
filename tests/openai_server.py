"""A real HTTP server on 127.0.0.1 that speaks the OpenAI API, for backend tests.

It serves ``POST /v1/embeddings`` with the hashing embedder's vectors, and
``POST /v1/chat/completions`` as a judge of WebArena's prompts: "correct" when
every word of the prompt's "reference answer:" line appears in its "student
answer:" line, else "incorrect" ("[same]"/"[different]" likewise for the
unachievable-reason prompt). Tests can make it fail the next N requests with a
status code, or return vectors of the wrong size, to exercise error handling.

For chat backends it can also answer from a script, answer every request
after a fixed latency, hang (until the server stops), send ``Retry-After``
with its injected errors, and count the requests in flight at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dreamgym.replay import HashingEmbedder


@dataclass
class ServerState:
    dim: int = 32
    fail_next: list[int] = field(default_factory=list)
    """Status codes to answer the next requests with, in order."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    chat_replies: list[str | None] = field(default_factory=list)
    """Scripted chat answers, used in order instead of grading; ``None`` sends a null content."""
    chat_reply: Callable[[dict[str, Any]], str] | None = None
    """Computes the chat answer from the request body (when ``chat_replies`` is empty)."""
    finish_reason: str = "stop"
    no_choices: bool = False
    """Answer chat requests with an empty ``choices`` list."""
    latency_s: float = 0.0
    """Seconds to wait before answering every request."""
    hang_next: int = 0
    """The next N requests are never answered (their handlers wait until the server stops)."""
    retry_after: str | None = None
    """A ``Retry-After`` header sent with the injected ``fail_next`` errors."""
    error_body: dict[str, Any] | None = None
    """The body of the injected ``fail_next`` errors (default: OpenAI's ``{"error": {...}}`` shape)."""
    in_flight: int = 0
    max_in_flight: int = 0
    """The most requests the server was working on at once."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)

    def take_hang(self) -> bool:
        """Whether this request is one of the ``hang_next`` (counting it down)."""
        with self.lock:
            if self.hang_next <= 0:
                return False
            self.hang_next -= 1
            return True

    def take_failure(self) -> int | None:
        """The next injected status code, or ``None``."""
        with self.lock:
            return self.fail_next.pop(0) if self.fail_next else None


def _grade(body: dict[str, Any]) -> str:
    """A judge by words: every word of the reference (or of the unachievable reason) in the answer.

    Reads WebArena's two judge prompts (``reference answer: ...`` / ``student
    answer: ...``; ``Reason_1 = ...`` / ``Report_1 = ...``) and answers in
    their verdict words.
    """
    prompt = body["messages"][-1]["content"]
    fields = {}
    for line in prompt.splitlines():
        for separator in (": ", " = "):
            if separator in line:
                key, value = line.split(separator, 1)
                fields.setdefault(key, value)
                break
    if "Reason_1" in fields:
        reason, report = fields["Reason_1"].lower().split(), fields.get("Report_1", "").lower()
        return "[same]" if reason and all(word in report for word in reason) else "[different]"
    reference = fields.get("reference answer", "").lower().split()
    answer = fields.get("student answer", "").lower()
    return "correct" if reference and all(word in answer for word in reference) else "incorrect"


def _chat_reply(state: ServerState, body: dict[str, Any]) -> dict[str, Any]:
    with state.lock:
        scripted = bool(state.chat_replies)
        content = state.chat_replies.pop(0) if scripted else None
    if not scripted:
        content = state.chat_reply(body) if state.chat_reply else _grade(body)
    message = {"role": "assistant", "content": content}
    choices = [] if state.no_choices else [{"index": 0, "message": message, "finish_reason": state.finish_reason}]
    return {
        "id": "chat-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": choices,
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _embeddings_reply(state: ServerState, body: dict[str, Any]) -> dict[str, Any]:
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    vectors = HashingEmbedder(max(state.dim, 8)).embed_sync(texts)[:, : state.dim]
    data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
    data.reverse()  # servers may answer out of order; the client must sort by index
    return {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}


def _handler(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do; every answer has a Content-Length
        disable_nagle_algorithm = True  # else headers and body, written apart, wait out a delayed ACK (40 ms)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append(body)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                answer = self._answer(body)
            finally:
                # Counted out before the answer is sent, so a client that sends its
                # next request on receiving this one never sees it still counted.
                with state.lock:
                    state.in_flight -= 1
            if answer is None:
                self.close_connection = True
            else:
                self._send(*answer)

        def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]] | None:
            if state.take_hang():
                state.stopping.wait()
                return None  # the client gave up long ago; close without an answer
            if state.latency_s and state.stopping.wait(state.latency_s):
                return None
            if (status := state.take_failure()) is not None:
                headers = {"Retry-After": state.retry_after} if state.retry_after is not None else {}
                body = state.error_body or {"error": {"message": f"injected {status}", "type": "server_error"}}
                return status, body, headers
            if self.path == "/v1/chat/completions":
                return 200, _chat_reply(state, body), {}
            if self.path == "/v1/embeddings":
                return 200, _embeddings_reply(state, body), {}
            return 404, {"error": {"message": f"no route {self.path}"}}, {}

    return Handler


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # a burst of concurrent clients must not overflow the listen backlog


@contextmanager
def openai_server(state: ServerState | None = None) -> Iterator[tuple[str, ServerState]]:
    """Run the server on a free port; yields its ``/v1`` base URL and its state."""
    state = state or ServerState()
    state.stopping.clear()
    server = _Server(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        state.stopping.set()  # wakes the hanging and waiting handlers, so they end with the server
        server.shutdown()
        server.server_close()
        thread.join()
