"""Every TrainConfig field is reachable from `dreamgym train`: as a flag (its docstring the help) or from --config."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
from helpers import dreamgym

from dreamgym.cli import _parser
from dreamgym.cli.train import train_config
from dreamgym.core.errors import UsageError
from dreamgym.trainer import TrainConfig

# field path -> (flag and value, the value TrainConfig then holds); none of them is the default
SET: dict[str, tuple[tuple[str, ...], Any]] = {
    "mode": (("--mode", "mixed"), "mixed"),
    "updates": (("--updates", "7"), 7),
    "output_dir": (("--out", "runs/x"), Path("runs/x")),
    "group_size": (("--group-size", "3"), 3),
    "groups_per_update": (("--groups-per-update", "5"), 5),
    "learning_rate": (("--lr", "0.002"), 0.002),
    "beta": (("--beta", "0.04"), 0.04),
    "loss_type": (("--loss-type", "dapo"), "dapo"),
    "micro_batch_size": (("--micro-batch-size", "5"), 5),
    "epsilon": (("--epsilon", "0.3"), 0.3),
    "max_grad_norm": (("--max-grad-norm", "0.5"), 0.5),
    "resample_flat": (("--resample-flat", "2"), 2),
    "step_cost": (("--step-cost", "0.05"), 0.05),
    "anchor_weight": (("--anchor-weight", "0.5"), 0.5),
    "anchor_batch": (("--anchor-batch", "8"), 8),
    "lora.r": (("--lora-r", "4"), 4),
    "lora.alpha": (("--lora-alpha", "6"), 6),
    "lora.dropout": (("--lora-dropout", "0.1"), 0.1),
    "lora.target_modules": (("--lora-target-modules", "q_proj,v_proj"), ("q_proj", "v_proj")),
    "real_share": (("--real-share", "0.5"), 0.5),
    "real_share_schedule": (("--real-share-schedule", "0:0.1,3:0.5"), ((0, 0.1), (3, 0.5))),
    "eval_every": (("--eval-every", "2"), 2),
    "eval_at_start": (("--no-eval-at-start",), False),
    "save_every": (("--save-every", "3"), 3),
    "sim_refit_every": (("--sim-refit-every", "4"), 4),
    "sim_trust": (("--sim-trust", "0.8"), 0.8),
    "sim_trust_window": (("--sim-trust-window", "16"), 16),
    "sim_trust_min_steps": (("--sim-trust-min-steps", "4"), 4),
    "curriculum.num_seed_tasks": (("--curriculum-num-seed-tasks", "2"), 2),
    "curriculum.variations_per_task": (("--curriculum-variations-per-task", "3"), 3),
    "curriculum.max_generated_share": (("--curriculum-max-generated-share", "0.25"), 0.25),
    "curriculum.min_value": (("--curriculum-min-value", "0.01"), 0.01),
    "curriculum.sampling.temperature": (("--curriculum-sampling-temperature", "0.3"), 0.3),
    "curriculum.sampling.top_p": (("--curriculum-sampling-top-p", "0.9"), 0.9),
    "curriculum.sampling.max_new_tokens": (("--curriculum-sampling-max-new-tokens", "64"), 64),
    "curriculum.sampling.seed": (("--curriculum-sampling-seed", "5"), 5),
    "curriculum.sampling.stop": (("--curriculum-sampling-stop", "END"), ("END",)),
    "curriculum.max_instruction_chars": (("--curriculum-max-instruction-chars", "99"), 99),
    "curriculum_every": (("--curriculum-every", "2"), 2),
    "seed": (("--seed", "9"), 9),
    "report_to": (("--report-to", ""), ()),
    "device": (("--device", "cpu"), "cpu"),
    "dtype": (("--dtype", "bfloat16"), "bfloat16"),
}
SIM2REAL = {"mode": (("--mode", "sim2real"), "sim2real"), "switch_at": (("--switch-at", "3"), 3)}


def field_paths(cls: type, prefix: str = "") -> list[str]:
    """Every settable field, nested settings by their dotted path."""
    hints = typing.get_type_hints(cls)
    paths = []
    for item in dataclasses.fields(cls):
        if item.metadata.get("flag") is False:  # set per call, not a setting (Sampling.copy_lines)
            continue
        inner = [a for a in typing.get_args(hints[item.name]) if a is not type(None)] or [hints[item.name]]
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            paths += field_paths(inner[0], f"{prefix}{item.name}.")  # type: ignore[arg-type]
        else:
            paths.append(prefix + item.name)
    return paths


def build(*argv: str) -> TrainConfig:
    args = _parser(["train"]).parse_args(["train", "--store", "s", *argv])
    config: TrainConfig = train_config(args)
    return config


def value(config: Any, path: str) -> Any:
    for name in path.split("."):
        config = getattr(config, name)
    return config


def test_every_field_has_a_flag_that_sets_it() -> None:
    assert sorted(field_paths(TrainConfig)) == sorted([*SET, "switch_at"])  # a new field needs its row here
    config = build("--curriculum", *(token for flag, _ in SET.values() for token in flag))
    for path, (_, expected) in SET.items():
        assert value(config, path) == expected, path
    config = build("--out", "runs/y", *(token for flag, _ in SIM2REAL.values() for token in flag))
    assert (config.mode, config.switch_at) == ("sim2real", 3)
    # defaults are TrainConfig's own, but for the updates the command must choose
    plain = build("--mode", "mixed", "--out", "runs/z")
    assert plain == TrainConfig(mode="mixed", updates=20, output_dir=Path("runs/z"))
    assert build("--mode", "mixed", "--out", "o", "--no-lora").lora is None
    assert build("--mode", "mixed", "--out", "o", "--lora-r", "0").lora is None
    assert build("--mode", "mixed", "--out", "o", "--lora-r", "8").lora == dataclasses.replace(
        TrainConfig(mode="mixed", updates=1, output_dir=Path("o")).lora, r=8, alpha=16
    )  # fmt: skip
    # a nested default keeps its own values where none is given (the curriculum samples at 0.8, not Sampling's 0)
    curriculum = build("--mode", "mixed", "--out", "o", "--curriculum-num-seed-tasks", "3").curriculum
    assert curriculum is not None and curriculum.sampling.temperature == 0.8 and curriculum.num_seed_tasks == 3


def test_a_config_file_sets_the_same_fields_and_flags_override_it(tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('mode = "mixed"\nupdates = 40\noutput_dir = "runs/f"\nreport_to = []\n'
                    "real_share_schedule = [[0, 0.1], [20, 0.5]]\n"
                    "[lora]\nr = 4\n[curriculum.sampling]\nseed = 3\n")  # fmt: skip
    config = build("--config", str(toml), "--updates", "50")
    assert (config.updates, config.output_dir, config.report_to) == (50, Path("runs/f"), ())
    assert config.real_share_schedule == ((0, 0.1), (20, 0.5))
    assert config.lora is not None and (config.lora.r, config.lora.alpha) == (4, 32)
    assert config.curriculum is not None and config.curriculum.sampling.seed == 3
    assert config.curriculum.sampling.temperature == 0.8
    for text, says in (
        ('mode = "mixed"\noutput_dir = "o"\nupdate = 3\n', "no setting 'update'"),
        ('mode = "mixed"\noutput_dir = "o"\nupdates = "many"\n', "'many' is not a valid value"),
        ('mode = "mixed"\noutput_dir = "o"\ngroup_size = 1\n', "group_size must be >= 2"),
        ('mode = "mixed"\noutput_dir = "o"\nmicro_batch_size = 3\n', "must divide the 8 episodes of an update"),
        ('mode = "mixed"\noutput_dir = "o"\ndevice = "tpu"\n', "device must be 'auto', 'cpu', 'cuda', 'cuda:N'"),
        ('mode = "mixed"\noutput_dir = "o"\ndtype = "float8"\n', "dtype must be one of 'auto', 'float32'"),
        ('output_dir = "o"\n', "give --mode"),
        ("mode = \n", "not valid TOML"),
    ):
        toml.write_text(text)
        with pytest.raises(UsageError, match=says):
            build("--config", str(toml))


def test_bad_settings_exit_2_before_anything_opens(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = dreamgym("train", "--store", str(store), "--out", str(tmp_path / "run"), "--mode", "mixed",
                      "--group-size", "1", check=False)  # fmt: skip
    assert result.returncode == 2 and "group_size must be >= 2" in result.stderr
    result = dreamgym("train", "--store", str(store), "--out", str(tmp_path / "run"), "--mode", "mixed",
                      "--curriculum", check=False)  # fmt: skip
    assert result.returncode == 2 and "--curriculum-url" in result.stderr
    result = dreamgym("train", "--store", str(store), "--out", str(tmp_path / "run"), "--mode", "mixed",
                      "--device", "cuda:1", check=False)  # fmt: skip
    assert result.returncode == 2 and "CUDA_VISIBLE_DEVICES=1" in result.stderr
    result = dreamgym("train", "--store", str(store), "--out", str(tmp_path / "run"), "--mode", "mixed",
                      "--anchor-weight", "1", check=False)  # fmt: skip
    assert result.returncode == 2 and "holds none: collect them first" in result.stderr
    assert not store.exists() and not (tmp_path / "run").exists()
