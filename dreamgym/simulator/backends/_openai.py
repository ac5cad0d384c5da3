"""A :class:`~dreamgym.core.protocols.TextBackend` for OpenAI-compatible chat servers.

OpenAI itself, vLLM, SGLang, llama.cpp's server, TGI and ``transformers serve``
all speak ``POST /v1/chat/completions``. The ``openai`` client's own retries
are turned off: this module retries by its own, documented rules, so what a
failing server costs (attempts, waits, the final error) is defined and tested.

Servers differ in what they honour (see ``docs/guides/served-models.md`` and
:func:`~dreamgym.simulator.backends.check_server`). One difference is mended
here: ``transformers serve`` stops at a stop string but keeps it in the
answer, where OpenAI's API leaves it out; answers are cut at their first stop
string, so every server answers as the in-process backend does.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from dreamgym.core.errors import BackendError, ConfigError
from dreamgym.core.protocols import ChatMessage, Completion, Sampling

if TYPE_CHECKING:
    from openai import APIStatusError
    from openai.types.chat import ChatCompletion

__all__ = ["OpenAIBackend"]

log = logging.getLogger(__name__)

MAX_STOP_STRINGS = 4
"""The OpenAI API accepts at most this many stop strings per request."""

_MAX_BACKOFF_S = 8.0
_MAX_RETRY_AFTER_S = 60.0
_CLOSE_GRACE_S = 5.0

_FIXES = {
    400: "the server rejected the request; its message says why (often a prompt past the model's context)",
    401: "check api_key (or OPENAI_API_KEY)",
    403: "check that api_key may use this model",
    404: "check the model name and that base_url ends in /v1",
    413: "the prompt is too large for the server; shorten it",
    422: "the server rejected a parameter; check the sampling settings and extra_body",
}


_MAX_MESSAGE_CHARS = 500


def _server_message(exc: APIStatusError) -> str:
    """What the server said, whatever shape its error body has (OpenAI's, FastAPI's ``detail``, plain text)."""
    body: Any = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            inner = inner.get("message") or inner.get("detail") or inner
        body = inner
    if body is None or body == "":
        body = exc.response.text.strip() or exc.message
    text = body if isinstance(body, str) else json.dumps(body)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 1] + "…"


class _TransientError(Exception):
    """One failed attempt that a later one may fix (rate limit, 5xx, timeout, lost connection)."""

    def __init__(self, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class OpenAIBackend:
    """A chat model behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Every attempt waits for a slot of a :class:`anyio.CapacityLimiter`
    (``max_concurrency`` requests in flight at once) and then has ``timeout_s``
    seconds to be answered; queueing for a slot does not count against it.
    Rate limits (429), request timeouts (408), server errors (5xx), timeouts
    and lost connections are retried up to ``max_retries`` times, waiting
    ``backoff_s * 2**(attempt - 1)`` seconds (capped at 8 s, with jitter that
    takes off up to half), or what a ``Retry-After`` header asks for (capped at
    60 s). Any other 4xx fails at once: sending it again cannot help.

    ``backend_id`` is ``openai:{model}@{host}`` (``host:port`` when the URL has
    a port). It keys the call cache and is recorded on every synthetic step, so
    it names the model; which weights the server loads under that name is the
    server's business: restart a server with other weights under the same
    name and cached answers will be reused as if nothing changed, so give such
    weights another name.

    Args:
        model: The model name the server knows.
        base_url: The server's ``/v1`` URL; ``None`` means OpenAI (or the
            ``OPENAI_BASE_URL`` environment variable, as the ``openai`` client reads it).
        api_key: The key. Local servers usually accept anything (``"EMPTY"``).
            With ``base_url=None`` and the key left at ``"EMPTY"``, the key is
            read from the ``OPENAI_API_KEY`` environment variable.
        max_concurrency: Requests in flight at once.
        timeout_s: Seconds each attempt may take, enforced at the call site and
            by the client.
        max_retries: Further attempts after the first fails transiently.
        backoff_s: The first wait between attempts (doubled for each further one).
        extra_body: Extra JSON fields for every request (e.g. vLLM's ``top_k``).
        cut_at_stop: Cut each answer at its first stop string (for servers that keep it);
            :func:`~dreamgym.simulator.backends.check_server` turns it off to see what the server does.

    Raises:
        ConfigError: A setting is out of range, or OpenAI is addressed without a key.

    Example:
        >>> backend = OpenAIBackend(model="Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1")
        >>> answer = await backend.complete([ChatMessage(role="user", content="Hi")], Sampling(max_new_tokens=16))
        >>> await backend.aclose()
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str = "EMPTY",
        max_concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        extra_body: Mapping[str, Any] | None = None,
        cut_at_stop: bool = True,
    ) -> None:
        from openai import AsyncOpenAI

        _check_settings(model, max_concurrency, timeout_s, max_retries, backoff_s)
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.extra_body = dict(extra_body or {})
        self.cut_at_stop = cut_at_stop
        self._client = AsyncOpenAI(
            base_url=base_url,
            api_key=_resolve_key(api_key, base_url),
            timeout=timeout_s,
            max_retries=0,
        )
        self.base_url = str(self._client.base_url)
        url = self._client.base_url
        self.backend_id = f"openai:{model}@{url.host}" + (f":{url.port}" if url.port else "")
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._jitter = random.Random()
        self._closed = False

    async def complete(self, messages: Sequence[ChatMessage], sampling: Sampling) -> Completion:
        """Answer one chat prompt, retrying transient failures.

        Raises:
            ConfigError: ``sampling.stop`` holds more than four strings.
            BackendError: A non-retryable status (400, 401, 404, ...), an answer
                without text, or the retries ran out; the message names the
                server, the model, the attempts and the last error.
        """
        request = self._request(messages, sampling)
        if self._closed:
            raise BackendError(f"{self.backend_id} was used after aclose(); create a new backend")
        attempt = 0
        while True:
            attempt += 1
            try:
                completion = await self._attempt(request)
            except _TransientError as failure:
                if attempt > self.max_retries:
                    raise BackendError(
                        f"chat request to {self.base_url} for model {self.model!r} failed after "
                        f"{attempt} attempts; last error: {failure.reason}"
                    ) from failure.__cause__
                delay = self._delay(attempt, failure.retry_after_s)
                log.warning(
                    "%s: attempt %d failed (%s); retrying in %.2f s", self.backend_id, attempt, failure.reason, delay
                )
                await anyio.sleep(delay)
                continue
            if self.cut_at_stop and sampling.stop:
                completion = replace(completion, text=_cut_at_stop(completion.text, sampling.stop))
            return completion

    async def aclose(self) -> None:
        """Close the HTTP client; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        with anyio.move_on_after(_CLOSE_GRACE_S, shield=True):
            await self._client.close()

    def _request(self, messages: Sequence[ChatMessage], sampling: Sampling) -> dict[str, Any]:
        if len(sampling.stop) > MAX_STOP_STRINGS:
            raise ConfigError(
                f"OpenAI-compatible servers take at most {MAX_STOP_STRINGS} stop strings, got "
                f"{len(sampling.stop)}; cut the stop strings down or cut the answer afterwards"
            )
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if sampling.stop:
            request["stop"] = list(sampling.stop)
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request

    async def _attempt(self, request: dict[str, Any]) -> Completion:
        import openai

        async with self._limiter:
            try:
                with anyio.fail_after(self.timeout_s):
                    response = await self._client.chat.completions.create(**request)
            except TimeoutError as exc:
                raise _TransientError(f"no answer within {self.timeout_s:g} s") from exc
            except openai.APIStatusError as exc:
                raise self._status_error(exc) from exc
            except openai.APIConnectionError as exc:  # includes the client's own timeout
                raise _TransientError(f"{type(exc).__name__}: {exc}") from exc
            except openai.OpenAIError as exc:
                raise BackendError(
                    f"chat request to {self.base_url} for model {self.model!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
        return self._completion(response)

    def _status_error(self, exc: APIStatusError) -> Exception:
        status = exc.status_code
        reason = f"HTTP {status}: {_server_message(exc)}"
        if status in (408, 429) or status >= 500:
            return _TransientError(reason, retry_after_s=_retry_after_s(exc.response.headers))
        fix = _FIXES.get(status, "the server refused the request; see its message")
        return BackendError(f"chat request to {self.base_url} for model {self.model!r} failed with {reason} ({fix})")

    def _completion(self, response: ChatCompletion) -> Completion:
        if not response.choices:
            raise BackendError(f"{self.backend_id} answered without choices; the server is not OpenAI-compatible")
        choice = response.choices[0]
        if choice.message.content is None:
            raise BackendError(
                f"{self.backend_id} answered with no text (finish_reason {choice.finish_reason!r}); "
                "tool calls and refusals are not supported"
            )
        usage = response.usage
        return Completion(
            text=choice.message.content,
            finish_reason="length" if choice.finish_reason == "length" else "stop",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return retry_after_s
        base = min(_MAX_BACKOFF_S, self.backoff_s * 2.0 ** (attempt - 1))
        return base * self._jitter.uniform(0.5, 1.0)


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to its first stop string (all of it when none occurs)."""
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    return text if cut < 0 else text[:cut]


def _check_settings(model: str, max_concurrency: int, timeout_s: float, max_retries: int, backoff_s: float) -> None:
    if not model:
        raise ConfigError("OpenAIBackend needs a model name (the name the server serves it under)")
    if max_concurrency < 1:
        raise ConfigError(f"OpenAIBackend max_concurrency must be >= 1, got {max_concurrency}")
    if not timeout_s > 0:
        raise ConfigError(f"OpenAIBackend timeout_s must be > 0, got {timeout_s}")
    if max_retries < 0:
        raise ConfigError(f"OpenAIBackend max_retries must be >= 0, got {max_retries}")
    if backoff_s < 0:
        raise ConfigError(f"OpenAIBackend backoff_s must be >= 0, got {backoff_s}")


def _resolve_key(api_key: str, base_url: str | None) -> str:
    """The key to send: OpenAI itself (no ``base_url``) gets ``OPENAI_API_KEY`` unless one was given."""
    if base_url is not None or api_key != "EMPTY":
        return api_key
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        raise ConfigError(
            "OpenAIBackend without base_url talks to OpenAI and needs a key: set OPENAI_API_KEY or pass api_key"
        )
    return key


def _retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a ``Retry-After`` (or ``retry-after-ms``) header asks for, capped; ``None`` without one."""
    if (millis := headers.get("retry-after-ms")) is not None:
        seconds = _to_float(millis)
        seconds = None if seconds is None else seconds / 1000
    elif (value := headers.get("retry-after")) is not None:
        seconds = _to_float(value)
        if seconds is None:
            seconds = _seconds_until(value)
    else:
        return None
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_S)


def _to_float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _seconds_until(http_date: str) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    return float(when.timestamp()) - time.time()
