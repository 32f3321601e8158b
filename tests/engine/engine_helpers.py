"""Scripted players and leak checks for the engine service tests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.keys import private_key_pem
from services.engine import runtime as RT
from services.engine.runtime import Match
from services.engine.service import Engine
from tests.service_auth import AS_DECLARED

TILE_KEYS = {"tiles", "hand", "revealed_hands", "revealed_stock", "stock", "hands"}


def write_key(path: Path) -> Path:
    path.write_bytes(private_key_pem(Ed25519PrivateKey.generate()))
    return path


def auth(secret: bytes) -> dict[str, str]:
    """Each request as the caller its route is for (the harness's client: `CallerByRoute`)."""
    return {"Authorization": AS_DECLARED}


def seed_of(seat: int, n: int) -> str:
    return f"seat{seat}-seed{n}"


def commitment(seed: str) -> str:
    return hashlib.sha256(seed.encode("ascii")).hexdigest()


def spec(
    match_id: str, variant: str, options: dict[str, Any], seats: int, **kw: Any
) -> dict[str, Any]:
    bots = kw.pop("bots", ())
    return {
        "match_id": match_id,
        "variant": variant,
        "options": options,
        "seats": [
            {"seat": s, "player_id": None if s in bots else f"p{s}", "bot": s in bots}
            for s in range(seats)
        ],
        **kw,
    }


async def create_dealt(
    hz: Any,
    headers: dict[str, str],
    match_id: str,
    variant: str = "apuesta",
    options: dict[str, Any] | None = None,
    seats: int = 2,
    **kw: Any,
) -> None:
    """Create a match (a 1v1 apuesta by default) and pass its seed-commit deadline: nobody
    commits, so it is dealt with empty seeds and every seat has a hand."""
    body = spec(match_id, variant, options or {"mode": "1v1"}, seats, **kw)
    await hz.client.post("/internal/matches", json=body, headers=headers)
    hz.clock.advance(RT.SEED_COMMIT_TIMEOUT_MS)


def _walk_tiles(obj: Any, out: list[str], key: str | None = None, path: str = "") -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _walk_tiles(v, out, k, f"{path}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            _walk_tiles(v, out, key, path)
    elif key in TILE_KEYS and obj is not None:
        out.append(f"{obj}@{path}")


def check_no_leak(
    engine: Engine, match_id: str, seat: int, message: dict[str, Any], text: str
) -> None:
    """The message to `seat` holds no other seat's tiles, stock or server seed mid-hand."""
    actor = engine.actors.get(match_id)
    if actor is None:
        return
    m: Match = actor.match
    rnd = m.round
    hand_open = m.hand is not None and m.hand.phase in ("play", "choose")
    if rnd is not None and (rnd.result is None or hand_open):
        if rnd.opened.server_seed.hex() in text:
            raise AssertionError(f"server seed leaked to seat {seat}")
    if not hand_open or m.hand is None:
        return
    from services.engine.rules.tiles import tiles_of
    from services.engine.runtime import tile_text

    mask = m.hand.setup.dealt[seat] | m.hand.hands[seat]
    own = {tile_text(t) for t in tiles_of(mask)}
    events = message.get("events")
    items = events if isinstance(events, list) else [message]
    current_deal = rnd.opened.deal_id if rnd is not None else None
    for item in items:
        kind = item.get("kind")
        data = item.get("data", item)
        if kind in ("hand_ended", "hand_void") and data.get("deal_id") != current_deal:
            continue  # an earlier hand, revealed after it ended
        found: list[str] = []
        _walk_tiles(data, found)
        for item_tile in found:
            t, _, where = item_tile.partition("@")
            if "-" in t and t not in own:
                raise AssertionError(
                    f"seat {seat} sees tile {t} it does not hold: {kind} at {where}"
                )


async def drive(
    client: Any,
    engine: Engine,
    match_id: str,
    headers: dict[str, str],
    *,
    max_requests: int = 20_000,
    leave: dict[int, int] | None = None,
    check: bool = True,
    rng: Any = None,
    watch_all_seats: bool = False,
) -> dict[str, Any]:
    """Play the match to its end with scripted players; return the state.

    Players take the first legal move, or a random one with `rng`. With `watch_all_seats`
    every seat's view and new events are checked for leaks after every action, not only the
    view of the seat on turn.
    """
    last_seen: dict[int, int] = {}
    leave = dict(leave or {})
    for _ in range(max_requests):
        st = (await client.get(f"/internal/matches/{match_id}", headers=headers)).json()
        if st["status"] in ("finished", "void"):
            return st
        d = st["deadline"]
        if d is None or not d["seats"]:
            raise AssertionError(f"match stuck: {st}")
        seat = d["seats"][0]
        r = await client.get(f"/internal/matches/{match_id}/seats/{seat}/view", headers=headers)
        snap = r.json()
        if check:
            check_no_leak(engine, match_id, seat, snap, r.text)
            ev = await client.get(
                f"/internal/matches/{match_id}/seats/{seat}/events",
                params={"after": last_seen.get(seat, 0)},
                headers=headers,
            )
            page = ev.json()
            check_no_leak(engine, match_id, seat, page, ev.text)
            last_seen[seat] = page["seq"]
        if check and watch_all_seats:
            for other in range(len(st["seats"])):
                if other == seat:
                    continue
                r = await client.get(
                    f"/internal/matches/{match_id}/seats/{other}/view", headers=headers
                )
                check_no_leak(engine, match_id, other, r.json(), r.text)
                ev = await client.get(
                    f"/internal/matches/{match_id}/seats/{other}/events",
                    params={"after": last_seen.get(other, 0)},
                    headers=headers,
                )
                page = ev.json()
                check_no_leak(engine, match_id, other, page, ev.text)
                last_seen[other] = page["seq"]
        legal = [a for a in snap["legal"] if a["type"] != "claim"]
        if not legal:
            raise AssertionError(f"seat {seat} has nothing to do: {snap}")
        a = legal[0] if rng is None else rng.choice(legal)
        n = snap["state"]["deal_id"] or ""
        if seat in leave and a["type"] == "play" and snap["state"]["hand_no"] >= leave[seat]:
            action: dict[str, Any] = {"type": "leave"}
            del leave[seat]
        elif a["type"] == "seed_commit":
            action = {"type": "seed_commit", "commitment": commitment(seed_of(seat, len(n)))}
        elif a["type"] == "seed_reveal":
            action = {"type": "seed_reveal", "seed": seed_of(seat, len(n))}
        elif a["type"] == "play":
            action = {"type": "play", "tile": a["tile"]}
            if a["end"] is not None:
                action["end"] = a["end"]
        elif a["type"] == "choose":
            action = {"type": "choose", "salgo": a["salgo"]}
        else:
            action = {"type": a["type"]}
        body = {"seat": seat, "seq": snap["seq"], "action": action}
        r = await client.post(f"/internal/matches/{match_id}/actions", json=body, headers=headers)
        if r.status_code != 200:
            raise AssertionError(f"{body} refused: {r.status_code} {r.text}")
    raise AssertionError("match did not finish")
