"""structlog for every process: readable in a terminal, JSON with MESA_LOG_FORMAT=json.

The request id lives in structlog's context variables, so every log line written while a
request is handled carries it, and the internal HTTP client forwards it.
"""

from __future__ import annotations

import logging
import sys
import uuid
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, get_contextvars

REQUEST_ID_HEADER = "X-Request-ID"
_MAX_REQUEST_ID_CHARS = 128


def configure_logging(service: str, log_format: str = "console", level: str = "info") -> None:
    level_no = getattr(logging, level.upper(), logging.INFO)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if log_format == "json":
        processors.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    bind_contextvars(service=service)
    # Libraries that use stdlib logging (uvicorn, alembic) go to stderr at the same level.
    logging.basicConfig(level=max(level_no, logging.WARNING), stream=sys.stderr, force=True)


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger(**initial)


def new_request_id() -> str:
    return uuid.uuid4().hex


def clean_request_id(raw: str | None) -> str:
    """Accept a caller's request id if it is short and printable, else create one."""
    if raw and len(raw) <= _MAX_REQUEST_ID_CHARS and all(33 <= ord(c) < 127 for c in raw):
        return raw
    return new_request_id()


def current_request_id() -> str | None:
    value = get_contextvars().get("request_id")
    return value if isinstance(value, str) else None
