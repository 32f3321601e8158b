"""structlog for every process: readable in a terminal, JSON with MESA_LOG_FORMAT=json.

The request id lives in structlog's context variables, so every log line written while a
request is handled carries it, and the internal HTTP client forwards it.

Every line, from structlog or from a library's stdlib logger (uvicorn, alembic, asyncio,
Litestar), passes through `redact_and_bound` before it is rendered: credentials, passwords
and unrevealed seeds are replaced by `[redacted]` (by key, and by pattern inside text such
as exception messages and tracebacks), and each value and the whole line are bounded in
size, so one hostile request cannot write megabytes of log. Tracebacks are plain text
without local variables: a frame's locals hold requests, headers and match state.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, get_contextvars

REQUEST_ID_HEADER = "X-Request-ID"
_MAX_REQUEST_ID_CHARS = 128

REDACTED = "[redacted]"
# Bounds on what one log line may carry (characters).
MAX_VALUE_CHARS = 2048
MAX_EXCEPTION_CHARS = 5120
MAX_LINE_CHARS = 8192
MAX_KEY_CHARS = 64
_SHORT_VALUE_CHARS = 120
# Containers in an event are cut to this many items and this depth.
MAX_ITEMS = 50
MAX_NESTING = 6

# Keys whose values are never written: a key containing any of these (case-insensitive).
_SECRET_KEY = re.compile(
    r"authorization|cookie|passw|token|csrf|secret|seed|session|credential|api[_-]?key|"
    r"private[_-]?key",
    re.IGNORECASE,
)
# The event's name and context: never redacted, never dropped, kept when a line is cut.
_SAFE_KEYS = frozenset({"event", "level", "timestamp", "service", "request_id", "logger"})

# Secrets inside text (messages, exception text, reprs of objects), each replaced in place.
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization schemes: the public API's bearer tokens, the services' credential.
    (re.compile(r"(?i)\b(bearer|mesaservice)(\s+)[^\s'\",;)}\]]+"), rf"\1\2{REDACTED}"),
    # A service token on its own: v1.<caller>.<expires ms>.<hex hmac>, or
    # v2.<caller>.<audience>.<expires ms>.<hex hmac> (services/common/auth.py).
    (re.compile(r"\bv1\.([a-z][a-z0-9_-]{0,31})\.\d+\.[0-9a-fA-F]+"), rf"v1.\1.{REDACTED}"),
    (
        re.compile(r"\bv2\.([a-z][a-z0-9_-]{0,31}\.[a-z][a-z0-9_-]{0,31})\.\d+\.[0-9a-fA-F]+"),
        rf"v2.\1.{REDACTED}",
    ),
    # The page's cookies wherever they appear (Cookie / Set-Cookie headers, reprs).
    (re.compile(r"(?i)\b(mesa_session|mesa_csrf|mesa_device)=[^\s;'\",)}\]]*"), rf"\1={REDACTED}"),
    # The password in a database URL.
    (re.compile(r"(://[^/\s:@'\"]+:)[^@\s/'\"]+@"), rf"\1{REDACTED}@"),
    # key=value, key: value, 'key': 'value', (b'key', b'value') where the key names a secret;
    # an unquoted value runs to the next delimiter (a password may have spaces), a quoted one
    # to its closing quote or the end of the text (cut short by a bound).
    (
        re.compile(
            r"""(?ix)
            ((?:authorization|cookie|passw(?:or)?d|token|csrf|secret|seed|mesa_session|mesa_device)[\w-]*)
            (['"]?\s*(?:[:=]|,)\s*b?)
            ('[^'\n]*(?:'|$)|"[^"\n]*(?:"|$)|[^'"\n,;)}\]]+)
            """
        ),
        rf"\1\2{REDACTED}",
    ),
)

# What every pattern above starts from: text without any of these (lowercased) is left as it
# is, after a few substring searches where the patterns would be five regular expressions.
_TRIGGERS = (
    "bearer",
    "mesaservice",
    "v1.",
    "v2.",
    "mesa_",
    "://",
    "authoriz",
    "cookie",
    "passw",
    "token",
    "csrf",
    "secret",
    "seed",
)


def redact_text(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """`text` with the secrets it may carry replaced, cut to `limit` characters. (Cut first
    to twice the limit, so a huge value costs no more than a small one; a secret split by
    that cut is still caught by its prefix.)"""
    if len(text) > 2 * limit:
        text = text[: 2 * limit]
        cut = True
    else:
        cut = False
    lowered = text.lower()
    if any(trigger in lowered for trigger in _TRIGGERS):
        for pattern, replacement in _TEXT_PATTERNS:
            text = pattern.sub(replacement, text)
    if len(text) > limit or cut:
        return f"{text[:limit]}…[truncated]"
    return text


# Text redacted on either side of a cut, so a secret the cut splits still has its key.
_CUT_CONTEXT_CHARS = 1024


def _redact_exception(text: str) -> str:
    """A traceback keeps its head and its tail (the error itself) within the bound; each part
    is redacted with some text around it before it is cut out."""
    if len(text) <= MAX_EXCEPTION_CHARS:
        return redact_text(text, MAX_EXCEPTION_CHARS)
    head = MAX_EXCEPTION_CHARS // 4
    tail = MAX_EXCEPTION_CHARS - head
    margin = _CUT_CONTEXT_CHARS
    head_text = redact_text(text[: head + margin], head + margin)[:head]
    tail_text = redact_text(text[-(tail + margin) :], tail + margin)[-tail:]
    return f"{head_text}\n…[traceback truncated]…\n{tail_text}"


_secret_keys: dict[str, bool] = {}
_MAX_REMEMBERED_KEYS = 4096


def _is_secret_key(key: str) -> bool:
    known = _secret_keys.get(key)
    if known is None:
        known = key not in _SAFE_KEYS and _SECRET_KEY.search(key) is not None
        if len(_secret_keys) >= _MAX_REMEMBERED_KEYS:
            _secret_keys.clear()
        _secret_keys[key] = known
    return known


def _clean(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return redact_text(bytes(value[: 2 * MAX_VALUE_CHARS]).decode("utf-8", "replace"))
    if isinstance(value, Mapping):
        if depth >= MAX_NESTING:
            return "[nested too deep]"
        return _clean_mapping(value, depth + 1)
    if isinstance(value, list | tuple | set | frozenset):
        if depth >= MAX_NESTING:
            return "[nested too deep]"
        items = []
        for n, item in enumerate(value):
            if n >= MAX_ITEMS:
                items.append(f"…[{len(value) - MAX_ITEMS} more]")
                break
            items.append(_clean(item, depth + 1))
        # A header list of (name, value) pairs: a secret header's value goes too.
        if len(items) == 2 and isinstance(items[0], str) and _is_secret_key(items[0]):
            items[1] = REDACTED
        return items
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return redact_text(text)


def _clean_mapping(mapping: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    taken = 0
    for raw_key, value in mapping.items():
        key = raw_key if isinstance(raw_key, str) else str(_clean(raw_key, MAX_NESTING))
        key = key[:MAX_KEY_CHARS]
        if key in _SAFE_KEYS:  # the event's name and context: always kept
            out[key] = _clean(value, depth)
            continue
        taken += 1
        if taken > MAX_ITEMS:
            out["…"] = "[more keys dropped]"
            continue
        out[key] = REDACTED if _is_secret_key(key) else _clean(value, depth)
    return out


def redact_and_bound(_logger: Any, _method: str, event_dict: Any) -> Any:
    """The one processor every log line passes: secrets out, sizes bounded (module doc)."""
    exception = event_dict.pop("exception", None)
    out = _clean_mapping(event_dict, 0)
    if exception is not None:
        out["exception"] = _redact_exception(str(exception))
    return out


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _SHORT_VALUE_CHARS:
        return f"{value[:_SHORT_VALUE_CHARS]}…[truncated]"
    if isinstance(value, list | dict):
        text = repr(value)
        return text if len(text) <= _SHORT_VALUE_CHARS else f"{text[:_SHORT_VALUE_CHARS]}…"
    return value


def _bounded(renderer: Callable[[Any, str, Any], Any]) -> Callable[[Any, str, Any], Any]:
    """`renderer`, but a line longer than `MAX_LINE_CHARS` is rendered again with only the
    event's name, its context and the end of its traceback (every value already bounded)."""

    def render(logger: Any, method: str, event_dict: Any) -> Any:
        kept = {**event_dict}  # the renderer may consume its event dict
        line = renderer(logger, method, event_dict)
        if len(line) <= MAX_LINE_CHARS:
            return line
        # Each value cut shorter first; if that is not enough, the event's context alone.
        shorter = {k: v if k == "exception" else _shorten(v) for k, v in kept.items()}
        line = renderer(logger, method, {**shorter, "line_truncated": len(line)})
        if len(line) <= MAX_LINE_CHARS:
            return line
        small = {k: kept[k] for k in _SAFE_KEYS if k in kept}
        small["event"] = str(small.get("event", ""))[:512]
        small["line_truncated"] = len(line)
        if "exception" in kept:
            small["exception"] = "…" + str(kept["exception"])[-(MAX_LINE_CHARS // 2) :]
        return renderer(logger, method, small)

    return render


def configure_logging(service: str, log_format: str = "console", level: str = "info") -> None:
    level_no = getattr(logging, level.upper(), logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # exc_info as plain text (no local variables), so the redaction sees it as text.
        structlog.processors.format_exc_info,
        redact_and_bound,
    ]
    renderer: Any
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    render = _bounded(renderer)
    structlog.configure(
        processors=[*shared, render],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    bind_contextvars(service=service)
    # Libraries that use stdlib logging (uvicorn, alembic, asyncio, Litestar) go to stderr at
    # the same level (at least WARNING), through the same processors as structlog's lines.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared[:-1]],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                redact_and_bound,
                render,
            ],
        )
    )
    logging.basicConfig(level=max(level_no, logging.WARNING), handlers=[handler], force=True)
    # A library that set up handlers of its own (uvicorn's default log config gives its loggers
    # their own handlers and stops propagation) would write past the redaction: every logger
    # hands its records to the root's one handler instead.
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger):
            logger.handlers.clear()
            logger.propagate = True


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger(**initial)


class _RequestIds:
    """Random request ids, 32 hex digits (as a UUID's), read from the kernel 512 at a time:
    `uuid.uuid4()` made one system call and one object per request, 3.5% of the ledger
    service's profile samples (py-spy) at 5,500 requests a second. A forked process starts a
    fresh supply, so no two processes share ids."""

    BATCH = 512

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._hex = ""
        self._at = 0

    def next(self) -> str:
        at = self._at
        if at >= len(self._hex):
            self._hex = os.urandom(16 * self.BATCH).hex()
            at = 0
        self._at = at + 32
        return self._hex[at : at + 32]


_request_ids = _RequestIds()
os.register_at_fork(after_in_child=_request_ids.reset)


def new_request_id() -> str:
    return _request_ids.next()


def clean_request_id(raw: str | None) -> str:
    """Accept a caller's request id if it is short and printable, else create one."""
    if raw and len(raw) <= _MAX_REQUEST_ID_CHARS and all(33 <= ord(c) < 127 for c in raw):
        return raw
    return new_request_id()


def current_request_id() -> str | None:
    value = get_contextvars().get("request_id")
    return value if isinstance(value, str) else None
