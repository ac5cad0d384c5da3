"""The offline model caches that setup builds are usable as plain transformers checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamgym.core import ConfigError
from dreamgym.offline import cache_dir, smollm2_checkpoint, smollm2_gguf


def test_the_cache_directory_is_configurable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DREAMGYM_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    with pytest.raises(ConfigError, match=r"`make setup` \(`make demo` does not\) or `python -m dreamgym.offline`"):
        smollm2_checkpoint()
    monkeypatch.delenv("DREAMGYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "dreamgym"


def test_the_packaged_gguf_is_found_without_importing_its_package() -> None:
    assert smollm2_gguf().stat().st_size > 50_000_000


def test_the_converted_smollm2_loads_offline_and_generates() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_checkpoint()  # built by the setup script; fails with how-to if missing
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert getattr(model.config, "quantization_config", None) is None
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say OK."}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        out = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == prompt["input_ids"].shape[1] + 3
