"""A real OpenAI-compatible server that nobody here wrote: ``transformers serve``, on 127.0.0.1, offline.

It is the ``transformers`` the project already uses, with its ``serving``
extra (FastAPI, uvicorn; ``pip install -e '.[serving]'``, which the setup
script does). Started without a model on its command line, it loads each
model a request names (a local directory's path is its name) on first use,
so one server serves the experience model and the chat policy. It behaves
as users meet it: it samples only when a model's ``generation_config.json``
says ``"do_sample": true``, keeps stop strings in its answers and refuses
request fields it does not know (HTTP 422).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

START_TIMEOUT_S = 120.0
"""How long the server may take to answer ``/health`` (imports of torch and FastAPI on a loaded runner)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _command() -> list[str]:
    script = Path(sys.executable).with_name("transformers")
    if not script.exists():
        pytest.fail(f"no `transformers` command beside {sys.executable}: run `make setup` (the serving extra)")
    return [str(script), "serve"]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def transformers_serve(log: Path) -> Iterator[str]:
    """Run ``transformers serve`` on a free port of 127.0.0.1 on the CPU; yield its ``/v1`` URL.

    Its output goes to ``log`` (shown when it fails to start). It is stopped, and waited for, on exit.
    """
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        pytest.fail("transformers serve needs FastAPI and uvicorn: run `make setup` (pip install -e '.[serving]')")
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    argv = [*_command(), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "warning"]
    root = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _healthy(root):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"transformers serve did not start (exit {process.poll()}):\n{log.read_text()}")
                time.sleep(0.5)
            yield f"{root}/v1"
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
