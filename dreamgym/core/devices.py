"""Where torch work runs and in what precision: the ``device`` and ``dtype`` settings of every torch config.

``device``: ``"auto"`` (CUDA where torch sees a GPU, else the CPU) or a torch
device string: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``.

``dtype``: ``"auto"`` (the weights as the model loaded, float32 on the CPU)
or one of ``"float32"``, ``"bfloat16"``, ``"float16"``. For a training,
``"bfloat16"``/``"float16"`` mean mixed precision over float32 weights
(:func:`mixed_precision`): on CUDA, and ``"bfloat16"`` also on a CPU with
bfloat16 units in dreamgym's own loop.

Checking a setting needs no torch (configs check theirs when built);
resolving one imports it. Every tensor a model is fed is made on
:func:`model_device`, so nothing lands on torch's default device.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypedDict

from dreamgym.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = [
    "DTYPES",
    "TrainerFlags",
    "check_device",
    "check_dtype",
    "checkpointing_flag",
    "cpu_has_bfloat16",
    "mixed_precision",
    "model_device",
    "place_given",
    "place_loaded",
    "resolve_device",
    "resolve_dtype",
    "trainer_flags",
]

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The ``dtype`` settings."""

_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
_DEVICES = "'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"


def check_device(setting: object, where: str, *, trl: bool = False) -> None:
    """Refuse a ``device`` setting that names no device (``where`` names the setting in the message).

    ``trl``: the setting of a training TRL runs, which trains on the first GPU the process sees (each rank
    on its own under ``accelerate launch``): another GPU is chosen with ``CUDA_VISIBLE_DEVICES``.
    """
    if not isinstance(setting, str) or not _DEVICE.fullmatch(setting):
        raise ConfigError(f"{where} must be {_DEVICES}, not {setting!r}")
    if trl and setting.startswith("cuda:") and setting != "cuda:0":
        raise ConfigError(
            f"{where}={setting!r}: TRL trains on the first GPU it sees; choose that GPU with "
            f"CUDA_VISIBLE_DEVICES={setting.split(':')[1]} and {where.rsplit('.', 1)[-1]}='cuda'"
        )


def check_dtype(setting: object, where: str) -> None:
    """Refuse a ``dtype`` setting that is none of :data:`DTYPES`."""
    if setting not in DTYPES:
        raise ConfigError(f"{where} must be one of {', '.join(map(repr, DTYPES))}, not {setting!r}")


def resolve_device(setting: str) -> torch.device:
    """The torch device a ``device`` setting names (``"auto"``: CUDA where available, else the CPU).

    Raises:
        ConfigError: The setting names no device, or a GPU kind torch does not see here.
    """
    import torch

    check_device(setting, "device")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(setting)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {setting!r}: torch sees no CUDA GPU here; use 'auto' or 'cpu'")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {setting!r}: torch sees {torch.cuda.device_count()} CUDA GPU(s) here")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {setting!r}: torch sees no MPS device here; use 'auto' or 'cpu'")
    return device


def resolve_dtype(setting: str, device: torch.device) -> torch.dtype | None:
    """The dtype a ``dtype`` setting gives weights on ``device``; ``None`` keeps theirs (``"auto"`` off the CPU).

    Raises:
        ConfigError: The setting is none of :data:`DTYPES`.
    """
    import torch

    check_dtype(setting, "dtype")
    if setting == "auto":
        return torch.float32 if device.type == "cpu" else None
    found: torch.dtype = getattr(torch, setting)
    return found


def model_device(model: Any) -> torch.device:
    """The device of ``model``'s weights: where every tensor fed to it is made."""
    device: torch.device = next(model.parameters()).device
    return device


def place_loaded(model: Any, device: str = "auto", dtype: str = "auto") -> Any:
    """Put a model just loaded on ``device`` in ``dtype``, ``"auto"`` resolved; returns it (moved in place)."""
    target = resolve_device(device)
    cast = resolve_dtype(dtype, target)
    return model.to(device=target, dtype=cast) if cast is not None else model.to(target)


def place_given(model: Any, device: str = "auto", dtype: str = "auto") -> Any:
    """Put a model given already loaded where its settings say: each ``"auto"`` setting leaves it as it is."""
    import torch

    changes: dict[str, Any] = {}
    if device != "auto":
        changes["device"] = resolve_device(device)
    if dtype != "auto":
        check_dtype(dtype, "dtype")
        changes["dtype"] = getattr(torch, dtype)
    return model.to(**changes) if changes else model


def mixed_precision(device: torch.device, dtype: str, *, cpu: bool = False) -> torch.dtype | None:
    """The dtype a training's forward and backward passes run in over its weights (autocast): ``bfloat16`` or
    ``float16`` on CUDA; ``None`` runs them in the weights' own (float32 on the CPU).

    ``cpu``: the caller can also run ``bfloat16`` on the CPU (dreamgym's plain loop, the MiniLM embedder; TRL's
    trainers cannot) and does where the CPU computes in bfloat16 natively (:func:`cpu_has_bfloat16`): on a 2-core
    AVX-512 BF16 machine the offline default's model ran its bare forward and backward at 1.5 times float32's
    tokens per second, the plain loop at 1.2 times, and collecting the default's 2,558 steps with their MiniLM
    embedding (batched by length, bfloat16) took 80 s instead of 104 s with the embedder as it was (float32)
    (``benchmarks/sim_build.py``). Elsewhere the CPU runs float32 (emulated bfloat16 is slower).

    Raises:
        ConfigError: The setting is none of :data:`DTYPES`.
    """
    check_dtype(dtype, "dtype")
    if dtype not in ("bfloat16", "float16"):
        return None
    if device.type == "cuda":
        return resolve_dtype(dtype, device)
    if cpu and device.type == "cpu" and dtype == "bfloat16" and cpu_has_bfloat16():
        return resolve_dtype(dtype, device)
    return None


def cpu_has_bfloat16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX-512 BF16 or AMX), as torch reports it."""
    import torch

    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


class TrainerFlags(TypedDict):
    """The device and precision flags of transformers' ``TrainingArguments`` (TRL's configs)."""

    use_cpu: bool
    bf16: bool
    fp16: bool


def trainer_flags(device: str, dtype: str) -> TrainerFlags:
    """``use_cpu``, ``bf16`` and ``fp16`` of transformers' ``TrainingArguments`` for a training's settings
    (mixed precision as :func:`mixed_precision` says: on CUDA only)."""
    import torch

    target = resolve_device(device)
    precision = mixed_precision(target, dtype)
    return {"use_cpu": target.type == "cpu", "bf16": precision == torch.bfloat16, "fp16": precision == torch.float16}


def checkpointing_flag(on: bool) -> dict[str, Any]:
    """Activation checkpointing on or off, under the name the installed transformers' ``TrainingArguments`` takes:
    ``activation_checkpointing``, or ``gradient_checkpointing`` in releases before the rename (the old name still
    works after it, with a warning on every run). TRL's configs turn it on unless told otherwise: it recomputes
    each layer's forward pass during the backward one: memory traded for one more forward pass per step."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return {"activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": on}
