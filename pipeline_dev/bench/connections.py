"""The connection budget measured (issue 49): many workers of many threads against a private
Postgres of `max_connections = 100`, directly and through a private PgBouncer in transaction
mode. Reports the peak connections (the server's, and PgBouncer's clients), every document's
status, and any connection error in the workers' logs.

    .venv/bin/python -m pipeline_dev.bench.connections --workers 8 --threads 32 --documents 400

Runs as root or as a user who may run `initdb` (root: the cluster runs as `postgres`)."""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pipeline.runtime import embedded
from pipeline_dev import pgbouncer
from pipeline_dev.bench import procs
from pipeline_dev.synth_filings import write_filings

MAX_CONNECTIONS = 100
TROUBLE = (
    "too many clients",
    "remaining connection slots",
    "stayed busy",  # the budget's pool timeout (pipeline.storage.connections)
    "prepared statement",
    "unsupported startup parameter",
)
SAMPLE_S = 0.1


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise FileNotFoundError("no initdb under /usr/lib/postgresql (Debian: postgresql)")
    return found[-1].parent


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextmanager
def private_postgres(work: Path, max_connections: int = MAX_CONNECTIONS) -> Iterator[str]:
    """A Postgres cluster of this bench's own (trust auth, loopback, `max_connections`); its URL."""
    data, port, bin_dir = work / "pgdata", embedded.free_port(), _postgres_bin()
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(work, user.pw_uid, user.pw_gid)
    subprocess.run(
        _as_postgres(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={work} -c max_connections={max_connections}"
    pg_ctl = str(bin_dir / "pg_ctl")
    subprocess.run(
        _as_postgres(
            [pg_ctl, "-D", str(data), "-o", options, "-l", str(work / "postgres.log"), "-w", "start"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute("create database bench")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/bench"
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
        )


class Sampler:
    """The most of each count, sampled over connections of its own until stopped."""

    def __init__(self, server_conninfo: str, bouncer_conninfo: str | None) -> None:
        self.server = psycopg.connect(server_conninfo, autocommit=True)
        self.bouncer = (
            psycopg.connect(bouncer_conninfo, autocommit=True, prepare_threshold=None)
            if bouncer_conninfo
            else None
        )
        self.peak = {"server_clients": 0, "pgbouncer_clients": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            row = self.server.execute(
                "select count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()"
            ).fetchone()
            self.peak["server_clients"] = max(self.peak["server_clients"], int(row[0]) if row else 0)
            if self.bouncer is not None:
                clients = len(self.bouncer.execute("SHOW CLIENTS").fetchall()) - 1  # not this one
                self.peak["pgbouncer_clients"] = max(self.peak["pgbouncer_clients"], clients)
            time.sleep(SAMPLE_S)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        self.server.close()
        if self.bouncer is not None:
            self.bouncer.close()
        return self.peak


def _statuses(server_url: str, run_id: str) -> dict[str, int]:
    with psycopg.connect(server_url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        rows = conn.execute(
            "select status, count(*) from documents where run_id = %s group by status", (run_id,)
        )
        return {str(status): int(n) for status, n in rows.fetchall()}


def measure(
    via: str, server_url: str, redis_url: str, files: Path, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of `files` through `via` (direct or pgbouncer) with fresh workers."""
    logs = Path(tempfile.mkdtemp(dir=work, prefix=f"logs-{via}-"))
    with ExitStack() as stack:
        bouncer = (
            stack.enter_context(pgbouncer.running(server_url, args.pgbouncer_pool))
            if via == "pgbouncer"
            else None
        )
        sim_url = stack.enter_context(
            procs.simulator(logs, ["--p50", str(args.p50_s), "--p95", str(args.p95_s), "--seed", "1"])
        )
        env = {
            "PIPELINE_DATABASE_URL": bouncer.url if bouncer else server_url,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim_url,
            "PIPELINE_LLM_MODEL": "sim-1",
            "PIPELINE_DATA_DIR": str(work / "data"),
            "PIPELINE_RATE_LIMIT_RPM": "0",
            "PIPELINE_DB_TRANSACTION_POOLER": "true" if bouncer else "false",
            **({"PIPELINE_DB_POOL_SIZE": str(args.budget)} if args.budget else {}),
        }
        children = stack.enter_context(procs.workers(env, logs, args.workers, args.threads))
        start_lines = [
            line
            for c in children
            if c.log_path
            for line in c.log_path.read_text(errors="replace").splitlines()
            if "database connections:" in line
        ]
        sampler = Sampler(
            server_url.replace("postgresql+psycopg://", "postgresql://", 1).replace("/bench", "/postgres"),
            bouncer.admin_url if bouncer else None,
        )
        try:
            measured = procs.run_measured(
                procs.pipeline_cli("submit", str(files), "--wait", "--fresh"),
                env,
                timeout_s=3600,
                ok_codes=(0, 1),
            )
        finally:
            peak = sampler.stop()
        said = "".join(c.log_path.read_text(errors="replace") for c in children if c.log_path)
    procs.finish_stopping()
    run_id = measured.out.strip().splitlines()[-1]
    return {
        "via": via,
        "workers": args.workers,
        "threads": args.threads,
        "budget": args.budget or "default",
        "documents": len(list(files.iterdir())),
        "statuses": _statuses(server_url, run_id),
        "wall_s": round(measured.wall_s, 1),
        **peak,
        "connection_errors": {t: said.count(t) for t in TROUBLE if t in said},
        "start_line": start_lines[-1] if start_lines else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--budget", type=int, default=0, help="PIPELINE_DB_POOL_SIZE (0: the default)")
    parser.add_argument("--via", choices=["direct", "pgbouncer", "both"], default="both")
    parser.add_argument("--pgbouncer-pool", type=int, default=20, help="PgBouncer's default_pool_size")
    parser.add_argument("--p50-s", type=float, default=0.5, help="the simulator's median latency")
    parser.add_argument("--p95-s", type=float, default=1.5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipeline-bench-connections-"))
    work.chmod(0o755)  # the cluster's user reaches its directory inside
    files = work / "filings"
    write_filings(
        files, args.documents, seed=49, sizes=[3000 + 25 * (i % 200) for i in range(args.documents)]
    )
    results = []
    try:
        with private_postgres(work / "pg") as server_url:
            redis_child, redis_url = embedded.start_redis(work / "redis")
            with redis_child:
                for via in ("direct", "pgbouncer") if args.via == "both" else (args.via,):
                    results.append(measure(via, server_url, redis_url, files, work, args))
                    print(json.dumps(results[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
