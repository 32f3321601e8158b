"""The error responses every public route documents in the OpenAPI description.

Every refusal is `{"error": code, "detail": text}` (`services.common.app.ErrorBody`); a route may
answer any of these (validation, sign-in, role, rate limits, a refusal passed on from an internal
service, or 503 when one cannot be reached), so each handler lists them all with that body.
"""

from __future__ import annotations

from litestar.openapi.datastructures import ResponseSpec

from services.common.app import ErrorBody

_READ_ERRORS: dict[int, str] = {
    400: "Invalid request: a malformed or out-of-range parameter or body (`invalid_request`, ...)",
    401: "Not signed in, or the session or token is invalid or expired (`unauthorized`, ...)",
    403: "Signed in, but this role or account may not do this (`forbidden`, `self_excluded`, ...)",
    404: "No such resource, or none that the caller may see (`not_found`, ...)",
    409: "Conflicts with the current state (`stale_seq`, `username_taken`, ...)",
    422: "Well formed, but refused by the rules of the service behind the route",
    429: "Too many requests or sign-in attempts (`rate_limited`)",
    503: "An internal service cannot be reached right now (`service_unavailable`)",
}
_WRITE_ERRORS: dict[int, str] = {
    **_READ_ERRORS,
    413: "The request body is larger than the gateway accepts (`body_too_large`)",
}


def _specs(descriptions: dict[int, str]) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(data_container=ErrorBody, description=text, generate_examples=False)
        for status, text in sorted(descriptions.items())
    }


# For GET routes.
READ_ERRORS: dict[int, ResponseSpec] = _specs(_READ_ERRORS)
# For POST and PATCH routes (they take a body).
WRITE_ERRORS: dict[int, ResponseSpec] = _specs(_WRITE_ERRORS)
