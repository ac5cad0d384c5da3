"""The one exception tree of dreamgym.

Every error dreamgym raises on purpose derives from :class:`DreamgymError`, so
``except DreamgymError`` catches all of them and nothing else::

    DreamgymError
    ├── ConfigError                 a setting is wrong; the message says how to fix it
    │   └── UsageError              a command-line argument cannot work (exit 2, nothing opened)
    ├── RecordFormatError           stored bytes cannot be decoded
    │   └── SchemaVersionError      a record is newer than this dreamgym understands
    ├── StateFormatError            text is not in the abstract state format
    │   └── DiffApplyError          a state diff does not apply to the given state
    ├── ActionParseError            text is not one action of the action space
    ├── EnvironmentCheckError       an environment breaks the Environment protocol
    ├── BackendError                a model, embedder or browser backend failed
    │   ├── EmbedderMismatchError   a store was indexed with another embedder
    │   └── ModelOutputError        a model's answer does not follow its template
    └── StoreError                  the replay store cannot do what was asked
        ├── StoreClosedError        the store was used after ``aclose()``
        ├── StoreLockedError        the store is open in this process, or written by another
        └── StoreFullError          the disk (not the map) is full; nothing was lost

A bad *agent* action is never an exception: environments report it as data in
the next observation's ``last_action_error``.  Third-party exceptions are
translated at the adapter boundary with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = [
    "ActionParseError",
    "BackendError",
    "ConfigError",
    "DiffApplyError",
    "DreamgymError",
    "EmbedderMismatchError",
    "EnvironmentCheckError",
    "ModelOutputError",
    "RecordFormatError",
    "SchemaVersionError",
    "StateFormatError",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
    "UsageError",
    "WorkerLostError",
]


class DreamgymError(Exception):
    """Base class of every error dreamgym raises on purpose."""


class ConfigError(DreamgymError, ValueError):
    """A setting is missing, out of range, or inconsistent with another one."""


class UsageError(ConfigError):
    """A command-line argument that cannot work, found before anything is opened (the CLI exits 2)."""


class RecordFormatError(DreamgymError, ValueError):
    """Stored bytes are not a record of the expected kind."""


class SchemaVersionError(RecordFormatError):
    """A record carries a schema version this dreamgym does not understand."""


class StateFormatError(DreamgymError, ValueError):
    """Text does not follow the abstract state grammar of ``core.state``."""


class DiffApplyError(StateFormatError):
    """A state diff does not match the state it is applied to."""


class ActionParseError(DreamgymError, ValueError):
    """Text is not exactly one action of ``core.actions``."""


class EnvironmentCheckError(DreamgymError):
    """An environment does not honour the Environment protocol."""


class BackendError(DreamgymError):
    """A backend (model server, embedder, browser) failed to do its work."""


class EmbedderMismatchError(BackendError, ConfigError):
    """A store's index was built by another embedder (or dimension)."""


class ModelOutputError(BackendError):
    """A model's answer cannot be parsed into what its prompt template asks for.

    The experience model retries such answers; when the retries run out the
    simulated step ends the episode as truncated with reason ``model_output``.
    """


class WorkerLostError(BackendError):
    """A rollout worker (a Ray actor hosting real environments) died mid-episode; the runtime ends the
    episode as truncated, ``worker_lost``, and the worker is replaced."""


class StoreError(DreamgymError):
    """The replay store cannot perform the requested operation."""


class StoreClosedError(StoreError):
    """The store was used after it was closed."""


class StoreLockedError(StoreError):
    """The store is already open in this process, or open for writing in another."""


class StoreFullError(StoreError):
    """The disk holding the store is full; the failed write committed nothing."""


class StorePathError(StoreError, UsageError):
    """The store's path cannot be a store: a file is there, there is none to read, or it cannot be
    created (a user's mistake: the command line exits 2)."""


class StoreCorruptError(StoreError):
    """The store's files are damaged: LMDB found a bad page, or a record failed its checksum.
    ``dreamgym replay check`` lists every damaged part."""
