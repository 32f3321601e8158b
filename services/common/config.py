"""Configuration: every setting comes from a `MESA_*` environment variable, checked at start.

An unknown `MESA_*` variable or a bad value fails fast with a message naming the variable,
so a typo never silently falls back to a default on a real-money platform.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import msgspec

VERSION = "0.1.0"
SERVICES = ("ledger", "engine", "matchmaking", "gateway")
# The embedded PostgreSQL's generated passwords, files under var/ (mode 0600): the superuser's
# (migrations only) and the least-privilege role's that services log in as.
PG_SUPERUSER_PASSWORD_FILE = "pg_superuser_password"  # noqa: S105 (a file name, not a password)
PG_APP_PASSWORD_FILE = "pg_app_password"  # noqa: S105 (a file name, not a password)


class ConfigError(Exception):
    """A configuration value is missing or invalid; the message names the variable."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    env: str = "dev"
    host: str = "127.0.0.1"
    var_dir: Path = Path("var")
    database_url: str = ""
    database_is_embedded: bool = True
    # Who migrates: the embedded server's superuser, or the same URL as the services' when
    # MESA_DATABASE_URL is given. Set by load_settings.
    migration_database_url: str = ""
    pg_port: int = 54329
    gateway_port: int = 8000
    ledger_port: int = 8001
    engine_port: int = 8002
    matchmaking_port: int = 8003
    ledger_url: str = ""
    engine_url: str = ""
    matchmaking_url: str = ""
    ledger_socket: Path | None = None
    engine_socket: Path | None = None
    matchmaking_socket: Path | None = None
    log_format: str = "console"
    log_level: str = "info"
    internal_secret: bytes = b""
    internal_token_ttl_s: int = 60
    commission_rate_bp: int = 1000
    currency: str = "USD"
    operator_key_file: Path | None = None
    report_key_file: Path | None = None
    log_origin: str = "mesa-fairness-log"
    witnesses: tuple[tuple[str, str], ...] = ()
    matchmaking_config_file: Path | None = None
    redis_url: str = ""
    invitation_ttl_s: int = 60
    trusted_proxies: tuple[str, ...] = ()
    # integrity: seconds between the gateway's background scans (0: none), and threshold
    # overrides (a JSON object of integrity.config.IntegrityConfig fields, checked at start)
    integrity_scan_interval_s: int = 900
    integrity_thresholds: str = ""
    # identity and place (api/identity.py, docs/reference/identity-location.md)
    identity_provider: str = "demo"
    identity_demo_allowed: bool = False
    identity_url: str = ""
    location_url: str = ""
    identity_key_file: Path | None = None
    identity_timeout_ms: int = 3000
    identity_cache_ttl_s: int = 86_400
    location_cache_ttl_s: int = 60
    min_age_years: int = 18
    allowed_regions: tuple[str, ...] = ()

    def port_of(self, service: str) -> int:
        ports = {
            "gateway": self.gateway_port,
            "ledger": self.ledger_port,
            "engine": self.engine_port,
            "matchmaking": self.matchmaking_port,
        }
        if service not in ports:
            raise ConfigError(f"unknown service {service!r}")
        return ports[service]

    def url_of(self, service: str) -> str:
        urls = {
            "ledger": self.ledger_url,
            "engine": self.engine_url,
            "matchmaking": self.matchmaking_url,
        }
        if urls.get(service):
            return urls[service]
        return f"http://{self.host}:{self.port_of(service)}"

    def socket_of(self, service: str) -> Path | None:
        """The Unix socket a service also listens on for internal calls (None: TCP only)."""
        sockets = {
            "ledger": self.ledger_socket,
            "engine": self.engine_socket,
            "matchmaking": self.matchmaking_socket,
        }
        return sockets.get(service)


# HTTP over a Unix socket: `http+unix://` and the socket's absolute path, percent-encoded (the
# convention of requests-unixsocket and HTTPie). Co-located services call each other this way:
# a request over loopback TCP costs both ends more CPU in the kernel's TCP stack than the whole
# HTTP exchange over a Unix socket (docs/decisions/0007-unix-sockets-for-internal-calls.md).
UNIX_SCHEME = "http+unix"
# sockaddr_un's sun_path is 108 bytes on Linux, its terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107


def unix_socket_url(path: Path) -> str:
    return f"{UNIX_SCHEME}://{quote(str(path), safe='')}"


def unix_socket_path(url: str) -> str | None:
    """The socket path of an `http+unix://` base URL; None for any other URL."""
    prefix = UNIX_SCHEME + "://"
    if not url.startswith(prefix):
        return None
    return unquote(url[len(prefix) :].split("/", 1)[0])


def socket_path_fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def _port(name: str, raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(f"{name} must be a TCP port between 1 and 65535, got {raw!r}")
    return int(raw)


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}; got {raw!r}")
        return raw

    return parse


def _url(name: str, raw: str) -> str:
    socket_path = unix_socket_path(raw.rstrip("/"))
    if socket_path is not None:
        if "/" in raw.rstrip("/")[len(UNIX_SCHEME) + 3 :] or not socket_path.startswith("/"):
            raise ConfigError(
                f"{name}: an http+unix:// URL names an absolute socket path, percent-encoded "
                f"(http+unix://%2Fvar%2Frun%2Fledger.sock), got {raw!r}"
            )
        return raw.rstrip("/")
    if not re.match(r"^https?://[^\s/]+(:\d+)?/?$", raw):
        raise ConfigError(
            f"{name} must be an http(s) base URL like http://127.0.0.1:8001 "
            f"(or http+unix:// and a socket path), got {raw!r}"
        )
    return raw.rstrip("/")


def _socket(name: str, raw: str) -> Path:
    path = Path(raw)
    if not path.is_absolute():
        raise ConfigError(f"{name} must be an absolute path, got {raw!r}")
    if not socket_path_fits(path):
        raise ConfigError(f"{name} is longer than a Unix socket path may be (107 bytes)")
    return path


def _urls(name: str, raw: str) -> str:
    """One base URL, or several comma-separated ones for replicas (engine or ledger processes)."""
    return ",".join(_url(name, part.strip()) for part in raw.split(","))


def _database_url(name: str, raw: str) -> str:
    if not re.match(r"^postgres(ql)?(\+asyncpg)?://", raw):
        raise ConfigError(f"{name} must be a postgresql:// URL, got a value of another form")
    return raw


def _redis_url(name: str, raw: str) -> str:
    if not re.match(r"^(rediss?|unix)://\S+$", raw):
        raise ConfigError(f"{name} must be a redis://, rediss:// or unix:// URL")
    return raw


def _secret(name: str, raw: str) -> bytes:
    try:
        value = bytes.fromhex(raw)
    except ValueError:
        raise ConfigError(f"{name} must be hex (at least 32 bytes)") from None
    if len(value) < 32:
        raise ConfigError(f"{name} must be at least 32 bytes (64 hex digits)")
    return value


def _rate_bp(name: str, raw: str) -> int:
    if not raw.isdigit() or not 0 <= int(raw) <= 10000:
        raise ConfigError(f"{name} must be an integer number of basis points in 0..10000")
    return int(raw)


def _positive_int(name: str, raw: str) -> int:
    if not raw.isdigit() or int(raw) <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def _invitation_ttl(name: str, raw: str) -> int:
    value = _positive_int(name, raw)
    if value > 86_400:
        raise ConfigError(f"{name} must be at most 86400 (one day), got {raw!r}")
    return value


def _scan_interval(name: str, raw: str) -> int:
    if not raw.isdigit() or int(raw) > 86_400:
        raise ConfigError(f"{name} must be 0 (no scans) .. 86400 seconds, got {raw!r}")
    return int(raw)


def _json_object(name: str, raw: str) -> str:
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise ConfigError(f"{name} must be a JSON object, got {raw!r}") from None
    if not isinstance(value, dict) or len(raw) > 4000:
        raise ConfigError(f"{name} must be a JSON object (at most 4000 characters)")
    return raw


def _bounded_int(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise ConfigError(f"{name} must be an integer in {low}..{high}, got {raw!r}")
        return int(raw)

    return parse


def _flag(name: str, raw: str) -> bool:
    if raw not in ("true", "false"):
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    return raw == "true"


def _regions(name: str, raw: str) -> tuple[str, ...]:
    regions = tuple(part.strip() for part in raw.split(",") if part.strip())
    if not regions or any(not re.fullmatch(r"[A-Z]{2}(-[A-Z0-9]{1,3})?", r) for r in regions):
        raise ConfigError(
            f"{name} must be comma-separated ISO 3166 codes: countries (DO) or "
            f"subdivisions (US-NJ), got {raw!r}"
        )
    return regions


def _host(name: str, raw: str) -> str:
    if not re.match(r"^[A-Za-z0-9.:\-\[\]]+$", raw):
        raise ConfigError(f"{name} must be a host name or address, got {raw!r}")
    return raw


def _networks(name: str, raw: str) -> tuple[str, ...]:
    networks = []
    for part in raw.split(","):
        try:
            networks.append(str(ipaddress.ip_network(part.strip(), strict=False)))
        except ValueError:
            raise ConfigError(
                f"{name} must be comma-separated IP addresses or CIDR networks, got {part!r}"
            ) from None
    return tuple(networks)


def _currency(name: str, raw: str) -> str:
    if not re.match(r"^[A-Z]{3}$", raw):
        raise ConfigError(f"{name} must be an ISO 4217 code like USD, got {raw!r}")
    return raw


def _log_origin(name: str, raw: str) -> str:
    # the origin is the log key's signed-note name: printable, no spaces, no `+`
    if not re.fullmatch(r"[!-*,-~]{1,200}", raw):
        raise ConfigError(f"{name} must be 1-200 printable ASCII characters without space or +")
    return raw


def _witness_keys(name: str, raw: str) -> tuple[str, ...]:
    # signed-note verifier keys <name>+<hash>+<base64>; checked fully where they are used
    keys = tuple(k.strip() for k in raw.split(",") if k.strip())
    if not keys or any(
        not re.fullmatch(r"[!-*,-~]{1,200}\+[0-9a-f]{8}\+[A-Za-z0-9+/=]{44}", k) for k in keys
    ):
        raise ConfigError(f"{name} must be comma-separated witness verifier keys")
    return keys


def _witness_endpoints(name: str, raw: str) -> tuple[tuple[str, str], ...]:
    # `<verifier key> <submission URL>` entries, comma-separated (C2SP tlog-witness)
    out = []
    for entry in (e.strip() for e in raw.split(",") if e.strip()):
        vkey, _, url = entry.partition(" ")
        _witness_keys(name, vkey)
        if not re.fullmatch(r"https?://\S{1,500}", url.strip()):
            raise ConfigError(f"{name}: each entry is `<witness verifier key> <URL>`")
        out.append((vkey, url.strip()))
    if not out or len(out) > 16:
        raise ConfigError(f"{name} must list 1 to 16 witnesses")
    return tuple(out)


# variable -> (settings field, parser, description for docs/reference/configuration.md)
VARIABLES: dict[str, tuple[str, Callable[[str, str], Any], str]] = {
    "MESA_ENV": ("env", _choice("dev", "test", "production"), "dev, test or production"),
    "MESA_HOST": ("host", _host, "address services listen on (loopback by default)"),
    "MESA_VAR_DIR": (
        "var_dir",
        lambda n, r: Path(r),
        "state folder: embedded PostgreSQL, dev keys",
    ),
    "MESA_DATABASE_URL": ("database_url", _database_url, "external PostgreSQL; unset = embedded"),
    "MESA_PG_PORT": ("pg_port", _port, "port of the embedded PostgreSQL"),
    "MESA_GATEWAY_PORT": ("gateway_port", _port, "public gateway port"),
    "MESA_LEDGER_PORT": ("ledger_port", _port, "ledger service port"),
    "MESA_ENGINE_PORT": ("engine_port", _port, "engine service port"),
    "MESA_MATCHMAKING_PORT": ("matchmaking_port", _port, "matchmaking service port"),
    "MESA_LEDGER_URL": (
        "ledger_url",
        _urls,
        "base URL of the ledger service; comma-separated for replicas",
    ),
    "MESA_ENGINE_URL": (
        "engine_url",
        _urls,
        "base URL of the engine service; comma-separated for replicas",
    ),
    "MESA_MATCHMAKING_URL": ("matchmaking_url", _url, "base URL of the matchmaking service"),
    "MESA_LEDGER_SOCKET": (
        "ledger_socket",
        _socket,
        "Unix socket the ledger also listens on for internal calls (mesa up sets it)",
    ),
    "MESA_ENGINE_SOCKET": (
        "engine_socket",
        _socket,
        "Unix socket an engine also listens on for internal calls (mesa up sets it)",
    ),
    "MESA_MATCHMAKING_SOCKET": (
        "matchmaking_socket",
        _socket,
        "Unix socket matchmaking also listens on for internal calls (mesa up sets it)",
    ),
    "MESA_REDIS_URL": (
        "redis_url",
        _redis_url,
        "gateways: Redis for the cross-gateway table feed; unset = PostgreSQL LISTEN/NOTIFY",
    ),
    "MESA_TRUSTED_PROXIES": (
        "trusted_proxies",
        _networks,
        "gateway: proxies (IPs/CIDRs, comma-separated) whose X-Forwarded-For is believed; "
        "unset = none",
    ),
    "MESA_LOG_FORMAT": ("log_format", _choice("console", "json"), "console (readable) or json"),
    "MESA_LOG_LEVEL": ("log_level", _choice("debug", "info", "warning", "error"), "log level"),
    "MESA_INTERNAL_SECRET": ("internal_secret", _secret, "hex HMAC key for service tokens"),
    "MESA_INTERNAL_TOKEN_TTL_S": ("internal_token_ttl_s", _positive_int, "service token lifetime"),
    "MESA_COMMISSION_RATE_BP": ("commission_rate_bp", _rate_bp, "house commission, basis points"),
    "MESA_CURRENCY": ("currency", _currency, "currency of paid tables"),
    "MESA_MATCHMAKING_CONFIG": (
        "matchmaking_config_file",
        lambda n, r: Path(r),
        "JSON file: table kinds and tiers offered, reservation lifetimes, limits",
    ),
    "MESA_INVITATION_TTL_S": (
        "invitation_ttl_s",
        _invitation_ttl,
        "how long an invitation (a partner's, or play again) waits for answers",
    ),
    "MESA_IDENTITY_PROVIDER": (
        "identity_provider",
        _choice("demo", "http"),
        "gateway: identity and location provider; demo verifies everyone as an adult in an "
        "allowed region (refused in production unless MESA_IDENTITY_DEMO_ALLOWED=true)",
    ),
    "MESA_IDENTITY_DEMO_ALLOWED": (
        "identity_demo_allowed",
        _flag,
        "true lets a production gateway start with the demo identity provider",
    ),
    "MESA_IDENTITY_URL": ("identity_url", _url, "identity provider's base URL (http provider)"),
    "MESA_LOCATION_URL": ("location_url", _url, "location provider's base URL (http provider)"),
    "MESA_IDENTITY_KEY_FILE": (
        "identity_key_file",
        lambda n, r: Path(r),
        "file holding the bearer key sent to the identity and location providers",
    ),
    "MESA_IDENTITY_TIMEOUT_MS": (
        "identity_timeout_ms",
        _bounded_int(100, 30_000),
        "how long one identity or location call may take (ms)",
    ),
    "MESA_IDENTITY_CACHE_TTL_S": (
        "identity_cache_ttl_s",
        _bounded_int(0, 2_592_000),
        "how long a verified identity answer is reused before the provider is asked again",
    ),
    "MESA_LOCATION_CACHE_TTL_S": (
        "location_cache_ttl_s",
        _bounded_int(0, 3_600),
        "how long a location answer is reused for the same player and address",
    ),
    "MESA_MIN_AGE_YEARS": (
        "min_age_years",
        _bounded_int(16, 25),
        "minimum age for paid play and the cashier",
    ),
    "MESA_ALLOWED_REGIONS": (
        "allowed_regions",
        _regions,
        "ISO 3166 countries (DO) or subdivisions (US-NJ) where paid play is allowed; "
        "unset = none (the demo provider allows everyone)",
    ),
    "MESA_OPERATOR_KEY_FILE": (
        "operator_key_file",
        lambda n, r: Path(r),
        "Ed25519 operator signing key file",
    ),
    "MESA_REPORT_KEY_FILE": (
        "report_key_file",
        lambda n, r: Path(r),
        "ledger: Ed25519 key (64-hex seed, mode 0600) signing the daily close reports",
    ),
    "MESA_LOG_ORIGIN": (
        "log_origin",
        _log_origin,
        "transparency log origin: the first line of its checkpoints and its key's name",
    ),
    "MESA_INTEGRITY_SCAN_INTERVAL_S": (
        "integrity_scan_interval_s",
        _scan_interval,
        "gateway: seconds between integrity scans (0: none; one gateway scans at a time)",
    ),
    "MESA_INTEGRITY_THRESHOLDS": (
        "integrity_thresholds",
        _json_object,
        "integrity thresholds to override, a JSON object (docs/reference/integrity.md)",
    ),
    "MESA_WITNESSES": (
        "witnesses",
        _witness_endpoints,
        "C2SP tlog-witnesses the engine pushes each checkpoint to: comma-separated "
        "`<witness verifier key> <submission URL>`",
    ),
}
# Variables read elsewhere (documented in docs/reference/configuration.md) that must not be
# rejected as unknown.
OTHER_VARIABLES = {
    "MESA_OPERATOR_KEY": "operator signing key as hex (instead of a file)",
    "MESA_TEST_DATABASE_URL": "tests: external PostgreSQL (superuser) instead of embedded",
    "MESA_HEALTH_PORT": "container image: the port its HEALTHCHECK probes",
}


def embedded_database_url(
    settings: Settings, database: str = "mesa", *, superuser: bool = False
) -> str:
    """The embedded server's URL for the services' role (`mesa_app`) or the superuser, with
    the password from its file under var/ once `mesa up` has generated it."""
    role, file = (
        ("postgres", PG_SUPERUSER_PASSWORD_FILE)
        if superuser
        else ("mesa_app", PG_APP_PASSWORD_FILE)
    )
    path = settings.var_dir / file
    password = path.read_text().strip() if path.is_file() else ""
    auth = f"{role}:{quote(password, safe='')}" if password else role
    return f"postgresql://{auth}@127.0.0.1:{settings.pg_port}/{database}"


def mask_url(url: str) -> str:
    """`url` with its password (if any) replaced by ***, for logs and messages."""
    return re.sub(r"^([a-z0-9+.-]+://[^:/@]*):[^@/]*@", r"\1:***@", url, flags=re.IGNORECASE)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    unknown = sorted(
        k for k in env if k.startswith("MESA_") and k not in VARIABLES and k not in OTHER_VARIABLES
    )
    if unknown:
        raise ConfigError(f"unknown configuration variable {unknown[0]} (known: see README)")
    values: dict[str, Any] = {}
    for name, (field, parse, _) in VARIABLES.items():
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        values[field] = parse(name, raw.strip())
    settings = Settings(**values)
    var_dir = settings.var_dir.resolve()
    changes: dict[str, Any] = {"var_dir": var_dir}
    if not settings.database_url:
        located = msgspec.structs.replace(settings, var_dir=var_dir)
        changes["database_url"] = embedded_database_url(located)
        changes["migration_database_url"] = embedded_database_url(located, superuser=True)
        changes["database_is_embedded"] = True
    else:
        changes["migration_database_url"] = settings.database_url
        changes["database_is_embedded"] = False
    if not settings.internal_secret:
        secret_file = var_dir / "internal_secret"
        if secret_file.exists():
            changes["internal_secret"] = _secret("var/internal_secret", secret_file.read_text())
    if settings.operator_key_file is None and not env.get("MESA_OPERATOR_KEY"):
        changes["operator_key_file"] = var_dir / "operator_key.pem"
    if settings.report_key_file is None:
        changes["report_key_file"] = var_dir / "report_signing_key"
    return msgspec.structs.replace(settings, **changes)
