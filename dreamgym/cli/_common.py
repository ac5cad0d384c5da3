"""What every command shares: the task grammar, seeds, held-out pairs, sites, stores and embedders by name.

Command modules import from here, never from each other or from ``dreamgym.cli``;
nothing outside the command line imports this module.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RUN_TASKS_HELP",
    "TASKS_HELP",
    "add_served_arguments",
    "add_served_sim_arguments",
    "add_site_argument",
    "check_served",
    "embedder_named",
    "experience_model_source",
    "hold_outs",
    "open_store",
    "parse_seeds",
    "parse_tasks",
    "run_tasks",
    "served_backend",
    "served_settings",
    "task_names",
    "webarena_sites",
]


def parse_seeds(text: str) -> list[int]:
    """``"0-3,7"`` → ``[0, 1, 2, 3, 7]``.

    Raises:
        UsageError: The text is not numbers and ranges, a range runs backwards, or it names no seed.
    """
    from dreamgym.core.errors import UsageError

    seeds: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise UsageError(f"--seeds {text!r}: write numbers and ranges like 0-9,12")
        if dash and int(high) < int(low):
            raise UsageError(f"--seeds {text!r}: the range {part} runs backwards; write {high}-{low}")
        seeds.extend(range(int(low), int(high) + 1) if dash else [int(low)])
    if not seeds:
        raise UsageError(f"--seeds {text!r} names no seed; write numbers and ranges like 0-9,12")
    return seeds


TASKS_HELP = (
    "MiniWoB++ tasks: names (miniwob:NAME or bare), 'miniwob:all' or 'all' (every task the text action "
    "space can do), 'demonstrated' (the tasks with a scripted demonstrator) or 'demo'"
)


RUN_TASKS_HELP = (
    TASKS_HELP + "; or webarena:PATH, a WebArena-format config file or folder (any site, see --site); or text "
    "worlds: textworld:cooking?recipe=2&take=1 (generated, one game per seed), textworld:custom?rooms=2&quest=2, "
    "textworld:PATH (.z8 games, an ALFWorld folder)"
)


def task_names(text: str) -> list[str]:
    """The MiniWoB++ task names of ``--tasks``.

    One grammar for every command: comma-separated names, each bare or as
    ``miniwob:NAME``; ``all`` (or ``miniwob:all``) is every task the text
    action space can do (:func:`~dreamgym.bridge.miniwob.text_tasks`);
    ``demonstrated`` the tasks with a scripted demonstrator; ``demo`` the
    demo's six.

    Raises:
        UsageError: It names no task, or a site other than MiniWoB++.
    """
    from dreamgym.bridge.demonstrators import DEMONSTRATORS
    from dreamgym.bridge.miniwob import text_tasks
    from dreamgym.core.errors import UsageError

    named = [name.strip() for name in text.split(",") if name.strip()]
    if not named:
        raise UsageError(f"--tasks {text!r} names no task; write names like click-button,enter-text, or all")
    found: list[str] = []
    for name in named:
        site, colon, rest = name.partition(":")
        if colon and site != "miniwob":
            raise UsageError(f"--tasks {name!r}: give MiniWoB++ tasks (miniwob:NAME or bare names) here; "
                             "or webarena:PATH (WebArena-format configs), or textworld:... (text worlds)")  # fmt: skip
        name = rest if colon else name
        if name == "all":
            found += text_tasks()
        elif name == "demonstrated":
            found += sorted(DEMONSTRATORS)
        elif name == "demo":
            found += ["click-button", "enter-text", "login-user", "choose-list", "click-checkboxes", "search-engine"]
        else:
            found.append(name.removeprefix("miniwob/"))
    return list(dict.fromkeys(found))


def run_tasks(args: argparse.Namespace) -> tuple[list[Any], bool]:
    """The tasks of ``--tasks`` (and ``--site``), each with ``--max-steps``, and whether they have seeds.

    Raises:
        UsageError: See :func:`parse_tasks`.
    """
    return parse_tasks(args.tasks, args.site, max_steps=args.max_steps)


def parse_tasks(spec: str, sites: Sequence[str], *, max_steps: int | None = None) -> tuple[list[Any], bool]:
    """The tasks a ``--tasks`` value names, and whether they have seeds (MiniWoB++ does; a
    WebArena-format config, on any site, does not: one group per task, held out by task id).

    Args:
        spec: ``--tasks``: MiniWoB++ names (:func:`task_names`), ``webarena:PATH`` or ``textworld:...``
            (:func:`dreamgym.textworlds.parse_text_world_tasks`).
        sites: ``--site NAME=URL`` values filling the configs' ``__NAME__`` placeholders.
        max_steps: Every task's step limit (``None``: as the task or its config sets it).

    Raises:
        UsageError: ``--tasks`` names nothing, a task that does not exist, a config that cannot be read,
            or a placeholder no ``--site`` (or environment variable) fills.
    """
    import msgspec

    from dreamgym.bridge import miniwob_tasks
    from dreamgym.core.errors import ConfigError, UsageError

    spec = spec.strip()
    if spec.startswith("textworld:"):
        from dreamgym.textworlds import parse_text_world_tasks

        try:
            return parse_text_world_tasks(spec, max_steps=max_steps or 0)
        except ConfigError as exc:
            raise UsageError(f"--tasks {spec!r}: {exc}") from None
    if spec.startswith("webarena:"):
        from dreamgym.bridge import load_webarena, placeholders, site_urls

        path = Path(spec.removeprefix("webarena:")).expanduser()
        if not path.exists():
            raise UsageError(f"--tasks {spec!r}: no config file or folder at {path}")
        try:
            tasks = load_webarena(path)
        except ConfigError as exc:
            raise UsageError(f"--tasks {spec!r}: {exc}") from None
        if not tasks:
            raise UsageError(f"--tasks {spec!r}: {path} holds no WebArena-format config")
        filled = set(site_urls(list(sites)).urls)
        for task in tasks:
            if missing := sorted(placeholders(task) - filled):
                raise UsageError(f"task {task.task_id} uses __{missing[0]}__, which nothing fills: give "
                                 f"--site {missing[0].lower()}=URL (or set {missing[0]})")  # fmt: skip
        if max_steps is not None:
            tasks = [msgspec.structs.replace(task, max_steps=max_steps) for task in tasks]
        return tasks, False
    try:
        return miniwob_tasks(task_names(spec), max_steps or 0), True
    except UsageError:
        raise
    except ConfigError as exc:
        raise UsageError(f"--tasks {spec!r}: {exc}") from None


def add_site_argument(parser: argparse.ArgumentParser, *, episodes: bool = True) -> None:
    """``--site NAME=URL``, the same in every command that takes ``--tasks``; with ``episodes`` (commands
    that run episodes on the site) also the answer judge and the reset command."""
    parser.add_argument("--site", action="append", default=[], metavar="NAME=URL",
                        help="fills the placeholder __NAME__ of webarena: configs (default: the environment's "
                             "SHOPPING, ..., WA_SHOPPING, ...); repeatable")  # fmt: skip
    if not episodes:
        return
    parser.add_argument("--reset-command", default=None, metavar="CMD",
                        help="a shell command that brings a stateful webarena: site back to its first state, run "
                             "before every real episode; real episodes then run one at a time")  # fmt: skip
    parser.add_argument("--login-command", default=None, metavar="CMD",
                        help="a shell command that logs in to a webarena: site and saves the task's "
                             "storage_state (at $DREAMGYM_LOGIN_STATE), run when it is missing or a cookie in "
                             "it has expired")  # fmt: skip
    parser.add_argument("--answer-judge-url", default=None, metavar="URL",
                        help="OpenAI-compatible /v1 URL of the LLM that scores webarena: answers by fuzzy_match "
                             "and ua_match, with WebArena's prompts")  # fmt: skip
    parser.add_argument("--answer-judge-model", default=None, metavar="NAME", help="the answer judge's model name")


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers N`` and ``--ray-address``: real episodes in Ray actors (read back by :func:`worker_config`)."""
    group = parser.add_argument_group("rollout workers (Ray)")
    group.add_argument("--workers", type=int, default=0, metavar="N",
                       help="run real episodes in N Ray actors, each with its own Chromium (default 0: in this "
                            "process); the policy and the store stay here")  # fmt: skip
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="a running Ray cluster ('auto', 'ray://HOST:10001'); default: a local Ray for the run",
    )
    group.add_argument(
        "--worker-cpus",
        type=float,
        default=0.5,
        metavar="CPUS",
        help="CPUs each worker reserves from Ray (fractions allowed; its browsers are not counted)",
    )


def worker_config(args: argparse.Namespace) -> Any:
    """The :class:`~dreamgym.runtime.WorkerConfig` of ``--workers``, or ``None`` for in-process episodes.

    Raises:
        UsageError: A bad count, an address without workers, or Ray not installed.
    """
    import importlib.util

    from dreamgym.core.errors import UsageError

    workers, address = getattr(args, "workers", 0), getattr(args, "ray_address", None)
    cpus = getattr(args, "worker_cpus", 0.5)  # commands without the flags run in process
    if workers < 0 or cpus <= 0:
        raise UsageError(f"--workers must be >= 0 and --worker-cpus above 0, got {workers} and {cpus}")
    if not workers:
        if address:
            raise UsageError("--ray-address runs real episodes on a Ray cluster: give --workers N as well")
        return None
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--workers runs real episodes in Ray actors: pip install 'dreamgym[ray]'")
    from dreamgym.runtime import WorkerConfig

    return WorkerConfig(workers=workers, address=address, cpus=cpus)


def webarena_sites(args: argparse.Namespace, tasks: Sequence[Any]) -> list[Any]:
    """A :class:`~dreamgym.bridge.WebArenaSite` for ``--site``, the answer judge and the reset command,
    if any task is a WebArena-format config (``[]`` otherwise).

    Raises:
        UsageError: A task scores its answer by ``fuzzy_match`` and no judge is given, or a judge URL
            comes without its model name (found before any browser starts, not when the first
            episode ends).
    """
    from dreamgym.bridge import WebArenaSite, site_urls, task_config
    from dreamgym.core.errors import UsageError

    configs = [(task, task_config(task)) for task in tasks if task.benchmark == "webarena"]
    if not configs:
        for flag in ("reset_command", "login_command"):
            if getattr(args, flag, None):
                raise UsageError(f"--{flag.replace('_', '-')} is for webarena: tasks (MiniWoB++ pages need neither)")
        return []
    url, model = getattr(args, "answer_judge_url", None), getattr(args, "answer_judge_model", None)
    if url and not model:
        raise UsageError("--answer-judge-url needs --answer-judge-model, the model name its server serves")
    judge = None
    if url:
        from dreamgym.bridge import Judge

        judge = Judge(str(model), base_url=url)
    else:
        for task, config in configs:
            answers = (config.get("eval") or {}).get("reference_answers") or {}
            if isinstance(answers, dict) and "fuzzy_match" in answers:
                raise UsageError(
                    f"task {task.task_id} scores its answer by fuzzy_match, which asks an LLM judge: give "
                    "--answer-judge-url URL --answer-judge-model NAME (any OpenAI-compatible server)"
                )
    return [
        WebArenaSite(site_urls(args.site), judge=judge, reset_command=getattr(args, "reset_command", None),
                     login_command=getattr(args, "login_command", None))
    ]  # fmt: skip


def add_served_arguments(
    parser: argparse.ArgumentParser,
    prefix: str,
    what: str,
    *,
    max_new_tokens: int,
    model: bool = True,
    url_help: str = "",
) -> None:
    """``--PREFIX-url``, ``-model`` (unless ``model`` is False: the command names it otherwise),
    ``-max-new-tokens``, ``-stop``, ``-timeout`` and ``-concurrency``: one served model's settings,
    the same in every command that asks one (read back by :func:`served_backend`)."""
    group = parser.add_argument_group(f"the {what} on an OpenAI-compatible server (vLLM, SGLang, ...)")
    group.add_argument(f"--{prefix}-url", default=None, metavar="URL", help=url_help or f"the {what}'s /v1 URL")
    if model:
        group.add_argument(f"--{prefix}-model", default=None, metavar="NAME", help=f"the {what}'s model name")
    group.add_argument(f"--{prefix}-max-new-tokens", type=int, default=max_new_tokens, metavar="N",
                       help="token budget of each answer")  # fmt: skip
    group.add_argument(f"--{prefix}-stop", action="append", default=None, metavar="TEXT",
                       help="a string its answers end at (repeatable, at most four)")  # fmt: skip
    group.add_argument(f"--{prefix}-timeout", type=float, default=120.0, metavar="S",
                       help="seconds a request may take once sent")  # fmt: skip
    group.add_argument(f"--{prefix}-concurrency", type=int, default=8, metavar="N", help="requests in flight at once")


def served_settings(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """The checked settings of :func:`add_served_arguments`: ``max_new_tokens``, ``stop``, ``timeout_s``,
    ``concurrency``.

    Raises:
        UsageError: A setting out of range (named by its flag).
    """
    from dreamgym.core.errors import UsageError

    key = prefix.replace("-", "_")
    settings = {
        "max_new_tokens": getattr(args, f"{key}_max_new_tokens"),
        "stop": tuple(getattr(args, f"{key}_stop") or ()),
        "timeout_s": getattr(args, f"{key}_timeout"),
        "concurrency": getattr(args, f"{key}_concurrency"),
    }
    if settings["max_new_tokens"] < 1 or settings["concurrency"] < 1 or settings["timeout_s"] <= 0:
        raise UsageError(f"--{prefix}-max-new-tokens and --{prefix}-concurrency must be >= 1 and "
                         f"--{prefix}-timeout above 0")  # fmt: skip
    if len(settings["stop"]) > 4:
        raise UsageError(f"--{prefix}-stop given at most four times (OpenAI-compatible servers take four)")
    return settings


def check_served(args: argparse.Namespace, prefix: str) -> bool:
    """Whether ``--PREFIX-url`` is given, its model name and settings checked (nothing is opened).

    Raises:
        UsageError: A URL without ``--PREFIX-model``, or a setting out of range.
    """
    from dreamgym.core.errors import UsageError

    key = prefix.replace("-", "_")
    if not getattr(args, f"{key}_url"):
        return False
    if not getattr(args, f"{key}_model"):
        raise UsageError(f"--{prefix}-url needs --{prefix}-model, the model name its server serves")
    served_settings(args, prefix)
    return True


def served_backend(args: argparse.Namespace, prefix: str, *, temperature: float = 0.0) -> tuple[Any, Any] | None:
    """The ``OpenAIBackend`` and ``Sampling`` of ``--PREFIX-url`` and its settings; ``None`` without a URL.

    Raises:
        UsageError: See :func:`check_served`.
    """
    from dreamgym.core.protocols import Sampling
    from dreamgym.simulator import OpenAIBackend

    if not check_served(args, prefix):
        return None
    key = prefix.replace("-", "_")
    settings = served_settings(args, prefix)
    backend = OpenAIBackend(model=getattr(args, f"{key}_model"), base_url=getattr(args, f"{key}_url"),
                            timeout_s=settings["timeout_s"], max_concurrency=settings["concurrency"])  # fmt: skip
    return backend, Sampling(temperature=temperature, max_new_tokens=settings["max_new_tokens"], stop=settings["stop"])


def add_served_sim_arguments(parser: argparse.ArgumentParser, model_flag: str) -> None:
    """A served experience model's flags; ``model_flag`` is its name there."""
    add_served_arguments(parser, "sim", "experience model", max_new_tokens=384, model=False,
                         url_help=f"the /v1 URL serving the experience model; {model_flag} then names the served "
                                  "model, which must answer in the default template's format")  # fmt: skip
    parser.add_argument("--sim-structured", choices=("none", "vllm", "vllm-guided", "sglang"), default="none",
                        help="ask the server to keep answers to the template's form: vLLM's structured_outputs "
                             "regex (vllm), its older guided_regex (vllm-guided), SGLang's regex (sglang)")  # fmt: skip
    parser.add_argument("--sim-attempts", type=int, default=3, metavar="N",
                        help="attempts per prediction when the experience model's answer is malformed (served or "
                             "local); retries sample at temperature 0.7, so give 1 where a server does not sample "
                             "(default: 3)")  # fmt: skip


def experience_model_source(args: argparse.Namespace, name: str, model_flag: str) -> Any:
    """The experience model a command asks: ``name``'s directory ('default': the offline default; a Hugging Face
    id: its snapshot in the local cache), or with ``--sim-url`` the :class:`~dreamgym.simulator.ServedModel` of
    that name.

    Raises:
        UsageError: ``--sim-url`` without a served model's name, or served settings out of range.
    """
    from dreamgym.core.errors import UsageError

    url = getattr(args, "sim_url", None)
    if not url:
        if name == "default":
            from dreamgym.jobs.sim_default import default_model_dir, warn_if_outdated

            warn_if_outdated(default_model_dir())
            return default_model_dir()
        from dreamgym.core.models import is_hub_id, resolve_model

        local = Path(name).expanduser()
        if local.exists() or not is_hub_id(name):  # a path: the command says what is wrong with it, in its turn
            return local
        return resolve_model(name, what=model_flag)
    from dreamgym.simulator import ServedModel

    if name == "default":
        raise UsageError(f"--sim-url needs {model_flag} NAME, the model name its server serves")
    attempts = getattr(args, "sim_attempts", 3)
    if attempts < 1:
        raise UsageError(f"--sim-attempts must be >= 1 (1: no retry), got {attempts}")
    served = ServedModel(model=name, url=url, structured=getattr(args, "sim_structured", "none"), attempts=attempts,
                         **served_settings(args, "sim"))  # fmt: skip
    return _in_its_template(served)


def _in_its_template(served: Any) -> Any:
    """A served model whose name is a local directory (``transformers serve`` names models by their path) with the
    template that directory records it was trained on (``dreamgym sim train``'s metadata), else as it is."""
    from dataclasses import replace

    from dreamgym.simulator import TemplateConfig, read_metadata

    local = Path(served.model).expanduser()
    recorded = read_metadata(local).get("template") if local.is_dir() else None
    return replace(served, template=TemplateConfig(**recorded)) if recorded else served


def embedder_named(name: str | None) -> Any:
    if name is None:
        return None
    from dreamgym.replay import MiniLMEmbedder, embedder_from_name

    return MiniLMEmbedder() if name.lower() in ("minilm", "all-minilm-l6-v2") else embedder_from_name(name)


def open_store(path: Path, **kwargs: Any) -> Any:
    from dreamgym.core.errors import StorePathError
    from dreamgym.replay import LmdbReplayStore

    if kwargs.get("readonly") and not (path / "data.mdb").exists():
        raise StorePathError(f"no store at {path}")
    return LmdbReplayStore(path, **kwargs)


def hold_outs(values: list[str]) -> list[tuple[str, int | None]]:
    from dreamgym.core.errors import ConfigError

    pairs: list[tuple[str, int | None]] = []
    for value in values:
        task, _, seed = value.rpartition(":")
        if not seed.isdigit():  # no seed given: the whole task is held out
            task, seed = value, ""
        if not task:
            raise ConfigError(f"--hold-out {value!r}: write TASK or TASK:SEED")
        pairs.append((task, int(seed) if seed else None))
    return pairs
