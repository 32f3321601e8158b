"""A batch's settlements and holds are posted by one statement each (migration 0008). They
must give exactly what the same operations give one at a time, in batch order: the same
results, refusals, balances after and versions after. And the statement must really be taken:
its entries are written by one statement, so they carry one transaction id, while operations
run one at a time each get their own subtransaction."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ledger_helpers import key, superuser

from ledger.batch import GroupCommit, batch_args
from ledger.ops import Ledger, Seat, Winner

_BATCH = (
    "SELECT answer, refusal_sqlstate, refusal, refusal_detail "
    "FROM ledger.post_batch($1::text[], $2::text[])"
)


class Answer(NamedTuple):
    """One operation's row of a batch: its answer, or its refusal."""

    answer: str | None
    sqlstate: str | None
    refusal: str | None
    detail: str | None

    @property
    def refused(self) -> bool:
        return self.sqlstate is not None


_worlds = itertools.count()
Call = tuple[str, tuple[Any, ...]]


async def _batch(ledger: Ledger, calls: list[Call]) -> list[Answer]:
    async with ledger.pool.acquire() as conn:
        rows = await conn.fetch(
            _BATCH, [op for op, _ in calls], [batch_args(args) for _, args in calls]
        )
    return [Answer(*row) for row in rows]


async def _one_at_a_time(ledger: Ledger, calls: list[Call]) -> list[Answer]:
    """Each operation alone, in order: a batch of one runs the one-at-a-time path."""
    return [(await _batch(ledger, [call]))[0] for call in calls]


def _normal(answer: Answer, world: str) -> Any:
    """An answer with what differs between two worlds taken out: their names, entry ids and
    times, and the house's commission shard (chosen by the match id, shared by both)."""
    if answer.refused:
        detail = (answer.detail or "").replace(world, "W")
        return ("refused", answer.sqlstate, answer.refusal, detail)
    assert answer.answer is not None
    doc = json.loads(answer.answer.replace(world, "W"))
    doc.pop("entry_id")
    doc.pop("created_at")
    for posting in doc["postings"]:
        if posting["account"].startswith("house:commission:"):
            posting.update(account="house", balance_after=None, version_after=None)
    return doc


async def _xmins(url: str, keys: list[str]) -> dict[str, int]:
    admin = await superuser(url)
    try:
        rows = await admin.fetch(
            "SELECT idempotency_key, xmin::text::bigint AS x FROM ledger.entries "
            "WHERE idempotency_key = ANY($1::text[])",
            keys,
        )
    finally:
        await admin.close()
    return {r["idempotency_key"]: r["x"] for r in rows}


def _in_two_worlds(
    url: str,
    setup: Callable[[Ledger, str], Awaitable[list[Call]]],
) -> None:
    """Build the same books twice under different names, post the calls as one batch in the
    first and one at a time in the second, and require the same answers."""

    async def run() -> None:
        ledger = await Ledger.connect(url, min_size=1, max_size=2)
        try:
            n = next(_worlds)
            together, alone = f"bsa{n}x", f"bsb{n}x"
            calls_a = await setup(ledger, together)
            calls_b = await setup(ledger, alone)
            answers = await _batch(ledger, calls_a)
            got = [_normal(a, together) for a in answers]
            want = [_normal(a, alone) for a in await _one_at_a_time(ledger, calls_b)]
            assert got == want
            if not any(a.refused or json.loads(a.answer or "")["replayed"] for a in answers):
                # every operation posted: one statement posted them all, in one go
                event("one statement")
                keys = [args[0] for _, args in calls_a]
                assert len(set((await _xmins(url, keys)).values())) == 1
        finally:
            await ledger.close()

    asyncio.run(run())


_settings = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@st.composite
def _settlement_books(draw: st.DrawFn) -> dict[str, Any]:
    """Matches, and a batch settling each of some of them once (any winners, shares and
    rate), and now and then an operation the statement cannot take (which sends the whole
    batch one at a time): a match settled twice, one never started, a winner who did not
    play, a rate out of range, a key used twice."""
    players = draw(st.integers(min_value=2, max_value=5))
    matches = []
    for _ in range(draw(st.integers(min_value=2, max_value=6))):
        seated = draw(
            st.lists(st.integers(0, players - 1), min_size=2, max_size=min(4, players), unique=True)
        )
        stakes = draw(st.lists(st.integers(1, 500), min_size=len(seated), max_size=len(seated)))
        matches.append({"seated": seated, "stakes": stakes})
    order = draw(st.permutations(range(len(matches))))
    settled = order[: draw(st.integers(min_value=2, max_value=len(matches)))]
    settlements: list[dict[str, Any]] = []
    for m in settled:
        pool = matches[m]["seated"]
        winners = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
        shares = draw(st.lists(st.integers(1, 3), min_size=len(winners), max_size=len(winners)))
        rate = draw(st.sampled_from([0, 1000, 10_000]) | st.integers(0, 10_000))
        settlements.append({"match": m, "winners": winners, "shares": shares, "rate": rate,
                            "key": len(settlements)})  # fmt: skip
    spoiler = draw(st.sampled_from(["none", "none", "twice", "unknown", "outsider", "rate", "key"]))
    if spoiler != "none":
        s = dict(draw(st.sampled_from(settlements)))
        s["key"] = len(settlements)
        if spoiler == "unknown":
            s["match"] = len(matches)  # never started
        elif spoiler == "outsider":
            s["winners"] = [*s["winners"], players]  # a player of no match at all
            s["shares"] = [*s["shares"], 1]
        elif spoiler == "rate":
            s["rate"] = 10_001
        elif spoiler == "key":
            s["key"] = draw(st.integers(0, len(settlements) - 1))
        settlements.insert(draw(st.integers(0, len(settlements))), s)
    return {"players": players, "matches": matches, "settlements": settlements}


@_settings
@given(books=_settlement_books())
def test_settlements_together_are_the_settlements_one_at_a_time(
    url: str, books: dict[str, Any]
) -> None:
    async def setup(ledger: Ledger, world: str) -> list[Call]:
        players = [f"{world}p{i}" for i in range(books["players"] + 1)]
        for p in players[:-1]:
            await ledger.open_wallet(p)
            await ledger.deposit(f"{world}-fund-{p}", p, 10_000)
        for m, match in enumerate(books["matches"]):
            seats = []
            for seat, (i, stake) in enumerate(zip(match["seated"], match["stakes"], strict=True)):
                reservation = f"{world}m{m}-r{seat}"
                await ledger.hold(f"{world}-h{m}-{seat}", players[i], reservation, stake)
                seats.append(Seat(seat, players[i], reservation))
            await ledger.start_match(f"{world}-s{m}", f"{world}m{m}", "bronze", "casa", seats)
        calls: list[Call] = []
        for s in books["settlements"]:
            winners = [
                Winner(players[i], shares)
                for i, shares in zip(s["winners"], s["shares"], strict=True)
            ]
            args = ledger.settle_args(
                f"{world}-c{s['key']}", f"{world}m{s['match']}", winners, s["rate"]
            )
            calls.append(("settle", args))
        return calls

    _in_two_worlds(url, setup)


@st.composite
def _hold_books(draw: st.DrawFn) -> dict[str, Any]:
    """Funded wallets and a batch of holds on them (several on one wallet, as it can pay),
    and now and then holds the statement cannot take: more than a wallet holds, an amount of
    zero, a player without a wallet, another currency, a reservation held twice, a request
    sent twice, a key used for another request."""
    players = draw(st.integers(min_value=1, max_value=4))
    funds = draw(st.lists(st.integers(500, 2000), min_size=players, max_size=players))
    holds = []
    for k in range(draw(st.integers(min_value=2, max_value=10))):
        holds.append(
            {
                "player": draw(st.integers(0, players - 1)),
                "amount": draw(st.integers(1, 250)),
                "reservation": k,
                "key": "new",
                "currency": "USD",
            }
        )
    spoiler = draw(
        st.sampled_from(
            ["none", "none", "none", "broke", "zero", "nobody", "currency", "reservation",
             "same", "same_other"]
        )
    )  # fmt: skip
    if spoiler != "none":
        k = draw(st.integers(1, len(holds) - 1))
        h = holds[k]
        if spoiler == "broke":
            h["amount"] = 2001
        elif spoiler == "zero":
            h["amount"] = 0
        elif spoiler == "nobody":
            h["player"] = players  # no wallet
        elif spoiler == "currency":
            h["currency"] = "EUR"
        elif spoiler == "reservation":
            h["reservation"] = draw(st.integers(0, k - 1))
        else:
            h["key"] = spoiler
    return {"funds": funds, "holds": holds}


@_settings
@given(books=_hold_books())
def test_holds_together_are_the_holds_one_at_a_time(url: str, books: dict[str, Any]) -> None:
    async def setup(ledger: Ledger, world: str) -> list[Call]:
        players = [f"{world}p{i}" for i in range(len(books["funds"]) + 1)]
        for p, cents in zip(players[:-1], books["funds"], strict=True):  # the last: no wallet
            await ledger.open_wallet(p)
            await ledger.deposit(f"{world}-fund-{p}", p, cents)
        calls: list[Call] = []
        for k, h in enumerate(books["holds"]):
            reservation = f"{world}r{h['reservation']}"
            if h["key"] == "new" or k == 0:
                args = ledger.hold_args(
                    f"{world}-k{k}", players[h["player"]], reservation, h["amount"],
                    h["currency"], "t1",
                )  # fmt: skip
            elif h["key"] == "same":
                args = calls[k - 1][1]  # the same request again: replayed
            else:
                previous = calls[k - 1][1]
                args = ledger.hold_args(
                    previous[0], players[h["player"]], reservation, h["amount"] + 1,
                    h["currency"], "t1",
                )  # fmt: skip  # the same key for another request: refused
            calls.append(("hold", args))
        return calls

    _in_two_worlds(url, setup)


async def _two_seat_match(ledger: Ledger, match: str, a: str, b: str, stake: int) -> None:
    await ledger.hold(key(), a, f"{match}-a", stake)
    await ledger.hold(key(), b, f"{match}-b", stake)
    await ledger.start_match(
        key(), match, "bronze", "casa", [Seat(0, a, f"{match}-a"), Seat(1, b, f"{match}-b")]
    )


async def test_a_batch_of_settlements_is_one_statement(ledger: Ledger, url: str) -> None:
    for p in ("bs1_a", "bs1_b", "bs1_c"):
        await ledger.open_wallet(p)
        await ledger.deposit(key(), p, 1000)
    for m in range(4):
        await _two_seat_match(ledger, f"bs1-m{m}", "bs1_a", ("bs1_b", "bs1_c")[m % 2], 100)
    keys = [key() for _ in range(4)]
    calls = [
        ("settle", ledger.settle_args(keys[m], f"bs1-m{m}", [Winner("bs1_a")], 1000))
        for m in range(4)
    ]
    answers = await _batch(ledger, calls)
    docs = [json.loads(a.answer or "") for a in answers]
    assert [d["payouts"] for d in docs] == [[{"player": "bs1_a", "amount": 180}]] * 4
    # one wallet paid four times in one statement: its versions and balances follow on
    after = [
        p["balance_after"] for d in docs for p in d["postings"] if p["account"] == "wallet:bs1_a"
    ]
    assert after == [780, 960, 1140, 1320]
    assert [d["entry_id"] for d in docs] == sorted(d["entry_id"] for d in docs)
    assert len(set((await _xmins(url, keys)).values())) == 1


async def test_holds_and_settlements_in_a_mixed_batch(ledger: Ledger, url: str) -> None:
    for p in ("bs2_a", "bs2_b"):
        await ledger.open_wallet(p)
        await ledger.deposit(key(), p, 1000)
    for m in range(3):
        await _two_seat_match(ledger, f"bs2-m{m}", "bs2_a", "bs2_b", 100)
    await ledger.hold(key(), "bs2_b", "bs2-held", 50)
    settle_keys = [key(), key()]
    hold_keys = [key(), key()]
    calls: list[Call] = [
        ("settle", ledger.settle_args(settle_keys[0], "bs2-m0", [Winner("bs2_a")], 1000)),
        ("hold", ledger.hold_args(hold_keys[0], "bs2_a", "bs2-r1", 10, "USD", "t")),
        ("release", ledger.release_args(key(), "bs2-held")),
        ("settle", ledger.settle_args(settle_keys[1], "bs2-m1", [Winner("bs2_b")], 1000)),
        ("void", ledger.void_args(key(), "bs2-m2", "table closed")),
        ("hold", ledger.hold_args(hold_keys[1], "bs2_b", "bs2-r2", 20, "USD", "t")),
        ("settle", ledger.settle_args(key(), "bs2-m0", [Winner("bs2_b")], 1000)),
    ]
    answers = await _batch(ledger, calls)
    assert [a.refused for a in answers] == [False] * 6 + [True]
    assert answers[6].refusal == "match_already_settled"
    xmins = await _xmins(url, settle_keys + hold_keys)
    # each kind's statement wrote its entries at once; the release and void ran alone
    assert xmins[settle_keys[0]] == xmins[settle_keys[1]]
    assert xmins[hold_keys[0]] == xmins[hold_keys[1]]
    assert xmins[settle_keys[0]] != xmins[hold_keys[0]]
    wallets = {
        p: await ledger.account(f"wallet:{p}") for p in ("bs2_a", "bs2_b")
    }  # 1000 - 3 stakes of 100; a: +180 - 10, b: +180 + 50 back - 20; the void: +100 each
    assert {p: int(w["balance"]) for p, w in wallets.items() if w} == {
        "bs2_a": 700 + 180 - 10 + 100,
        "bs2_b": 700 - 50 + 180 + 50 - 20 + 100,
    }


async def test_a_failed_statement_leaves_the_operations_to_run_one_at_a_time(
    ledger: Ledger, url: str
) -> None:
    for p in ("bs3_a", "bs3_b"):
        await ledger.open_wallet(p)
        await ledger.deposit(key(), p, 1000)
    for m in range(2):
        await _two_seat_match(ledger, f"bs3-m{m}", "bs3_a", "bs3_b", 100)
    keys = [key(), key()]
    calls = [
        ("settle", ledger.settle_args(keys[m], f"bs3-m{m}", [Winner("bs3_a")], 1000))
        for m in range(2)
    ]
    ops = [op for op, _ in calls] + ["settle"]
    # a request hash that is not hex: the statement fails as it reads it
    bad = json.dumps([key(), "zz", "bs3-m1", ["bs3_a"], [1], 1000])
    args = [batch_args(a) for _, a in calls] + [bad]
    async with ledger.pool.acquire() as conn:
        answers = [Answer(*row) for row in await conn.fetch(_BATCH, ops, args)]
    assert [a.refused for a in answers] == [False, False, True]
    assert "hexadecimal" in (answers[2].refusal or "")
    xmins = await _xmins(url, keys)
    assert xmins[keys[0]] != xmins[keys[1]]  # one at a time: a subtransaction each
    assert int((await ledger.account("wallet:bs3_a") or {})["balance"]) == 800 + 2 * 180


class _FakeLedger:
    """A ledger whose calls record when they go out and answer when their gate opens."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.alone_gate = asyncio.Event()
        self.batch_gate = asyncio.Event()
        self.batch_gate.set()
        ledger = self

        class Conn:
            async def fetch(
                self, sql: str, ops: list[str], args: list[str]
            ) -> list[tuple[str, None, None, None]]:
                ledger.events.append(f"batch of {len(ops)} sent")
                await ledger.batch_gate.wait()
                return [('{"n": 1}', None, None, None)] * len(ops)

        class Acquire:
            async def __aenter__(self) -> Conn:
                return Conn()

            async def __aexit__(self, *exc: object) -> None:
                return None

        class Pool:
            def acquire(self) -> Acquire:
                return Acquire()

        self.pool = Pool()

    async def call_raw(self, operation: str, *args: Any) -> str:
        self.events.append("alone sent")
        await self.alone_gate.wait()
        return '{"n": 0}'


def _caller(group: GroupCommit, events: list[str], i: int) -> asyncio.Task[None]:
    async def call() -> None:
        await group.call("hold", i)
        events.append(f"caller {i} answered")

    return asyncio.create_task(call())


async def test_the_next_call_goes_out_before_the_last_callers_are_answered() -> None:
    """With one call in flight, the requests that waited go to the database as soon as it
    answers the call in flight, before that call's callers resume (answering them is event
    loop work during which the database would otherwise idle)."""
    events: list[str] = []
    fake = _FakeLedger(events)
    group = GroupCommit(fake, max_in_flight=1)  # type: ignore[arg-type]
    first = _caller(group, events, 0)
    await asyncio.sleep(0)  # the first call is in flight, alone
    rest = [_caller(group, events, i) for i in (1, 2, 3)]
    await asyncio.sleep(0)
    fake.alone_gate.set()
    await asyncio.gather(first, *rest)
    assert events[:3] == ["alone sent", "batch of 3 sent", "caller 0 answered"]
    assert sorted(events[3:]) == ["caller 1 answered", "caller 2 answered", "caller 3 answered"]


async def test_after_a_batch_the_next_call_goes_out_before_its_callers_are_answered() -> None:
    """The same for a batch: the request that waited behind it goes out first."""
    events: list[str] = []
    fake = _FakeLedger(events)
    fake.batch_gate.clear()
    group = GroupCommit(fake, max_in_flight=1)  # type: ignore[arg-type]
    first = _caller(group, events, 0)
    await asyncio.sleep(0)  # the first call is in flight, alone
    batched = [_caller(group, events, i) for i in (1, 2)]
    await asyncio.sleep(0)
    fake.alone_gate.set()
    await first  # answered; the waiting two went out as one batch, held at the database
    assert "batch of 2 sent" in events
    last = _caller(group, events, 3)  # waits behind the batch
    await asyncio.sleep(0)
    mark = len(events)
    fake.batch_gate.set()
    await asyncio.gather(*batched, last)
    after_batch = events[mark:]
    assert after_batch[0] == "alone sent"  # caller 3's call, before callers 1 and 2 resume
    assert sorted(after_batch[1:]) == [
        "caller 1 answered",
        "caller 2 answered",
        "caller 3 answered",
    ]
