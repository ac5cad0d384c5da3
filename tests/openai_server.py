"""A real HTTP server on 127.0.0.1 that speaks the OpenAI API, for backend tests.

It serves ``POST /v1/embeddings`` with the hashing embedder's vectors, and
``POST /v1/chat/completions`` as a grader: it answers "correct" when every word
of the prompt's "Reference answer:" line appears in its "Answer to grade:"
line, else "incorrect". Tests can make it fail the next N requests with a
status code, or return vectors of the wrong size, to exercise error handling.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
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


def _chat_reply(body: dict[str, Any]) -> dict[str, Any]:
    prompt = body["messages"][-1]["content"]
    fields = dict(line.split(": ", 1) for line in prompt.splitlines() if ": " in line)
    reference = fields.get("Reference answer", "").lower().split()
    answer = fields.get("Answer to grade", "").lower()
    verdict = "correct" if reference and all(word in answer for word in reference) else "incorrect"
    return {
        "id": "chat-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": verdict}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _handler(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(body)
            if state.fail_next:
                status = state.fail_next.pop(0)
                self._send(status, {"error": {"message": f"injected {status}", "type": "server_error"}})
                return
            if self.path == "/v1/chat/completions":
                self._send(200, _chat_reply(body))
                return
            if self.path != "/v1/embeddings":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vectors = HashingEmbedder(max(state.dim, 8)).embed_sync(texts)[:, : state.dim]
            data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
            data.reverse()  # servers may answer out of order; the client must sort by index
            self._send(
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body["model"],
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                },
            )

    return Handler


@contextmanager
def openai_server(state: ServerState | None = None) -> Iterator[tuple[str, ServerState]]:
    """Run the server on a free port; yields its ``/v1`` base URL and its state."""
    state = state or ServerState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
