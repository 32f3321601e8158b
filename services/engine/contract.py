"""The engine service's internal API: the Structs its callers (matchmaking, gateway) import.

Routes (all under the service credential):
- POST /internal/matches                          CreateMatch -> MatchCreated (idempotent on match_id)
- POST /internal/matches/{match_id}/actions       SubmitAction -> ActionApplied (409 stale_seq;
  with `reads`, the answer carries those seats' feeds after the action, read in the same actor
  turn: the gateway forwards them to its sockets at the match without a second call)
- GET  /internal/matches/{match_id}                -> PublicMatchState
- GET  /internal/matches/{match_id}/seats/{seat}/view -> SeatSnapshot
- GET  /internal/matches/{match_id}/seats/{seat}/events?after=SEQ&wait_ms=MS -> EventPage
- GET  /internal/matches/{match_id}/seats/{seat}/feed?after=SEQ -> SeatFeed (the events after
  SEQ and, on the last page, the seat's snapshot: one call per wake-up of a table socket)
- POST /internal/matches/{match_id}/feeds          FeedReads -> SeatFeeds (the same, for several
  seats in one call and one actor turn: a gateway reads every socket of a match it serves at once)
- GET  /internal/matches/{match_id}/result          -> MatchResult (404 not_over while live)
- GET  /internal/integrity/timings?since=ISO[&after=CURSOR][&limit=N] -> TimingPage (finished
  matches, oldest first: each player's response times; for the integrity scan)
- GET  /internal/integrity/hands?since=ISO[&after=CURSOR][&limit=N][&newest_first=true]
  -> HandPage (the played hands of finished matches, oldest match first, same cursor as
  timings; with newest_first, the newest match and hand first and the cursor reads back; for
  the scan's deliberate-losing detector)

Sequence numbers: `seq` is the match's public version; every accepted action or engine step
(deal, timeout, bot move) raises it by one and emits one or more events with that seq. An action must carry
the `seq` it was made against (the latest the caller saw); anything else is refused with 409
`stale_seq` and changes nothing, so a double click or a retry never plays twice.

Error codes (body `{"error": code, "detail": text}`):
400 invalid_request (malformed body), 400 bad_tile, 400 bad_seat, 400 bad_match_spec,
404 unknown_match, 404 not_over, 409 stale_seq, 409 not_your_turn, 409 illegal_action,
409 wrong_phase, 409 seat_left, 409 match_over, 409 match_exists (same id, other spec),
409 claim_not_allowed, 409 seed_mismatch, 503 busy (inbox full), 503 not_owner (another
engine replica runs the match).

Events published with PostgreSQL NOTIFY on channel `engine_events`, payload `match_id:seq`,
for every log entry, except the entries of an action submitted by a gateway (`gateway`) that
is the only gateway reading the match and asked for the feeds of all its sockets there: its
answer brings them, and nobody else listens for them (see `SubmitAction.gateway`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

StakeTier = Literal["free", "10", "20", "40", "80"]

NOTIFY_CHANNEL = "engine_events"
MAX_WAIT_MS = 25_000
MAX_EVENTS_PAGE = 500
# A gateway serves at most a few sockets of one match (four seats, a reconnect or a second
# tab each): a bound on one batched read.
MAX_FEED_READS = 16
# A gateway process's id as it names itself to the engine (`SubmitAction.gateway`,
# `FeedReads.gateway`).
GatewayId = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class SeatSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seat: int
    player_id: str | None = None
    # A CPU player from the start (free tables only).
    bot: bool = False
    # The ledger hold behind this seat at a paid table (kept for settlement and refunds).
    hold_id: str | None = None


class CreateMatch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    match_id: str
    variant: str
    options: dict[str, Any]
    seats: list[SeatSpec]
    tier: StakeTier = "free"
    stake_cents: int = 0
    currency: str = "USD"
    table_id: str | None = None
    # dominicana games played turn by turn (iMessage style): no 2-minute claim.
    turn_by_turn: bool = False


class MatchCreated(msgspec.Struct, frozen=True):
    match_id: str
    seq: int
    status: str


# ------------------------------------------------------------------------------ actions
# Tiles are written "a-b" (either order); ends are "left" / "right" (ignored for the opening).


class PlayAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="play"):
    tile: str
    end: Literal["left", "right"] | None = None


class RedealAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="redeal"):
    """Cuban five-doubles redeal request (before the first tile)."""


class ChooseAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="choose"):
    """Secret "Salgo" (salgo=True) / "Sal tu" (salgo=False)."""

    salgo: bool


class SeedCommitAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="seed_commit"):
    commitment: str  # 64 hex digits: SHA-256 of the seed's ASCII bytes


class SeedRevealAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="seed_reveal"):
    seed: str  # [A-Za-z0-9_-]{0,64}


class ClaimAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="claim"):
    """dominicana: the other side claims the match after 2 minutes without a move."""


class LeaveAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="leave"):
    """The player leaves for good; a bot takes the seat."""


Action = (
    PlayAction
    | RedealAction
    | ChooseAction
    | SeedCommitAction
    | SeedRevealAction
    | ClaimAction
    | LeaveAction
)


class SubmitAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seat: int
    seq: int  # the match's seq the action was made against
    action: Action
    player_id: str | None = None  # when given, must be the seat's player
    # Feeds to read right after the action (and its automatic steps), in the same actor turn:
    # the seats of the caller's sockets at this match and the seq each has seen.
    reads: Annotated[list[FeedRead], msgspec.Meta(max_length=MAX_FEED_READS)] = msgspec.field(
        default_factory=list
    )
    # The calling gateway process, given only when `reads` cover every socket it serves at
    # this match. If no other gateway has read the match (on this engine process, since the
    # match was created here), the entries this action makes are not announced by NOTIFY:
    # the answer brings them to every socket that needs them.
    gateway: GatewayId | None = None


class ActionAccepted(msgspec.Struct, frozen=True):
    match_id: str
    seq: int  # the match's seq after the action (and any automatic steps it caused)


class ActionApplied(msgspec.Struct, frozen=True):
    """The engine's answer to an action: ActionAccepted plus one SeatFeed per read asked."""

    match_id: str
    seq: int
    feeds: list[SeatFeed] = msgspec.field(default_factory=list)


# ------------------------------------------------------------------------------ views


class SeatInfo(msgspec.Struct, frozen=True):
    seat: int
    player_id: str | None
    bot: bool  # a CPU player sits here (from the start, or since its player left)
    left: bool  # its player left the match


class FeedEvent(msgspec.Struct, frozen=True):
    """One event as one seat may see it. `kind` names the shape of `data`."""

    seq: int
    kind: str
    at_ms: int
    data: dict[str, Any]


class Deadline(msgspec.Struct, frozen=True):
    kind: str  # seed_commit | seed_reveal | choose | turn | claim | abandon
    at_ms: int  # server clock, milliseconds since the Unix epoch
    seats: list[int]


class MatchResult(msgspec.Struct, frozen=True):
    match_id: str
    status: str  # finished | void
    winner_side: int | None
    winner_seats: list[int]
    winners: list[str]  # player ids
    scores: list[int]
    reason: str  # target | claim | void reason
    settled: bool  # the ledger acknowledged (always true at free tables)


class PublicMatchState(msgspec.Struct, frozen=True):
    match_id: str
    variant: str
    options: dict[str, Any]
    tier: str
    seq: int
    status: str  # seeding | playing | finished | void
    seats: list[SeatInfo]
    scores: list[int]
    hand_no: int
    deal_id: str | None
    phase: str  # seed_commit | seed_reveal | choose | play | over | between
    turn: int
    counts: list[int]  # tiles per seat
    table: list[dict[str, Any]]  # the chain of plays
    deadline: Deadline | None
    result: MatchResult | None


class SeatSnapshot(msgspec.Struct, frozen=True):
    """Everything one seat may see now; nothing of the others' hands, stock or seeds."""

    match_id: str
    seat: int
    seq: int
    state: PublicMatchState
    hand: list[str]  # this seat's tiles
    legal: list[dict[str, Any]]  # this seat's legal actions now
    my_seed_commitment: str | None
    hand_view: dict[str, Any] | None  # rules-core view of the hand for this seat


class EventPage(msgspec.Struct, frozen=True):
    match_id: str
    seat: int
    seq: int  # the match's current seq
    events: list[FeedEvent]
    more: bool  # more events after the last one (page limit reached)


class SeatFeed(msgspec.Struct, frozen=True):
    """A seat's events after a seq and its snapshot, taken together (one consistent read).

    `snapshot` is None while `events.more` is true (fetch the next page first); otherwise it is
    the seat's view at `events.seq`, filtered exactly as the `/view` route.
    """

    events: EventPage
    snapshot: SeatSnapshot | None


class FeedRead(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seat: Annotated[int, msgspec.Meta(ge=0, le=7)]
    after: Annotated[int, msgspec.Meta(ge=0)]


class FeedReads(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reads: Annotated[list[FeedRead], msgspec.Meta(min_length=1, max_length=MAX_FEED_READS)]
    # The reading gateway process: from now on the match's entries are announced to it even
    # when another gateway's action would have them unannounced (`SubmitAction.gateway`).
    # A gateway's sockets must read through here, naming it, before they rely on NOTIFY.
    gateway: GatewayId | None = None


class SeatFeeds(msgspec.Struct, frozen=True):
    """One SeatFeed per read, in the order of the reads."""

    feeds: list[SeatFeed]


MAX_TIMINGS_PAGE = 200  # matches per page
MAX_TIMINGS_PER_MATCH = 2000


class SeatTiming(msgspec.Struct, frozen=True):
    """A player's own action: `delta_ms` since the record before it (the moment the move
    became his to make, or the previous move). Bot moves and timeouts are left out."""

    player: str
    delta_ms: int
    at_ms: int


class MatchTimings(msgspec.Struct, frozen=True):
    match_id: str
    tier: str
    closed_at_ms: int
    timings: list[SeatTiming]


class TimingPage(msgspec.Struct, frozen=True):
    matches: list[MatchTimings]
    # the position after this page's last match (null when empty): the `after` of the next
    # page, or of a later read when `more` is false
    next: str | None = None
    more: bool = False


MAX_HANDS_PAGE = 50  # matches per page (each with all its hands)
MAX_HANDS_PER_MATCH = 64


class HandMove(msgspec.Struct, frozen=True, omit_defaults=True):
    tile: str
    end: str | None = None
    seat: int | None = None


class FinishedHand(msgspec.Struct, frozen=True, kw_only=True):
    """One played hand of a finished match, as its transcript holds it (the true deal and
    the moves), with the seated players' real ids (`players[s]`: None for a CPU seat)."""

    deal_id: str
    match_id: str
    tier: str
    variant: str
    options: dict[str, Any]
    players: list[str | None]
    hands: list[list[str]]
    stock: list[str]
    opener: int | None
    first_hand: bool
    scores: list[int]
    moves: list[HandMove]
    closed_at_ms: int  # when the match closed


class HandPage(msgspec.Struct, frozen=True):
    hands: list[FinishedHand]
    next: str | None = None  # as TimingPage.next
    more: bool = False
