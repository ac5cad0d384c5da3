"""Where a model named by the user lives: a local directory, or a Hugging Face id in the local cache (or the Hub).

Every place that loads a model (``LocalPolicy.load``, ``LocalBackend.load``,
a fine-tune's ``SimTrainConfig.base``, the demo's ``policy_model``) takes
either. A name that is a directory is that directory. Anything else that has
the shape of a Hub id (``org/name`` or ``name``) is looked up with
``huggingface_hub.snapshot_download``: from the local cache alone when
``HF_HUB_OFFLINE`` is set (as dreamgym's tests and quick start run), else
downloaded there first. The snapshot is an ordinary directory, so the rest
of dreamgym (weight digests, metadata, adapters' bases) only ever sees
directories.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dreamgym.core.errors import ConfigError

__all__ = ["is_hub_id", "resolve_model"]

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a Hugging Face model id (``org/name`` or ``name``)."""
    return bool(_HUB_ID.fullmatch(name)) and not name.endswith((".", "-")) and ".." not in name


def resolve_model(name: str | Path, *, what: str = "model") -> Path:
    """The directory of the model ``name``: a local directory, or a Hub id's snapshot (see the module).

    Raises:
        ConfigError: ``name`` is neither a directory nor an id found (offline: in the local cache; online: on
            the Hub), saying which and how to fix it.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    text = str(name)
    if path.exists() or not is_hub_id(text):
        raise ConfigError(f"{what} {text!r}: no model directory there, and not a Hugging Face model id")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        return Path(snapshot_download(text, repo_type="model", local_files_only=offline))
    except LocalEntryNotFoundError as exc:
        where = "the local Hugging Face cache (HF_HUB_OFFLINE is set)" if offline else "the cache or the Hub"
        raise ConfigError(
            f"{what} {text!r}: no local directory of that name, and no such model in {where}; "
            "give a model directory, or download the model once with network"
        ) from exc
    except (RepositoryNotFoundError, HfHubHTTPError) as exc:
        raise ConfigError(f"{what} {text!r}: the Hugging Face Hub has no such model you can read ({exc})") from exc
