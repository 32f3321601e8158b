"""Identity and place as ports: who the player is (verified, adult, one account per person) and
where he plays from (an allowed region, no VPN, no remote desktop).

Two ports, each a Protocol with msgspec answers: `IdentityPort.verify_status(player)` and
`LocationPort.locate(player, client_address)`. Adapters: `HttpIdentity` and `HttpLocation`
for a real provider (contract: docs/reference/identity-location.md) and `InMemoryIdentity` /
`InMemoryLocation`, scriptable doubles used by the tests and, with everyone verified, by the
demo (`MESA_IDENTITY_PROVIDER=demo`, refused in production unless explicitly allowed).

`PlaceGate.paid_play_refusal` is what paid seats and the cashier ask: a refusal code or None.
A provider that times out, fails or answers something malformed is `identity_unavailable`:
nobody is seated or paid on a doubtful answer.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from datetime import UTC, date, datetime
from typing import Annotated, Protocol
from urllib.parse import quote

import aiohttp
import msgspec
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.common.config import ConfigError, Settings
from services.common.http import AnswerTooLarge, read_within
from services.common.logging import get_logger

log = get_logger()

# A provider's answer is a few hundred bytes; anything far larger is not an answer.
MAX_ANSWER_BYTES = 64 * 1024
# Location answers remembered per gateway process (player and address), oldest dropped first.
MAX_LOCATIONS_CACHED = 10_000
REGION_PATTERN = r"^[A-Z]{2}-[A-Z0-9]{1,3}$"  # ISO 3166-2 subdivision
# The region the demo double puts everyone in (Distrito Nacional, Dominican Republic).
DEMO_REGION = "DO-01"

Region = Annotated[str, msgspec.Meta(pattern=REGION_PATTERN)]
PersonId = Annotated[str, msgspec.Meta(pattern=r"^[\x21-\x7e]{1,128}$")]
ProviderRef = Annotated[str, msgspec.Meta(pattern=r"^[\x20-\x7e]{0,128}$")]


class IdentityStatus(msgspec.Struct, frozen=True, kw_only=True):
    verified: bool
    adult: bool  # age >= MESA_MIN_AGE_YEARS on the day it was checked
    person_id: str | None  # the provider's stable reference of the person (not the account)
    checked_at: datetime
    provider_ref: str


class Location(msgspec.Struct, frozen=True, kw_only=True):
    region: str | None  # ISO 3166-2; None: the provider could not place the player
    allowed: bool  # region in MESA_ALLOWED_REGIONS
    vpn: bool
    remote_desktop: bool
    checked_at: datetime


class ProviderUnavailable(Exception):
    """The provider did not answer in time, failed, or answered something malformed."""


class IdentityPort(Protocol):
    async def verify_status(self, player: str) -> IdentityStatus: ...

    async def aclose(self) -> None: ...


class LocationPort(Protocol):
    async def locate(self, player: str, client_address: str | None) -> Location: ...

    async def aclose(self) -> None: ...


def is_adult(born: date, today: date, min_age_years: int) -> bool:
    years = today.year - born.year - ((today.month, today.day) < (born.month, born.day))
    return years >= min_age_years


def region_allowed(region: str | None, allowed: tuple[str, ...]) -> bool:
    """`allowed` holds subdivisions (`US-NJ`) or whole countries (`DO`)."""
    if region is None:
        return False
    return region in allowed or region.split("-", 1)[0] in allowed


# --- the provider's answers (docs/reference/identity-location.md) --------------------------
# Unknown fields are accepted: providers add fields to their answers without notice, and the
# fields Mesa reads are still required with their exact types (a missing or mistyped one is a
# malformed answer).


class _IdentityAnswer(msgspec.Struct, frozen=True, kw_only=True):
    player: str
    verified: bool
    person_id: PersonId | None
    date_of_birth: date | None
    reference: ProviderRef


class _LocationAnswer(msgspec.Struct, frozen=True, kw_only=True):
    player: str
    region: Region | None
    vpn: bool
    remote_desktop: bool
    reference: ProviderRef


class _LocateRequest(msgspec.Struct, frozen=True):
    player: str
    address: str | None


class _HttpProvider:
    """One aiohttp session per provider, a total timeout per call, a bounded body."""

    def __init__(self, name: str, base_url: str, timeout_ms: int, api_key: str | None) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout_ms / 1000)
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self.timeout, headers=self._headers, raise_for_status=False
            )
        return self._session

    async def fetch(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            async with self.session().request(
                method, self.base_url + path, data=body, headers=headers
            ) as response:
                content = await read_within(response, MAX_ANSWER_BYTES, method, path)
                return response.status, content
        except AnswerTooLarge as exc:
            raise ProviderUnavailable(f"{self.name}: answer over {MAX_ANSWER_BYTES} bytes") from exc
        except TimeoutError as exc:
            raise ProviderUnavailable(f"{self.name}: no answer in time") from exc
        except aiohttp.ClientError as exc:
            raise ProviderUnavailable(f"{self.name}: {type(exc).__name__}") from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class HttpIdentity:
    """`GET {url}/v1/identity/{player}`: 200 the person's status, 404 never verified."""

    def __init__(self, settings: Settings, api_key: str | None = None) -> None:
        self.http = _HttpProvider(
            "identity", settings.identity_url, settings.identity_timeout_ms, api_key
        )
        self.min_age_years = settings.min_age_years

    async def verify_status(self, player: str) -> IdentityStatus:
        status, content = await self.http.fetch("GET", f"/v1/identity/{quote(player, safe='')}")
        now = datetime.now(UTC)
        if status == 404:
            return IdentityStatus(
                verified=False, adult=False, person_id=None, checked_at=now, provider_ref=""
            )
        if status != 200:
            raise ProviderUnavailable(f"identity: status {status}")
        try:
            answer = msgspec.json.decode(content, type=_IdentityAnswer)
        except msgspec.DecodeError as exc:
            raise ProviderUnavailable(f"identity: malformed answer ({exc})") from exc
        if answer.player != player:
            raise ProviderUnavailable("identity: answer about another player")
        if answer.verified and (answer.person_id is None or answer.date_of_birth is None):
            raise ProviderUnavailable("identity: verified without a person or a birth date")
        adult = answer.date_of_birth is not None and is_adult(
            answer.date_of_birth, now.date(), self.min_age_years
        )
        return IdentityStatus(
            verified=answer.verified,
            adult=adult,
            person_id=answer.person_id,
            checked_at=now,
            provider_ref=answer.reference,
        )

    async def aclose(self) -> None:
        await self.http.aclose()


class HttpLocation:
    """`POST {url}/v1/locate` with the player and his address (null: his last device check)."""

    def __init__(self, settings: Settings, api_key: str | None = None) -> None:
        self.http = _HttpProvider(
            "location", settings.location_url, settings.identity_timeout_ms, api_key
        )
        self.allowed_regions = settings.allowed_regions

    async def locate(self, player: str, client_address: str | None) -> Location:
        body = msgspec.json.encode(_LocateRequest(player, client_address))
        status, content = await self.http.fetch("POST", "/v1/locate", body)
        if status != 200:
            raise ProviderUnavailable(f"location: status {status}")
        try:
            answer = msgspec.json.decode(content, type=_LocationAnswer)
        except msgspec.DecodeError as exc:
            raise ProviderUnavailable(f"location: malformed answer ({exc})") from exc
        if answer.player != player:
            raise ProviderUnavailable("location: answer about another player")
        return Location(
            region=answer.region,
            allowed=region_allowed(answer.region, self.allowed_regions),
            vpn=answer.vpn,
            remote_desktop=answer.remote_desktop,
            checked_at=datetime.now(UTC),
        )

    async def aclose(self) -> None:
        await self.http.aclose()


# --- in-memory doubles: the tests script them; the demo leaves everyone verified ------------


class InMemoryIdentity:
    """Answers from `script` (a status, or an exception to raise) by player, else `default`."""

    def __init__(self, default: IdentityStatus | None = None) -> None:
        self.script: dict[str, IdentityStatus | Exception] = {}
        self.default = default
        self.calls = 0

    @staticmethod
    def verified_adult(player: str, person_id: str | None = None) -> IdentityStatus:
        return IdentityStatus(
            verified=True,
            adult=True,
            person_id=person_id or f"demo-{player}",
            checked_at=datetime.now(UTC),
            provider_ref="in-memory",
        )

    async def verify_status(self, player: str) -> IdentityStatus:
        self.calls += 1
        found = self.script.get(player)
        if isinstance(found, Exception):
            raise found
        if found is not None:
            return found
        if self.default is None:
            return self.verified_adult(player)
        return self.default

    async def aclose(self) -> None:
        return None


class InMemoryLocation:
    """Answers from `script` by player, else everyone in `DEMO_REGION`, allowed."""

    def __init__(self) -> None:
        self.script: dict[str, Location | Exception] = {}
        self.calls = 0

    @staticmethod
    def at(
        region: str | None, *, allowed: bool, vpn: bool = False, remote_desktop: bool = False
    ) -> Location:
        return Location(
            region=region,
            allowed=allowed,
            vpn=vpn,
            remote_desktop=remote_desktop,
            checked_at=datetime.now(UTC),
        )

    async def locate(self, player: str, client_address: str | None) -> Location:
        del client_address
        self.calls += 1
        found = self.script.get(player)
        if isinstance(found, Exception):
            raise found
        return found if found is not None else self.at(DEMO_REGION, allowed=True)

    async def aclose(self) -> None:
        return None


# --- the gate ---------------------------------------------------------------------------------

DETAILS = {
    "identity_unverified": "verify your identity with our provider before playing for money",
    "underage": "paid play is for adults only",
    "duplicate_person": "you already have an account: one account per person",
    "location_unknown": "your location could not be determined",
    "region_not_allowed": "paid play is not offered where you are",
    "vpn_detected": "turn off your VPN or proxy to play for money",
    "remote_desktop_detected": "close remote-desktop software to play for money",
    "identity_unavailable": "identity or location could not be checked now: try again shortly",
}


class PlaceGate:
    """Identity (its verified answers kept in `gateway.identity_checks` for
    `MESA_IDENTITY_CACHE_TTL_S`) and location (kept in memory per player and address for
    `MESA_LOCATION_CACHE_TTL_S`)."""

    def __init__(self, settings: Settings, identity: IdentityPort, location: LocationPort) -> None:
        self.identity = identity
        self.location = location
        self.identity_ttl_s = settings.identity_cache_ttl_s
        self.location_ttl_s = settings.location_cache_ttl_s
        self._locations: OrderedDict[tuple[str, str], tuple[float, Location]] = OrderedDict()

    async def aclose(self) -> None:
        await self.identity.aclose()
        await self.location.aclose()

    async def paid_play_refusal(
        self, db: AsyncEngine, player: str, client_address: str | None
    ) -> str | None:
        """Why `player` may not play for money or use the cashier now (a code), or None.

        `client_address` is his request's address when he acts himself; None when someone
        else acts for him (a partner's accept, the cashier): the provider then places him by
        his last device check."""
        try:
            code = await self.identity_refusal(db, player)
            if code is not None:
                return code
            return location_refusal(await self.locate(player, client_address))
        except ProviderUnavailable as exc:
            log.warning("identity_provider_unavailable", player=player, error=str(exc)[:200])
            return "identity_unavailable"

    async def identity_refusal(self, db: AsyncEngine, player: str) -> str | None:
        status = await self._cached_identity(db, player)
        if status is None:
            status = await self.identity.verify_status(player)
            if status.verified and not await self._remember(db, player, status):
                return "duplicate_person"
        if not status.verified:
            return "identity_unverified"
        if not status.adult:
            return "underage"
        return None

    async def _cached_identity(self, db: AsyncEngine, player: str) -> IdentityStatus | None:
        async with db.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT verified, adult, person_id, checked_at, provider_ref "
                        "FROM gateway.identity_checks WHERE player = :p "
                        "AND checked_at > now() - make_interval(secs => :ttl)"
                    ),
                    {"p": player, "ttl": float(self.identity_ttl_s)},
                )
            ).first()
        if row is None:
            return None
        return IdentityStatus(
            verified=row.verified,
            adult=row.adult,
            person_id=row.person_id,
            checked_at=row.checked_at,
            provider_ref=row.provider_ref,
        )

    async def _remember(self, db: AsyncEngine, player: str, status: IdentityStatus) -> bool:
        """Keep a verified answer; False when its person already has another account (the
        unique person_id decides, so two sign-ups racing cannot both keep it)."""
        try:
            async with db.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO gateway.identity_checks (player, verified, adult, "
                        "person_id, provider_ref, checked_at) VALUES (:p, :v, :a, :pid, :ref, "
                        "now()) ON CONFLICT (player) DO UPDATE SET verified = EXCLUDED.verified, "
                        "adult = EXCLUDED.adult, person_id = EXCLUDED.person_id, "
                        "provider_ref = EXCLUDED.provider_ref, checked_at = EXCLUDED.checked_at"
                    ),
                    {
                        "p": player,
                        "v": status.verified,
                        "a": status.adult,
                        "pid": status.person_id,
                        "ref": status.provider_ref[:128],
                    },
                )
        except IntegrityError:
            log.warning("identity_duplicate_person", player=player)
            return False
        return True

    async def locate(self, player: str, client_address: str | None) -> Location:
        key = (player, client_address or "")
        now = time.monotonic()
        found = self._locations.get(key)
        if found is not None and now - found[0] < self.location_ttl_s:
            return found[1]
        where = await self.location.locate(player, client_address)
        self._locations[key] = (now, where)
        self._locations.move_to_end(key)
        while len(self._locations) > MAX_LOCATIONS_CACHED:
            self._locations.popitem(last=False)
        return where


def location_refusal(where: Location) -> str | None:
    # A VPN or a remote desktop makes the region itself doubtful: they are named first.
    if where.vpn:
        return "vpn_detected"
    if where.remote_desktop:
        return "remote_desktop_detected"
    if where.region is None:
        return "location_unknown"
    if not where.allowed:
        return "region_not_allowed"
    return None


def _read_key(settings: Settings) -> str | None:
    path = settings.identity_key_file
    if path is None:
        return None
    key = path.read_text().strip()
    if not re.fullmatch(r"[\x21-\x7e]{8,512}", key):
        raise ConfigError("MESA_IDENTITY_KEY_FILE must hold one printable key of 8-512 chars")
    return key


def check_settings(settings: Settings) -> None:
    """The gateway refuses to start on the demo double in production, unless told to."""
    if settings.identity_provider == "demo":
        if settings.env == "production" and not settings.identity_demo_allowed:
            raise ConfigError(
                "MESA_IDENTITY_PROVIDER=demo verifies everyone: refused in production "
                "(set MESA_IDENTITY_PROVIDER=http, or MESA_IDENTITY_DEMO_ALLOWED=true)"
            )
        return
    if not settings.identity_url or not settings.location_url:
        raise ConfigError(
            "MESA_IDENTITY_PROVIDER=http needs MESA_IDENTITY_URL and MESA_LOCATION_URL"
        )


def gate_for(settings: Settings) -> PlaceGate:
    check_settings(settings)
    if settings.identity_provider == "demo":
        return PlaceGate(settings, InMemoryIdentity(), InMemoryLocation())
    key = _read_key(settings)
    return PlaceGate(settings, HttpIdentity(settings, key), HttpLocation(settings, key))
