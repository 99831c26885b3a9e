"""The dead_letters view: every document of every run that did not end extracted, with the
class of its reason, on Postgres and on SQLite, as analysts query it (`select * from
dead_letters`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text, update

from pipeline.core.errors import BudgetSpent
from pipeline.llm.ratelimit.budget import SpendMeter
from pipeline.runs.cancel import document_reason
from pipeline.storage import document_leases
from pipeline.storage.db import dispose_engines, get_engine, session_scope, upgrade
from pipeline.storage.models import Document, DocumentAttempt, Run

COLUMNS = [
    "run_id",
    "run_name",
    "run_status",
    "document_id",
    "path",
    "status",
    "reason_class",
    "error",
    "attempts",
    "rounds",
    "finished_at",
    "run_created_at",
]

# (status, error, class): the errors as the pipeline writes them (the task layer's give-ups, the
# LLM client's refusals, the circuit breaker's outage, the limiter's, intake's, a cancel's).
CASES = [
    (
        "failed",
        "the endpoint refused the API key (PIPELINE_LLM_API_KEY): AuthenticationError: 401",
        "provider refused",
    ),
    ("failed", "the endpoint has no such model (PIPELINE_LLM_MODEL): NotFoundError: 404", "provider refused"),
    (
        "failed",
        "the endpoint rejects structured output as json_schema (no mode was left): 400",
        "provider refused",
    ),
    (
        "failed",
        "the request exceeds the model's context window (set PIPELINE_MODEL_CONTEXT_TOKENS …)",
        "provider refused",
    ),
    ("failed", "answer did not validate after repair: company: Field required", "invalid output"),
    (
        "failed",
        "gave up after 9 attempts: MalformedAnswer: answer was not JSON, even after repair",
        "invalid output",
    ),
    (
        "failed",
        "gave up after 9 attempts: UpstreamUnavailable: InternalServerError: Error code: 503",
        "outage",
    ),
    ("failed", "gave up after 9 attempts: RateLimited: RateLimitError: Error code: 429", "outage"),
    (
        "failed",
        "gave up after 9 attempts: OperationalError: (psycopg.OperationalError) server closed",
        "outage",
    ),
    (
        "failed",
        "the LLM endpoint 127.0.0.1:8900 has been unavailable for 7201 s (circuit open since "
        "2026-12-03T01:00:00Z, 41 probes failed): waited past PIPELINE_OUTAGE_TOLERANCE_S=7200",
        "outage",
    ),
    ("failed", "one call needs about 200,000 tokens, more than the 100,000-token quota per window", "input"),
    ("failed", "internal error: KeyError: 'company'", "internal error"),
    ("failed", "a reason nobody wrote a class for", "other"),
    ("skipped", "not a text file (binary content)", "input"),
    ("cancelled", document_reason("`pipeline cancel` on host-1: wrong inbox"), "cancelled"),
]


@pytest.fixture(params=["postgres", "sqlite"])
def engine(request: pytest.FixtureRequest, postgres_url: str | None, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "postgres":
        if postgres_url is None:
            pytest.skip("no Postgres server reachable")
        url = postgres_url
    else:
        url = f"sqlite:///{tmp_path / 'dead_letters.db'}"
    upgrade(url)
    yield get_engine(url)
    if request.param == "sqlite":
        dispose_engines()


def _budget_message() -> str:
    """What a capped run's spent budget says (the meter's own words)."""
    with pytest.raises(BudgetSpent) as raised:
        SpendMeter(None).check("run", lambda: (1.0, 1.0))
    return str(raised.value)


def _gave_up_message(engine: Engine, run_id: str) -> str:
    """What a document whose deliveries never came back says, failed by the lease itself."""
    with session_scope(engine) as session:
        doc = Document(run_id=run_id, path="lost.txt", status="pending", attempts=5)
        session.add(doc)
        session.flush()
        document_leases.start_document(session, doc.id, 5, "owner", 30.0)
        session.flush()
        session.refresh(doc)
        assert doc.status == "failed" and doc.error
        return doc.error


def test_the_view_lists_every_documents_failure_with_its_reason_class(engine: Engine) -> None:
    run_id = uuid.uuid4().hex
    with session_scope(engine) as session:
        session.add(Run(id=run_id, name="nightly", query="q", model="m", prompt_version="p", status="failed"))
        session.flush()  # no relationship orders the inserts
        for i, (status, error, _) in enumerate(CASES):
            session.add(Document(run_id=run_id, path=f"f{i}.txt", status=status, error=error, attempts=1))
        session.add(Document(run_id=run_id, path="good.txt", status="extracted"))
        budget = Document(run_id=run_id, path="budget.txt", status="failed", error=_budget_message())
        session.add(budget)
    gave_up = _gave_up_message(engine, run_id)
    with session_scope(engine) as session:  # the budget document was tried twice before
        session.execute(update(Document).where(Document.id == budget.id).values(attempts=2))
        for n in (1, 2):
            session.add(
                DocumentAttempt(document_id=budget.id, run_id=run_id, round=n, status="failed", attempts=5)
            )

    with engine.connect() as conn:
        result = conn.execute(text("select * from dead_letters where run_id = :run"), {"run": run_id})
        assert list(result.keys()) == COLUMNS
        rows = [dict(row._mapping) for row in result]

    classes = {row["error"]: row["reason_class"] for row in rows}
    expected = {error: reason for _, error, reason in CASES}
    assert classes == {**expected, _budget_message(): "budget", gave_up: "gave up"}
    by_path = {row["path"]: row for row in rows}
    assert "good.txt" not in by_path, "an extracted document is no dead letter"
    assert by_path["budget.txt"]["rounds"] == 3 and by_path["f0.txt"]["rounds"] == 1
    assert {row["run_name"] for row in rows} == {"nightly"} and {row["run_status"] for row in rows} == {
        "failed"
    }
