"""Shared fixtures: the anyio backend, a MiniWoB++ site and a browser pool, an OpenAI-compatible server,
tiny real models for MiniWoB++ jobs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from openai_server import ServerState, openai_server
from tiny_models import tiny_experience_model, tiny_policy

from dreamgym.bridge import BrowserConfig, BrowserPool, MiniWobSite


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Playwright is asyncio-only, so dreamgym runs on asyncio


@pytest.fixture(scope="session")
def miniwob() -> Iterator[MiniWobSite]:
    site = MiniWobSite()
    yield site
    site.close()


@pytest.fixture
async def pool() -> AsyncIterator[BrowserPool]:
    async with BrowserPool(BrowserConfig(processes=1, max_contexts=4)) as pool:
        yield pool


@pytest.fixture
def server() -> Iterator[tuple[str, ServerState]]:
    """The real local OpenAI-compatible server (tests/openai_server.py): its /v1 URL and its state."""
    with openai_server() as (url, state):
        yield url, state


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(policy directory, experience model directory): tiny, real, trained on click-button pages (seconds)."""
    root = tmp_path_factory.mktemp("tiny-models")
    return tiny_policy(root / "policy"), anyio.run(tiny_experience_model, root)
