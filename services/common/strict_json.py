"""Strict JSON bodies for Litestar routes: `"100"`, `1e2` and `100.0` are not the integer 100.

Litestar converts a decoded body to the handler's `data` type with msgspec's lax rules
(`strict=False`: numeric strings and integral floats become ints), so an amount sent as
`"100"` or `100.0` would be taken as 100 cents. Every service app runs `strict_json_body`
before its handlers: it decodes a JSON body against the handler's `data` type with msgspec's
strict rules and refuses a mismatch with 400 `invalid_request`, before anything runs. The
value it decoded is what the request's `json()` then answers (`decoded_body`), so the body is
decoded once: Litestar's conversion of a value already of the handler's type returns it as is.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request
from litestar.enums import RequestEncodingType
from litestar.params import BodyKwarg

from services.common.errors import ServiceError
from services.common.json_limits import check_json_depth

# The scope key under which the strictly decoded body waits for `Request.json()`.
DECODED_BODY_KEY = "mesa.decoded_body"

# Handler functions are few and fixed, so one decoder (or None: no JSON body) is kept per
# function (not per handler object: Litestar may copy those for each app).
_decoders: dict[Any, msgspec.json.Decoder[Any] | None] = {}
MAX_HANDLERS = 10_000


def _decoder_for(handler: Any) -> msgspec.json.Decoder[Any] | None:
    key = handler.fn
    if key in _decoders:
        return _decoders[key]
    decoder: msgspec.json.Decoder[Any] | None = None
    field = handler.parsed_fn_signature.parameters.get("data")
    if field is not None:
        kwarg = field.kwarg_definition
        media = kwarg.media_type if isinstance(kwarg, BodyKwarg) else RequestEncodingType.JSON
        if media == RequestEncodingType.JSON:
            try:
                decoder = msgspec.json.Decoder(field.annotation)
            except TypeError:  # not a type msgspec decodes by itself: Litestar's rules apply
                decoder = None
    if len(_decoders) < MAX_HANDLERS:
        _decoders[key] = decoder
    return decoder


async def strict_json_body(request: Request[Any, Any, Any]) -> None:
    """Litestar `before_request` hook: 400 when the JSON body does not fit `data` strictly."""
    decoder = _decoder_for(request.route_handler)
    if decoder is None:
        return
    body = await request.body()
    if not body:
        return
    check_json_depth(body)
    try:
        decoded = decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise ServiceError(400, "invalid_request", f"invalid request body: {exc}") from None
    except msgspec.DecodeError:
        return  # malformed JSON: Litestar's own parsing refuses it as it always has
    scope: Any = request.scope
    scope[DECODED_BODY_KEY] = decoded


def decoded_body(request: Request[Any, Any, Any]) -> tuple[bool, Any]:
    """(True, value) when `strict_json_body` already decoded this request's body."""
    scope: Any = request.scope
    if DECODED_BODY_KEY in scope:
        return True, scope[DECODED_BODY_KEY]
    return False, None
