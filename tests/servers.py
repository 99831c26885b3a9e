"""Private database and broker servers for chaos tests: started, restarted and stopped by the
test, on their own ports (the shared servers are never touched)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.runtime.embedded import free_port


def _postgres_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


@dataclass
class PrivatePostgres:
    bindir: Path
    datadir: Path
    port: int
    user: str | None
    """The account the server runs as (Postgres refuses root); None: the current one."""

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir / "data"),
            "-o",
            options,
            "-l",
            str(self.datadir / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.datadir / "data"), "-m", mode, "-w", "stop")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A throwaway Postgres cluster on a free loopback port (trust auth)."""
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries on this machine")
    user = "postgres" if os.geteuid() == 0 else None
    # Not under pytest's tmp dirs: those are private to root, and the server runs as postgres.
    datadir = Path(tempfile.mkdtemp(prefix="pipeline-pg-"))
    if user:
        shutil.chown(datadir, user)
    server = PrivatePostgres(bindir, datadir, free_port(), user)
    server._run("initdb", "-D", str(datadir / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop("immediate")
        finally:
            shutil.rmtree(datadir, ignore_errors=True)
