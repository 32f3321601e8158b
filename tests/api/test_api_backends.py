"""The gateway's view of matchmaking's catalogue: asked once, then kept for `KINDS_TTL_S`.

Every join asks what its kind and tier stake (the eligibility check, the partner check); the
catalogue is matchmaking's configuration, so asking matchmaking on every join was a second
internal call per seat for an answer that does not change."""

from __future__ import annotations

import httpx

import api.backends
from api.backends import KINDS_TTL_S, Backends
from tests.conftest import make_settings

CATALOGUE = {
    "kinds": [
        {
            "kind": "apuesta-1v1",
            "variant": "apuesta",
            "title": "Apuesta 1v1",
            "options": {},
            "seat_count": 2,
            "pairs": False,
            "tiers": [],
        }
    ],
    "currency": "USD",
}


async def test_the_catalogue_is_asked_once_per_ttl(internal_secret, monkeypatch):
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(200, json=CATALOGUE)

    clock = [1000.0]
    monkeypatch.setattr(api.backends.time, "monotonic", lambda: clock[0])
    settings = make_settings("postgresql://unused/unused", internal_secret)
    backends = Backends(settings, {"matchmaking": httpx.MockTransport(answer)})
    try:
        first = await backends.kinds()
        again = await backends.kinds()
        assert first.kinds[0].kind == "apuesta-1v1" and again is first
        assert asked == ["/v1/kinds"]
        clock[0] += KINDS_TTL_S
        await backends.kinds()
        assert asked == ["/v1/kinds", "/v1/kinds"]
    finally:
        await backends.aclose()
