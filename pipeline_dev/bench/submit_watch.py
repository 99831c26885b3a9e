"""The submit regime's watch: the documents of one directory's files polled on the database from
a submit's start, and, once the submit has said its run, the run's row until it is finished.

Moments are taken twice: as this process's poll saw them (monotonic seconds from the submit's
start) and as the database stamped them on the rows (its clock, against this process's wall
clock at the start: both on one machine here). A run is finished as `pipeline status --wait`
judges it (`FINAL_RUN_STATUSES`): completed or failed once its report is written (the report
row and the run's status move in one transaction), stalled, or cancelled.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.runs.progress import FINAL_RUN_STATUSES

POLL_S = 0.05

PROGRESS = """
select count(*), count(started_at),
       sum(case when status = 'running' then 1 else 0 end),
       sum(case when status = 'extracted' then 1 else 0 end),
       sum(case when status = 'failed' then 1 else 0 end),
       sum(case when status in ('extracted', 'failed', 'skipped', 'cancelled') then 1 else 0 end),
       min(started_at), min(case when status = 'extracted' then finished_at end), max(finished_at)
from documents where path like :files
"""
RUN = "select status, finished_at from runs where id = :run"


@dataclass
class Watch:
    """Polls the documents of a directory's files from its submit's start (this process, every
    POLL_S); once `submit_ended` names the run, its row too, until it is finished.

    Idle: polls after the first document was taken in which no document of the files was
    running and none newly became final (every worker idle at once; one idle worker of two is
    not counted). During the submit only newly extracted documents count (the submit regime's
    figure since it began); over the run, until every document is final after the submit."""

    url: str
    files: str
    started: float = 0.0
    started_wall: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended: float | None = None
    run_id: str | None = None
    first_taken: float | None = None
    first_extracted: float | None = None
    stamped_taken: datetime | None = None
    stamped_extracted: datetime | None = None
    run_finished: float | None = None
    run_status: str | None = None
    stamped_run_finished: datetime | None = None
    stamped_last_final: datetime | None = None
    idle_s: float = 0.0
    idle_run_s: float = 0.0
    at_end: tuple[int, int] = (0, 0)
    latest: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Stored, extracted, failed and final documents at the last poll, or the run's end."""
    polls: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _extracted: threading.Event = field(default_factory=threading.Event)
    _finished: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        from sqlalchemy import create_engine

        self._engine = create_engine(self.url)
        self._connection = self._engine.connect()  # connected before the clock starts
        self.started, self.started_wall = time.monotonic(), datetime.now(UTC)
        self._thread = threading.Thread(target=self._poll, name="submit-watch", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        from sqlalchemy import text

        last_extracted, last_final, last_t = 0, 0, 0.0
        while not self._stop.is_set():
            run_id = self.run_id
            # The run's row first: finished, every document was final before it (one transaction).
            run = self._connection.execute(text(RUN), {"run": run_id}).one_or_none() if run_id else None
            row = self._connection.execute(text(PROGRESS), {"files": self.files + "%"}).one()
            self._connection.rollback()  # no snapshot kept between polls (SQLite)
            t = time.monotonic() - self.started
            stored, taken, running, extracted, failed, final = (int(x or 0) for x in row[:6])
            self.polls += 1
            if taken and self.first_taken is None:
                self.first_taken, self.stamped_taken = t, _aware(row[6])
            if extracted and self.first_extracted is None:
                self.first_extracted, self.stamped_extracted = t, _aware(row[7])
                self._extracted.set()
            quiet = self.first_taken is not None and not running
            if self.ended is None:
                if quiet and extracted == last_extracted:
                    self.idle_s += t - last_t
                self.at_end = (stored, extracted)
            if quiet and final == last_final and (self.ended is None or final < stored):
                self.idle_run_s += t - last_t
            if self.run_finished is None:
                self.latest = (stored, extracted, failed, final)
                if run is not None and run[0] in FINAL_RUN_STATUSES:
                    self.run_finished, self.run_status = t, str(run[0])
                    self.stamped_run_finished, self.stamped_last_final = _aware(run[1]), _aware(row[8])
                    self._finished.set()
            last_extracted, last_final, last_t = extracted, final, t
            self._stop.wait(POLL_S)

    def submit_ended(self, run_id: str | None = None) -> None:
        self.ended = time.monotonic() - self.started
        self.run_id = run_id

    def wait_extracted(self, timeout_s: float) -> bool:
        return self._extracted.wait(timeout_s)

    def wait_finished(self, timeout_s: float) -> bool:
        """Until the run named by `submit_ended` is finished (False: `timeout_s` passed first)."""
        return self._finished.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._connection.close()
        self._engine.dispose()

    def since_start(self, stamp: datetime | None) -> float | None:
        return None if stamp is None else round((stamp - self.started_wall).total_seconds(), 2)

    def figures(self) -> dict[str, Any]:
        return {
            "first_taken_s": _round(self.first_taken),
            "first_extracted_s": _round(self.first_extracted),
            "first_taken_stamped_s": self.since_start(self.stamped_taken),
            "first_extracted_stamped_s": self.since_start(self.stamped_extracted),
            "idle_s_during_submit": round(self.idle_s, 2),
            "stored_by_submit_end": self.at_end[0],
            "extracted_by_submit_end": self.at_end[1],
            "polls": self.polls,
        }

    def run_figures(self) -> dict[str, Any]:
        """The whole run's: its wall as stamped (the submit's start to the run's finished_at;
        None for a stalled run, which has none, or one not finished in time), as seen by the
        poll, and from its last document's end; the documents at its end (or at the last poll);
        idle seconds."""
        stored, extracted, failed, final = self.latest
        run_wall = self.since_start(self.stamped_run_finished)
        last_final = self.since_start(self.stamped_last_final)
        return {
            "run_id": self.run_id,
            "run_status": self.run_status,
            "run_wall_s": run_wall,
            "run_wall_seen_s": _round(self.run_finished),
            "report_after_last_document_s": None
            if run_wall is None or last_final is None
            else round(run_wall - last_final, 2),
            "run_finished": self.run_finished is not None,
            "documents_at_finish": stored,
            "extracted_at_finish": extracted,
            "failed_at_finish": failed,
            "unfinished_at_finish": stored - final,
            "idle_s_during_run": round(self.idle_run_s, 2),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _aware(value: Any) -> datetime | None:
    """A row's timestamp as an aware UTC datetime (SQLite's come back naive, or as text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    stamp: datetime = value
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
