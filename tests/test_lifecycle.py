"""The lifecycle table (`pipeline.storage.lifecycle`) is what the code does: every document
writer, driven from every state on the database, moves the document only as its move allows;
run moves never start from a state the table does not list; the docs draw the table."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from pipeline.core.errors import LeaseLost
from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.storage import clock, document_leases, lifecycle, reclaims, run_documents, run_state
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import DocStatus, Document, Run, RunStatus
from pipeline_dev.synth_filings import write_filings

FENCE = 5

STATES: dict[str, dict[str, Any]] = {
    "pending": {"status": DocStatus.PENDING, "lease_owner": None, "expires_in": None, "attempts": 1},
    "running, live lease": {
        "status": DocStatus.RUNNING,
        "lease_owner": "owner-a",
        "expires_in": 60,
        "attempts": 1,
    },
    "running, lease ran out": {
        "status": DocStatus.RUNNING,
        "lease_owner": "owner-a",
        "expires_in": -60,
        "attempts": 1,
    },
    "running, released": {"status": DocStatus.RUNNING, "lease_owner": None, "expires_in": -60, "attempts": 1},
    "extracted": {"status": DocStatus.EXTRACTED, "lease_owner": None, "expires_in": None, "attempts": 1},
    "failed": {"status": DocStatus.FAILED, "lease_owner": None, "expires_in": None, "attempts": 1},
    "skipped": {"status": DocStatus.SKIPPED, "lease_owner": None, "expires_in": None, "attempts": 0},
    "cancelled": {"status": DocStatus.CANCELLED, "lease_owner": None, "expires_in": None, "attempts": 1},
}
FINAL = {DocStatus.EXTRACTED, DocStatus.FAILED, DocStatus.SKIPPED, DocStatus.CANCELLED}


def _run_of(session: Session, doc_id: int) -> str:
    run_id = session.scalar(select(Document.run_id).where(Document.id == doc_id))
    assert run_id is not None
    return run_id


def _cancel(session: Session, doc_id: int) -> int:
    """What `pipeline cancel` does: the run cancelled first, then its unfinished documents
    (`cancel_documents` moves none of a run that is not cancelled: a retry took it back)."""
    run_id = _run_of(session, doc_id)
    session.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.CANCELLED))
    return run_documents.cancel_documents(session, run_id, "cancelled by a test")


def _quiet(write: Callable[[Session, int], object]) -> Callable[[Session, int], object]:
    def run(session: Session, doc_id: int) -> object:
        try:
            return write(session, doc_id)
        except LeaseLost:
            return None

    return run


# Each writer of a document's state, as the holder of lease FENCE (owner-a) or as another
# (owner-b), with the states it must change the row from: the rest must leave it as it was.
WRITERS: list[tuple[str, str, Callable[[Session, int], object], set[str]]] = [
    (
        "lease",
        "another delivery",
        lambda s, d: document_leases.start_document(s, d, 3, "owner-b", 30, scope="s"),
        {"pending", "running, lease ran out", "running, released"},
    ),
    (
        "renew",
        "the holder",
        lambda s, d: document_leases.renew_leases(s, {d: FENCE}, 30),
        {"running, live lease", "running, lease ran out", "running, released"},
    ),
    (
        "release",
        "the holder",
        lambda s, d: document_leases.release_lease(s, d, FENCE, grace_s=30),
        {"running, live lease", "running, lease ran out", "running, released"},
    ),
    (
        "release",
        "the holder's retry",
        lambda s, d: document_leases.release_for_retry(s, d, FENCE, grace_s=30),
        {"running, live lease", "running, lease ran out", "running, released"},
    ),
    (
        "reclaim",
        "a heartbeat",
        lambda s, d: reclaims.reclaim_expired(s, d, "owner-a", FENCE, grace_s=30),
        {"running, lease ran out"},
    ),
    (
        "reclaim delivery",
        "a heartbeat",
        lambda s, d: reclaims.reclaim_unstarted(s, [d], "owner-a", grace_s=30, scope="s"),
        {"pending"},
    ),
    (
        "extract",
        "the holder",
        _quiet(lambda s, d: document_leases.mark_extracted(s, d, FENCE)),
        {"running, live lease", "running, lease ran out", "running, released"},
    ),
    (
        "fail",
        "the holder's last attempt",
        lambda s, d: document_leases.fail_document(s, d, "gave up", FENCE),
        {"running, live lease", "running, lease ran out", "running, released"},
    ),
    (
        "fail unstarted",
        "a delivery that never leased it",
        lambda s, d: document_leases.fail_document(s, d, "refused", None),
        {"pending"},
    ),
    (
        "give up",
        "a delivery with no attempts left",
        lambda s, d: document_leases.start_document(s, d, 1, "owner-b", 30, scope="s"),
        {"pending", "running, lease ran out", "running, released"},
    ),
    (
        "cancel",
        "pipeline cancel",
        lambda s, d: _cancel(s, d),
        {"pending", "running, live lease", "running, lease ran out", "running, released"},
    ),
    (
        "retry",
        "pipeline retry",
        lambda s, d: run_documents.retry_documents(s, _run_of(s, d), [d]),
        {"failed", "cancelled"},
    ),
]


@pytest.fixture(scope="module")
def engine(pipeline_env: dict[str, str]) -> Engine:
    return get_engine(pipeline_env["PIPELINE_DATABASE_URL"])


@pytest.fixture(scope="module")
def document(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> int:
    folder = tmp_path_factory.mktemp("lifecycle")
    write_filings(folder, 1, seed=13, sizes=[21_000])
    (doc_id,) = prepare_run(engine, get_settings(), [str(folder)]).document_ids
    return doc_id


def _put(engine: Engine, doc_id: int, state: str) -> tuple[object, ...]:
    values = dict(STATES[state])
    expires_in = values.pop("expires_in")
    with session_scope(engine) as session:
        now = clock.now(session)
        session.execute(
            update(Document)
            .where(Document.id == doc_id)
            .values(
                **values,
                fence=FENCE,
                lease_scope="s",
                lease_expires_at=None if expires_in is None else now + timedelta(seconds=expires_in),
                finished_at=now if values["status"] in FINAL else None,
            )
        )
    return _row(engine, doc_id)


def _row(engine: Engine, doc_id: int) -> tuple[object, ...]:
    with session_scope(engine) as session:
        row = session.execute(
            select(
                Document.status,
                Document.fence,
                Document.lease_owner,
                Document.lease_expires_at,
                Document.attempts,
            ).where(Document.id == doc_id)
        ).one()
    return tuple(row)


@pytest.mark.parametrize(
    ("name", "who", "write", "moves_from"), WRITERS, ids=[f"{w[0]} by {w[1]}" for w in WRITERS]
)
def test_each_document_writer_moves_only_as_the_table_allows(
    engine: Engine,
    document: int,
    name: str,
    who: str,
    write: Callable[[Session, int], object],
    moves_from: set[str],
) -> None:
    step = lifecycle.move(lifecycle.DOCUMENT_MOVES, name)
    moved: set[str] = set()
    for state in STATES:
        before = _put(engine, document, state)
        with session_scope(engine) as session:
            write(session, document)
        after = _row(engine, document)
        if after == before:
            continue
        moved.add(state)
        assert before[0] in step.sources, f"{name} by {who} moved a document that was {state}"
        assert after[0] in step.targets, f"{name} by {who} made a {state} document {after[0]}"
    assert moved == moves_from


def test_only_an_operators_retry_starts_from_a_final_state_and_every_state_is_reached() -> None:
    assert [m.name for m in lifecycle.DOCUMENT_MOVES if set(m.sources) & FINAL] == ["retry"]
    reached = {t for m in lifecycle.DOCUMENT_MOVES for t in m.targets}
    assert reached == set(DocStatus)
    assert {t for m in lifecycle.RUN_MOVES for t in m.targets} == set(RunStatus)


@pytest.fixture
def run_id(engine: Engine, tmp_path: Path) -> str:
    write_filings(tmp_path, 1, seed=17, sizes=[21_000])
    return prepare_run(engine, get_settings(), [str(tmp_path)]).run_id


@pytest.mark.parametrize("source", list(RunStatus))
def test_each_run_move_starts_only_from_its_sources(engine: Engine, run_id: str, source: RunStatus) -> None:
    """A late writer changes nothing: the watchdog's stall, decided before the report landed,
    or a Ctrl-C's cancel after it, leave a completed run completed."""
    for step in lifecycle.RUN_MOVES:
        for target in step.targets:
            if not step.sources:
                continue
            with session_scope(engine) as session:
                session.execute(update(Run).where(Run.id == run_id).values(status=source))
                moved = run_state.move_run(session, run_id, step.name, target)
                now = session.scalar(select(Run.status).where(Run.id == run_id))
            assert moved == (source in step.sources), f"{step.name} from {source}"
            assert now == (target if moved else source)


def test_the_docs_draw_the_table() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "lifecycle.md").read_text()
    assert lifecycle.diagram() in page, "docs/lifecycle.md: paste lifecycle.diagram() again"
    from pipeline.core import keys

    missing = [key.prefix for key in keys.ALL if f"`{key.prefix}…`" not in page]
    assert not missing, f"docs/lifecycle.md's Redis keys lack {missing}"


def test_statuses_are_written_only_by_the_tables_writers() -> None:
    """Every status write is a move of the table: no module but the writers it names updates a
    document's or a run's status."""
    import re

    root = Path(__file__).resolve().parents[1]
    writers = {
        "pipeline/storage/document_leases.py",
        "pipeline/storage/reclaims.py",
        "pipeline/storage/run_documents.py",
        "pipeline/storage/run_state.py",
    }
    found = []
    for folder in ("pipeline", "workers"):
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text()
            for hit in re.finditer(r"update\((Document|Run|_DOCUMENTS)\)", text):
                statement = text[hit.start() : hit.start() + 600].split("\n\n")[0]
                if re.search(r"\bstatus\b\s*=|\"status\"", statement.split(".values(", 1)[-1]):
                    found.append(str(path.relative_to(root)))
    assert set(found) <= writers and writers <= set(found), found
