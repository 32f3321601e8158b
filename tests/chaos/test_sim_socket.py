"""A simulated player's socket (bench/sim.py `Seat`) on the `websockets` library's client,
against an in-process WebSocket server speaking the table protocol (docs/reference/api.md):
the handshake carries the player's credential, frames reach the seat's view, an action goes
out as a text frame and its ack is matched by `ref`, and a socket the server drops answers the
action in flight `disconnected` and marks the seat for a reconnect."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import ServerConnection, serve

from bench.sim import GatewayClient, Player, Seat, SimError, Stats, TableDriver

PLAYER = Player("sk00000", "token-abc")
PARTNERS = tuple(Player(f"sk0000{i}", f"token-{i}") for i in range(1, 4))


def _view(seq: int, legal: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "seq": seq,
        "state": {"status": "live", "deal_id": "d1", "hands": [[6, 6]], "extra": {"x": 1}},
        "legal": legal,
    }


class TableServer:
    """Answers the first action with an ack, drops the socket on the second."""

    def __init__(self) -> None:
        self.received: list[str | bytes] = []
        self.authorization: list[str | None] = []
        self.paths: list[str] = []

    async def handler(self, ws: ServerConnection) -> None:
        if ws.request is None:
            raise RuntimeError("no handshake request")
        self.authorization.append(ws.request.headers.get("Authorization"))
        self.paths.append(ws.request.path)
        await ws.send(json.dumps({"type": "hello", "seat": 0, "seq": 3}))
        legal = [{"type": "play", "tile": [6, 6], "end": None}]
        await ws.send(json.dumps({"type": "snapshot", "seq": 3, "view": _view(3, legal)}))
        async for message in ws:
            self.received.append(message)
            frame = json.loads(message)
            if len([m for m in self.received if '"action"' in str(m)]) >= 2:
                await ws.close(1011, "gone")
                return
            if frame["type"] == "action":
                update = {"seq": 4, "events": [{"kind": "play"}], "view": _view(4, [])}
                await ws.send(
                    json.dumps({"type": "ack", "ref": frame["ref"], "seq": 4, "update": update})
                )


async def _wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_seat_plays_over_the_websockets_client():
    table = TableServer()
    async with serve(table.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = GatewayClient(f"http://127.0.0.1:{port}", timeout_s=5.0)
        stats = Stats()
        driver = TableDriver(0, (PLAYER, PARTNERS[0]), [client], stats, 1.0, {})
        driver.loop = asyncio.get_running_loop()
        seat = Seat(driver, PLAYER)
        try:
            await seat.connect("m-1", time.monotonic() + 10)
            assert isinstance(seat.ws, ClientConnection) and seat.connected
            await _wait_for(lambda: seat.view is not None)
            assert seat.seq == 3 and table.authorization == ["Bearer token-abc"]
            assert table.paths == ["/api/matches/m-1/ws"]
            action = seat.next_action()
            assert action == {"type": "play", "tile": [6, 6], "end": None}

            reply = await seat.act(action, 5.0)
            assert reply.type == "ack" and reply.seq == 4 and seat.seq == 4
            sent = json.loads(table.received[0])
            assert isinstance(table.received[0], str)  # a text frame
            assert sent["type"] == "action" and sent["seq"] == 3 and sent["ref"] == str(reply.ref)
            assert stats.frames == 3  # hello, snapshot, ack

            # The server drops the socket instead of answering: the action in flight is
            # answered `disconnected` and the seat is marked for a reconnect.
            reply = await seat.act(action, 5.0)
            assert reply.type == "error" and reply.error == "disconnected"
            await _wait_for(lambda: not seat.connected)
            assert seat.pending == {}
            reply = await seat.act(action, 5.0)  # refused at once, not sent
            assert reply.error == "disconnected" and len(table.received) == 2

            # A reconnect asks for what it missed.
            await seat.connect("m-1", time.monotonic() + 10)
            assert table.paths[-1] == "/api/matches/m-1/ws?after=4" and seat.connected
        finally:
            await seat.close()
            await client.aclose()
        assert seat.reader is not None and seat.reader.done() and not seat.connected


async def test_seat_gives_up_at_its_deadline_when_nothing_listens():
    client = GatewayClient("http://127.0.0.1:9", timeout_s=1.0)  # the discard port: refused
    driver = TableDriver(0, (PLAYER, PARTNERS[0]), [client], Stats(), 1.0, {})
    seat = Seat(driver, PLAYER)
    try:
        with pytest.raises(SimError, match="before the deadline"):
            await seat.connect("m-1", time.monotonic() + 0.5)
    finally:
        await client.aclose()
    assert driver.stats.reconnects >= 1 and seat.ws is None


def test_a_table_driver_seats_as_many_players_as_its_kind_has_seats():
    client = GatewayClient("http://127.0.0.1:9")
    four = (PLAYER, *PARTNERS)
    driver = TableDriver(0, four, [client], Stats(), 1.0, {}, kind="apuesta-parejas")
    assert driver.kind == "apuesta-parejas" and len(driver.players) == 4
    with pytest.raises(SimError, match="seats 4 players, not 2"):
        TableDriver(0, (PLAYER, PARTNERS[0]), [client], Stats(), 1.0, {}, kind="apuesta-parejas")
    with pytest.raises(SimError, match="seats 2 players, not 4"):
        TableDriver(0, four, [client], Stats(), 1.0, {})
    with pytest.raises(SimError, match="unknown table kind"):
        TableDriver(0, four, [client], Stats(), 1.0, {}, kind="parejas-of-five")
