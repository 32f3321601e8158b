"""What a log line may carry: no credential, password or unrevealed seed at any level or in
either format, from structlog or from a library's stdlib logger, and nothing unbounded."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from structlog.contextvars import bind_contextvars, clear_contextvars, get_contextvars

from services.common.auth import header_value
from services.common.logging import MAX_LINE_CHARS, configure_logging

FORMATS = ["console", "json"]


class Secrets:
    def __init__(self) -> None:
        self.bearer = secrets.token_urlsafe(32)
        self.session = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(24)
        self.password = "correct horse battery staple"
        self.service = header_value(secrets.token_bytes(32), "gateway", "ledger")
        self.seed = secrets.token_bytes(32).hex()

    def values(self) -> dict[str, str]:
        # The service credential's MAC (its last part) is the secret part of the header.
        mac = self.service.rsplit(".", 1)[1]
        return {
            "bearer": self.bearer,
            "session": self.session,
            "csrf": self.csrf,
            "password": self.password,
            "password (a word of it)": "horse battery",
            "service token": mac,
            "seed": self.seed,
        }

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [
            (b"authorization", f"Bearer {self.bearer}".encode()),
            (b"cookie", f"mesa_session={self.session}; mesa_csrf={self.csrf}".encode()),
            (b"x-csrf-token", self.csrf.encode()),
        ]


@pytest.fixture
def capture() -> Iterator[Callable[[str, str], io.StringIO]]:
    """`capture(format, level)`: logging configured as `mesa serve` does, into a buffer; the
    process's own configuration is put back afterwards."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    context = get_contextvars()

    def configure(log_format: str, log_level: str) -> io.StringIO:
        buffer = io.StringIO()
        with contextlib.redirect_stderr(buffer):
            configure_logging("probe", log_format, log_level)
        return buffer

    yield configure
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
    clear_contextvars()
    bind_contextvars(**context)


def _assert_clean(text: str, found: Secrets) -> None:
    leaked = [name for name, value in found.values().items() if value in text]
    assert not leaked, f"{leaked} in the log:\n{text[:3000]}"


@pytest.mark.parametrize("log_format", FORMATS)
def test_secrets_are_redacted_by_key_and_by_pattern(capture, log_format):
    out = capture(log_format, "debug")
    s = Secrets()
    log = structlog.get_logger()  # a fresh logger: takes the configuration just made
    log.debug(
        "careless",
        headers=s.headers(),
        header_map={"Authorization": f"Bearer {s.bearer}", "Cookie": f"mesa_session={s.session}"},
        password=s.password,
        body={"username": "ana", "password": s.password},
        nested={"deeper": [{"csrf_token": s.csrf}, ("x-csrf-token", s.csrf)]},
        server_seed=s.seed,
        internal=s.service,
        detail=f"refused: Authorization: {s.service}; Cookie: mesa_session={s.session}",
        text=f"LoginRequest(username='ana', password='{s.password}') csrf={s.csrf}",
        raw=f"b'authorization', b'Bearer {s.bearer}'".encode(),
        opened=f"OpenedRound(deal_id='d1', server_seed='{s.seed}')",
        upstream=f"sent {s.service.split(' ', 1)[1]} to the ledger",  # a bare v2 token
    )
    log.info("careless_event_text", event_note=f"token={s.bearer} seed: {s.seed}")
    text = out.getvalue()
    assert "careless" in text and "[redacted]" in text
    _assert_clean(text, s)


def _fail_while_dealing(s: Secrets) -> None:
    server_seed = bytes.fromhex(s.seed)  # noqa: F841 (a local a traceback could show)
    request_headers = s.headers()  # noqa: F841
    raise RuntimeError("the deal failed")


@pytest.mark.parametrize("log_format", FORMATS)
def test_tracebacks_show_no_local_variables(capture, log_format):
    """An engine's `match_actor_failed` or the app's `unhandled_error` log a traceback whose
    frames hold the match's server seed or the request's headers."""
    out = capture(log_format, "info")
    s = Secrets()
    log = structlog.get_logger()
    try:
        _fail_while_dealing(s)
    except RuntimeError:
        log.exception("match_actor_failed", match_id="m-1")
    text = out.getvalue()
    assert "match_actor_failed" in text and "the deal failed" in text
    _assert_clean(text, s)


@pytest.mark.parametrize("log_format", FORMATS)
def test_stdlib_records_pass_the_same_redaction(capture, log_format):
    """uvicorn's and asyncio's own lines (an exception's text, a never-retrieved task)."""
    out = capture(log_format, "debug")
    s = Secrets()
    try:
        raise ValueError(f"bad header Authorization: Bearer {s.bearer}; password={s.password}")
    except ValueError:
        logging.getLogger("uvicorn.error").exception(
            "Exception in ASGI application, cookie %s", f"mesa_session={s.session}"
        )

    async def fails() -> None:
        raise RuntimeError(f"cookie: mesa_csrf={s.csrf}; {s.service}")

    async def leave_a_failed_task() -> None:
        task = asyncio.get_running_loop().create_task(fails())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        del task
        gc.collect()

    asyncio.run(leave_a_failed_task())
    text = out.getvalue()
    assert "Exception in ASGI application" in text
    assert "Task exception was never retrieved" in text
    _assert_clean(text, s)


@pytest.mark.parametrize("log_format", FORMATS)
def test_values_and_lines_are_bounded(capture, log_format):
    out = capture(log_format, "debug")
    log = structlog.get_logger()
    log.error("long_path", path="/" + "a" * 100_000, body=b"[" * 300_000)
    log.error("many_values", **{f"k{i}": "v" * 3000 for i in range(200)})
    deep: Any = "x"
    for _ in range(2000):
        deep = [deep]
    log.error("deep_value", deep=deep)
    try:
        raise RuntimeError("y" * 1_000_000)
    except RuntimeError:
        log.exception("huge_exception")
    logging.getLogger("uvicorn.error").error("z" * 1_000_000)
    text = out.getvalue()
    for name in ("long_path", "many_values", "deep_value", "huge_exception"):
        assert name in text
    lines = [line for line in text.split("\n") if line]
    # A console line's traceback follows on its own lines: each bounded the same.
    assert max(len(line) for line in lines) <= MAX_LINE_CHARS
    assert len(text) < 6 * MAX_LINE_CHARS


async def test_database_errors_carry_no_statement_parameters(database_url):
    """A failed statement's error (what a traceback shows) names no parameter value: the
    gateway's session rows hold CSRF tokens, the engine's match log unrevealed seeds."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from services.common.db import create_engine

    seed = secrets.token_bytes(32).hex()
    engine = create_engine(database_url, as_app_role=False)
    try:
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError) as failed:
                await conn.execute(text("SELECT CAST(:seed AS integer)"), {"seed": seed})
    finally:
        await engine.dispose()
    assert seed not in str(failed.value)


def test_a_secret_cut_by_a_bound_is_still_redacted(capture):
    """A long traceback keeps its head and its end: a secret where either is cut out is
    still recognised (its key is before the cut)."""
    out = capture("json", "info")
    log = structlog.get_logger()
    secret = secrets.token_hex(40)
    messages = [
        # the secret across the end of the head, then across the start of the tail
        *("x" * pad + f"password: '{secret}' " + "y" * 6000 for pad in range(850, 1250, 10)),
        *("x" * 3000 + f"password: '{secret}' " + "y" * end for end in range(3700, 3900, 10)),
    ]
    for message in messages:
        try:
            raise RuntimeError(message)
        except RuntimeError:
            log.exception("long_failure")
    text = out.getvalue()
    assert text.count("long_failure") == len(messages)
    for n in range(0, len(secret) - 8):
        assert secret[n : n + 8] not in text


@pytest.mark.parametrize("log_format", FORMATS)
def test_library_handlers_cannot_bypass_the_redaction(capture, log_format):
    """uvicorn's default log config gives its loggers their own handlers and no propagation;
    once the service's logging is configured, their lines still pass the redaction."""
    import logging.config

    import uvicorn.config

    logging.config.dictConfig(uvicorn.config.LOGGING_CONFIG)
    out = capture(log_format, "debug")
    s = Secrets()
    logging.getLogger("uvicorn.error").warning("header Authorization: Bearer %s", s.bearer)
    text = out.getvalue()
    assert "header Authorization" in text
    _assert_clean(text, s)
