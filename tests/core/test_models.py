"""Models by local directory or by Hugging Face id, found offline in the local cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import dreamgym

from dreamgym.core import ConfigError
from dreamgym.core.models import is_hub_id, resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cached_as(hub: Path, repo_id: str, directory: Path) -> None:
    """Put ``directory`` in a Hugging Face cache at ``hub`` as the main revision of model ``repo_id``."""
    root = hub / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(directory, root / "snapshots" / COMMIT)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)


def test_a_directory_is_itself_and_a_hub_id_has_its_shape(tmp_path: Path) -> None:
    assert resolve_model(tmp_path) == tmp_path
    assert is_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct") and is_hub_id("gpt2")
    assert not is_hub_id("a/b/c") and not is_hub_id("../x") and not is_hub_id("org/")
    with pytest.raises(ConfigError, match="not a Hugging Face model id"):
        resolve_model(tmp_path / "no" / "such" / "dir")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="no model directory there"):
        resolve_model(tmp_path / "file")


def test_models_load_by_hugging_face_id_from_the_local_cache_offline(
    tmp_path: Path, tiny_models: tuple[Path, Path]
) -> None:
    """The policy and the experience model by id, offline, from a Hugging Face cache a user filled earlier; an id
    the cache lacks is one line that says so, and nothing is downloaded."""
    policy, sim = tiny_models
    hub = tmp_path / "hub"
    cached_as(hub, "dreamgym-test/tiny-policy", policy)
    cached_as(hub, "dreamgym-test/tiny-sim", sim)
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    script = """
from dreamgym.agents import LocalPolicy
from dreamgym.core import ChatMessage, Sampling
from dreamgym.simulator import LocalBackend
import anyio
policy = LocalPolicy.load("dreamgym-test/tiny-policy")
backend = LocalBackend.load("dreamgym-test/tiny-sim")
completion = anyio.run(backend.complete, [ChatMessage(role="user", content="hi")], Sampling(max_new_tokens=4))
print(policy.policy_id, backend.backend_id, len(completion.text) >= 0)
"""
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "dreamgym-test/tiny-policy" in done.stdout and "local:dreamgym-test/tiny-sim@" in done.stdout
    missing = dreamgym("sim", "eval", str(tmp_path), "--model", "dreamgym-test/absent", "--steps", str(tmp_path),
                       check=False, env={"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert missing.returncode != 0
    assert "no such model in the local Hugging Face cache (HF_HUB_OFFLINE is set)" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
