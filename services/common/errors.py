"""Errors that reach clients as a 4xx JSON body `{"error": code, "detail": text}`, with `refs`
when the refusal names the objects it is about (`{"reservations": ["r1"]}`): callers act on
`refs`, never on the words of `detail`."""

from __future__ import annotations


class ServiceError(Exception):
    """A refusal with an HTTP status and a machine-readable code; nothing was changed."""

    def __init__(
        self, status: int, code: str, detail: str = "", refs: dict[str, list[str]] | None = None
    ) -> None:
        super().__init__(detail or code)
        self.status = status
        self.code = code
        self.detail = detail or code
        self.refs = refs


def bad_request(code: str, detail: str = "") -> ServiceError:
    return ServiceError(400, code, detail)


def not_found(code: str, detail: str = "") -> ServiceError:
    return ServiceError(404, code, detail)


def conflict(code: str, detail: str = "") -> ServiceError:
    return ServiceError(409, code, detail)


def unprocessable(code: str, detail: str = "") -> ServiceError:
    return ServiceError(422, code, detail)
