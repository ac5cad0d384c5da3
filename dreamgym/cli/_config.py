"""Command-line flags made from config dataclasses: one source of defaults, the field docstrings as help.

A field ``group_size`` becomes ``--group-size``; a nested settings dataclass
(``lora: LoraSettings | None``) becomes its fields under a prefix
(``--lora-r``, ``--lora-alpha``), with ``--no-lora`` where the field may be
``None`` and ``--curriculum`` where it is ``None`` by default. Flags are
parsed with ``argparse.SUPPRESS`` as their default, so only what the user
typed reaches :func:`build_config`, which lays it over a config file's values
(``--config FILE``, JSON or TOML, keyed by field name) over the dataclass's
own defaults. Field values on the command line:

- numbers, strings and paths as typed; ``Literal`` fields as choices;
- booleans as ``--name`` / ``--no-name``;
- tuples of strings as ``a,b`` (``''`` for none); ``(int, float)`` pairs as
  ``0:0.1,20:0.5``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import json
import re
import textwrap
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from dreamgym.core.errors import UsageError

__all__ = [
    "add_config_file_option",
    "add_config_flags",
    "apply_config_file",
    "build_config",
    "field_docs",
    "given_values",
    "read_config_file",
]

_ROLE = re.compile(r":\w+:`~?([^`]+)`")

_NONE = "__none__"
"""The value a ``--no-<nested>`` flag stores: the field is ``None``."""


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal right below it in the class body), first paragraph only."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            first = inspect.cleandoc(after.value.value).split("\n\n")[0]
            plain = _ROLE.sub(r"\1", first).replace("``", "")  # reST markup reads badly in a terminal
            docs[node.target.id] = " ".join(plain.split()).replace("%", "%%")
    return docs


def add_config_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    prefix: str = "",
    skip: Sequence[str] = (),
    aliases: Mapping[str, Sequence[str]] | None = None,
    helps: Mapping[str, str] | None = None,
    base: Any = None,
) -> None:
    """Add one flag per field of ``cls`` (nested settings under their own prefix).

    Args:
        parser: The command's parser (or an argument group).
        cls: A dataclass.
        prefix: Put before every flag and destination (for nested settings).
        skip: Fields the command sets itself (``mode``, ``output_dir``, ...).
        aliases: Field name -> further flag names (e.g. ``learning_rate`` -> ``--lr``).
        helps: Field name -> help that replaces the docstring's.
        base: An instance whose values are the defaults shown (a nested field's own default).
    """
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    aliases = aliases or {}
    helps = helps or {}
    for item in dataclasses.fields(cls):
        if item.name in skip or not item.init or item.metadata.get("flag") is False:
            continue  # metadata flag=False: a field set per call, not a setting (Sampling.copy_lines)
        dest = f"{prefix}{item.name}"
        flags = [f"--{dest.replace('_', '-')}", *aliases.get(item.name, ())]
        kind = hints[item.name]
        default = getattr(base, item.name) if base is not None else _default(item)
        doc = helps.get(item.name) or docs.get(item.name, "")
        nested = _nested(kind)
        if nested is not None:
            optional = _optional(kind)
            if optional and default is None:
                parser.add_argument(f"--{dest.replace('_', '-')}", dest=dest, action="store_const", const={},
                                    default=argparse.SUPPRESS, help=f"{doc} (off unless given)")  # fmt: skip
            elif optional:
                parser.add_argument(f"--no-{dest.replace('_', '-')}", dest=dest, action="store_const", const=_NONE,
                                    default=argparse.SUPPRESS, help=f"{doc} Off with this flag.")  # fmt: skip
            add_config_flags(parser, nested, prefix=f"{dest}_", base=default if default is not None else None)
            continue
        shown = "" if default is dataclasses.MISSING else f" (default: {_show(default)})"
        if _strip_none(kind) is bool:
            parser.add_argument(*flags, dest=dest, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=f"{doc}{shown}")  # fmt: skip
            continue
        choices = _choices(kind)
        parser.add_argument(*flags, dest=dest, type=_parser(kind, dest), choices=choices, metavar=_metavar(kind),
                            default=argparse.SUPPRESS, help=f"{doc}{shown}")  # fmt: skip


def given_values(args: argparse.Namespace, cls: type, *, prefix: str = "") -> dict[str, Any]:
    """The fields of ``cls`` the command line set (nested settings as dicts, ``None`` for ``--no-...``)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        dest = f"{prefix}{item.name}"
        nested = _nested(hints[item.name])
        if nested is not None:
            inner = given_values(args, nested, prefix=f"{dest}_")
            switch = getattr(args, dest, None)
            if switch == _NONE:
                values[item.name] = None
            elif inner or switch == {}:
                values[item.name] = inner
            continue
        if hasattr(args, dest):
            values[item.name] = getattr(args, dest)
    return values


def read_config_file(path: Path) -> dict[str, Any]:
    """A config file's values: JSON, or TOML when the name ends in ``.toml``.

    Raises:
        UsageError: The file is missing, unreadable, or not a table of fields.
    """
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as exc:
        raise UsageError(f"--config {path}: {exc.strerror or exc}") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--config {path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: the file must hold a table of settings, keyed by field name")
    return data


def add_config_file_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` for a command whose flags are not one dataclass: the file (JSON, or TOML by its
    ``.toml`` name) is a table of the command's own flags by name (``max-steps`` or ``max_steps``); flags
    given on the command line override it (:func:`apply_config_file`, before parsing)."""
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="a JSON or TOML table of this command's flags by name; flags given here override "
                             "it")  # fmt: skip
    parser.set_defaults(_takes_config_file=True)


def apply_config_file(root: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Before ``root`` parses ``argv``: make the ``--config`` file's values the defaults of the command
    ``argv`` runs (a flag the file sets is no longer required on the command line).

    Raises:
        UsageError: The file does not read, or names a flag the command does not have.
    """
    path = _config_path(argv)
    parser = _command_parser(root, argv)
    if path is None or parser is None or not parser.get_default("_takes_config_file"):
        return
    values = read_config_file(path)
    flags = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}
    defaults: dict[str, Any] = {}
    for key, value in values.items():
        action = flags.get(str(key).replace("-", "_"))
        if action is None:
            known = ", ".join(sorted(dest.replace("_", "-") for dest in flags))
            raise UsageError(f"--config {path}: {key!r} is no flag of this command (its flags: {known})")
        if isinstance(value, str) and callable(action.type):
            try:
                value = action.type(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                raise UsageError(f"--config {path}: {key} = {value!r}: {exc}") from None
        defaults[action.dest] = value
        action.required = False
    parser.set_defaults(**defaults)


def _config_path(argv: Sequence[str]) -> Path | None:
    for n, token in enumerate(argv):
        if token == "--config" and n + 1 < len(argv):
            return Path(argv[n + 1])
        if token.startswith("--config="):
            return Path(token.split("=", 1)[1])
    return None


def _command_parser(root: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser | None:
    """The (sub)parser of the command ``argv`` names by its leading words (``sim train`` ...)."""
    parser, found = root, None
    for token in argv:
        if token.startswith("-"):
            continue
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not commands or token not in commands[0].choices:
            break
        parser = found = commands[0].choices[token]
    return found


def build_config(cls: type, *layers: Mapping[str, Any], where: str = "") -> Any:
    """``cls`` from its defaults with each layer's values laid over the last (later layers win).

    Nested settings merge field by field, over the field's own default
    (``None`` switches an optional one off). Lists from a file become tuples.

    Raises:
        UsageError: A layer names a field ``cls`` does not have, or a value of the wrong kind.
        ConfigError: The dataclass refuses the values (its message says why).
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _deep_merge(merged, layer)
    return _build(cls, None, merged, where or cls.__name__)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for name, value in over.items():
        previous = out.get(name)
        if isinstance(value, Mapping) and isinstance(previous, Mapping):
            out[name] = _deep_merge(previous, value)
        else:
            out[name] = value
    return out


def _build(cls: type, base: Any, values: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {item.name: item for item in dataclasses.fields(cls) if item.init}
    start = {name: getattr(base, name) for name in fields} if base is not None else {}
    for name, value in values.items():
        if name not in fields:
            raise UsageError(f"{where}: no setting {name!r}; known: {', '.join(sorted(fields))}")
        nested = _nested(hints[name])
        if nested is not None and isinstance(value, Mapping):
            current = start.get(name, _default(fields[name]))
            inner_base = current if dataclasses.is_dataclass(current) else None
            start[name] = _build(nested, inner_base, value, f"{where}.{name}")
        else:
            start[name] = _coerce(hints[name], value, f"{where}.{name}")
    try:
        return cls(**start)
    except TypeError as exc:
        raise UsageError(f"{where}: {exc}") from None


# ------------------------------------------------------------------ types


def _default(item: dataclasses.Field[Any]) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return dataclasses.MISSING


def _optional(kind: Any) -> bool:
    return type(None) in typing.get_args(kind)


def _strip_none(kind: Any) -> Any:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else kind
    return kind


def _nested(kind: Any) -> type | None:
    inner = _strip_none(kind)
    return inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None


def _choices(kind: Any) -> list[Any] | None:
    inner = _strip_none(kind)
    return list(typing.get_args(inner)) if typing.get_origin(inner) is Literal else None


def _metavar(kind: Any) -> str | None:
    inner = _strip_none(kind)
    if typing.get_origin(inner) is Literal:
        return None
    if _is_pairs(inner):
        return "FROM:VALUE,..."
    if typing.get_origin(inner) is tuple or any(typing.get_origin(arg) is tuple for arg in typing.get_args(inner)):
        return "A,B,..."
    return None


def _is_pairs(kind: Any) -> bool:
    args = typing.get_args(kind)
    return typing.get_origin(kind) is tuple and len(args) == 2 and typing.get_origin(args[0]) is tuple


def _parser(kind: Any, dest: str) -> Callable[[str], Any]:
    inner = _strip_none(kind)
    optional = _optional(kind)

    def parse(text: str) -> Any:
        if optional and text.lower() in ("none", ""):
            return None
        return _from_text(inner, text)

    parse.__name__ = dest  # argparse names the flag's type in its "invalid value" message
    return parse


def _from_text(kind: Any, text: str) -> Any:
    if kind in (int, float, str):
        return kind(text)
    if kind is Path:
        return Path(text).expanduser()
    if typing.get_origin(kind) is Literal:
        return text
    if _is_pairs(kind):
        pairs = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            start, colon, value = part.partition(":")
            if not colon:
                raise ValueError(part)
            pairs.append((int(start), float(value)))
        return tuple(pairs)
    if typing.get_origin(kind) is tuple and typing.get_args(kind)[:1] == (int,):  # seeds: "0-3,7"
        return _int_ranges(text)
    if typing.get_origin(kind) is tuple:
        return tuple(p.strip() for p in text.split(",") if p.strip())
    if isinstance(kind, types.UnionType):  # tuple[str, ...] | str: a comma makes a tuple
        return tuple(p.strip() for p in text.split(",") if p.strip()) if "," in text else text
    raise ValueError(text)


def _int_ranges(text: str) -> tuple[int, ...]:
    """``"0-3,7"`` -> ``(0, 1, 2, 3, 7)``; an empty or backwards range is refused."""
    values: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        start, dash, end = part.partition("-")
        first, last = int(start), int(end) if dash else int(start)
        if last < first:
            raise ValueError(f"{part}: the range runs backwards")
        values.extend(range(first, last + 1))
    if not values:
        raise ValueError("no numbers")
    return tuple(values)


def _coerce(kind: Any, value: Any, where: str) -> Any:
    """A config file's value as the field's type (lists to tuples, strings to paths); wrong kinds refused."""
    if value is None:
        if _optional(kind):
            return None
        raise UsageError(f"{where}: this setting cannot be null")
    inner = _strip_none(kind)
    if isinstance(value, str) and inner is not str and typing.get_origin(inner) is not Literal:
        try:
            return _from_text(inner, value)
        except ValueError:
            raise UsageError(f"{where}: {value!r} is not a valid value") from None
    if isinstance(value, list):
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if inner in (int, float, bool) and not isinstance(value, inner):
        raise UsageError(f"{where}: {value!r} is not a {inner.__name__}")
    return value


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        if value and isinstance(value[0], tuple):
            return ",".join(f"{a}:{b}" for a, b in value)
        return ",".join(map(str, value)) or "''"
    return str(value)
