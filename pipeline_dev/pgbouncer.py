"""A private PgBouncer in transaction mode in front of a Postgres server, for tests and the
connection bench: Debian's `pgbouncer` binary, trust authentication, on a loopback port of its
own. Nothing of the server is reconfigured."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from pipeline.runtime import embedded

START_TIMEOUT_S = 10.0
RUN_AS = "postgres"
"""PgBouncer refuses to run as root: it drops to this user (`-u`), whose files it must read."""


@dataclass(frozen=True)
class Bouncer:
    url: str
    """The server URL with PgBouncer's host and port (same user and database)."""
    admin_url: str
    """PgBouncer's admin console (`SHOW POOLS`, `SHOW CLIENTS`), as a libpq URL."""
    pool_size: int
    log_path: Path


def binary() -> str | None:
    """The pgbouncer executable (Debian: /usr/sbin/pgbouncer, often off a user's PATH)."""
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


def config(server_host: str, server_port: int, port: int, user: str, pool_size: int, work: Path) -> str:
    """pgbouncer.ini: every database of the server, transaction pooling, `pool_size` server
    connections per database and user, clients in the thousands."""
    return "\n".join(
        [
            "[databases]",
            f"* = host={server_host} port={server_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {work / 'users.txt'}",
            f"admin_users = {user}",
            "pool_mode = transaction",
            f"default_pool_size = {pool_size}",
            "max_client_conn = 2000",
            f"logfile = {work / 'pgbouncer.log'}",
            "",
        ]
    )


@contextmanager
def running(server_url: str, pool_size: int = 20) -> Iterator[Bouncer]:
    """PgBouncer in front of the server of `server_url` (trust authentication there) until exit."""
    found = binary()
    if found is None:
        raise FileNotFoundError("no pgbouncer executable (Debian: apt-get install -y pgbouncer)")
    server = make_url(server_url)
    user = server.username or "postgres"
    work = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    port = embedded.free_port()
    (work / "users.txt").write_text(f'"{user}" ""\n')
    (work / "pgbouncer.ini").write_text(
        config(server.host or "127.0.0.1", server.port or 5432, port, user, pool_size, work)
    )
    argv = [found, str(work / "pgbouncer.ini")]
    if os.geteuid() == 0:
        runner = pwd.getpwnam(RUN_AS)
        for path in (work, *work.iterdir()):
            os.chown(path, runner.pw_uid, runner.pw_gid)
        argv[1:1] = ["-u", RUN_AS]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        embedded.wait_for_port(port, START_TIMEOUT_S)
        yield Bouncer(
            url=server.set(host="127.0.0.1", port=port).render_as_string(hide_password=False),
            admin_url=f"host=127.0.0.1 port={port} user={user} dbname=pgbouncer",
            pool_size=pool_size,
            log_path=work / "pgbouncer.log",
        )
    finally:
        process.terminate()
        try:
            process.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)
