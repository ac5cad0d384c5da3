"""Training under a launcher's several ranks is refused before anything opens: each rank would roll out
the same groups in its own browsers and write the one store."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import dreamgym

from dreamgym.core.errors import ConfigError
from dreamgym.trainer._config import check_one_process


def test_one_process_passes_and_several_ranks_are_refused_naming_the_rank() -> None:
    check_one_process({})
    check_one_process({"WORLD_SIZE": "1", "RANK": "0"})
    with pytest.raises(ConfigError, match=r"rank 1 of 2 .*without torchrun or accelerate launch"):
        check_one_process({"WORLD_SIZE": "2", "RANK": "1"})


def test_dreamgym_train_under_two_ranks_is_one_line_exit_2_and_opens_nothing(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "run"
    done = dreamgym(
        "train", "--tasks", "click-test", "--store", str(store), "--out", str(out), "--policy-model", str(tmp_path),
        check=False, env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "rank 0 of 2" in done.stderr
    assert not store.exists()
    assert not out.exists()
