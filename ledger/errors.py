"""Refusals raised by the ledger library, each with an HTTP-like status and a stable code."""

from __future__ import annotations


class LedgerError(Exception):
    """Nothing was posted. ``code`` is machine-readable (``insufficient_funds``, ...)."""

    def __init__(self, status: int, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.status = status
        self.code = code
        self.detail = detail or code


class LedgerUnavailable(LedgerError):
    """The database could not be reached after retries; the operation may be retried."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, "ledger_unavailable", detail)
