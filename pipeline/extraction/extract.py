"""Extracting one document: each chunk not yet answered, then the merge and the upsert."""

from __future__ import annotations

import contextvars
import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pipeline.context import Context, check_spend, database_url, deadline_of, spending, stop_check
from pipeline.core import errors, logs, tracing
from pipeline.extraction import custom
from pipeline.extraction.confidence import Assessed
from pipeline.extraction.escalation import assess_document
from pipeline.extraction.grounding import GroundedExtraction, Source
from pipeline.extraction.prompting import cache_key, chunk_messages, prompt_version
from pipeline.extraction.schemas import FilingExtraction
from pipeline.extraction.signals import TokenProbabilities
from pipeline.llm import stops
from pipeline.llm.circuit import run_deadline
from pipeline.llm.client import CallRecord
from pipeline.storage import document_leases, documents, issued, llm_calls, run_documents
from pipeline.storage.db import session_scope
from pipeline.storage.models import Chunk, Document
from pipeline.storage.second_answers import first_answer

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CustomResult:
    """A user's schema's merged answer, quote fields grounded."""

    data: dict[str, Any]
    quotes_total: int
    quotes_grounded: int


@dataclass
class Attempt:
    """What the task layer learns of a delivery's attempt: the lease it took (None: it took
    none), so that its give-up fails the document only while that lease is the last one."""

    fence: int | None = None


Summarizer = Callable[[str, GroundedExtraction | CustomResult, Callable[[CallRecord], None]], str | None]
"""(the run's question, the document's grounded result, where its calls go) -> its summary
(None: left to finalize)."""


def extract_document(
    ctx: Context,
    document_id: int,
    failed_attempts: int = 0,
    summarize: Summarizer | None = None,
    attempt: Attempt | None = None,
) -> str:
    """Extract and store one document under a lease; returns its final status.

    Chunks answered by an earlier attempt (same prompt version), or by an earlier run for the
    same text, are not sent again; once `failed_attempts` reach the configured threshold,
    calls go to the fallback model. Raises RetryableError for transient failures (Deferred
    when the document is handed back to the queue on purpose), PermanentError when the
    document cannot be extracted (recorded as its failure while the lease holds), LeaseLost when
    another worker took the document over (nothing more is written), UnknownToDatabase when
    this database has no such document. A document of a cancelled run makes no call from then
    on and ends `cancelled` (the check before each call: `pipeline.llm.stops`).

    `summarize` (the task layer compresses there) gets the grounded result in memory; the
    extraction, its risk factors, its summary, the summary's calls and the document's status
    are then written in one transaction: whoever waits for every document to be final
    (finalize) never finds one whose summary is still being written.
    """
    started = time.monotonic()
    with ctx.leases.claiming(document_id) as mine:
        if not mine:  # another thread of this process has it: this delivery is a duplicate
            return current_status(ctx, document_id)
        work = _start(ctx, document_id, failed_attempts)
        if work is None:
            return current_status(ctx, document_id)
        if attempt is not None:
            attempt.fence = work.fence
        check = stop_check(ctx, work.doc.run_id)
        attributes = {"run.id": work.doc.run_id, "document.id": document_id, "document.fence": work.fence}
        with tracing.span("extract document", attributes, parent=work.doc.trace_parent) as current:
            try:
                with stops.checked_by(check):
                    status = _extract(ctx, work, started, summarize, check)
            except errors.RunCancelled as exc:
                status = _cancelled(ctx, work.doc, str(exc))
            current.set_attribute("document.status", status)
            return status


def _cancelled(ctx: Context, doc: Document, reason: str) -> str:
    """The run was cancelled while this delivery held the document: it ends `cancelled` (if
    `pipeline cancel` has not ended it already), and what was answered stays for a retry."""
    log.info("document %s: its run %s was cancelled: %s", doc.id, doc.run_id, reason)
    with session_scope(ctx.engine) as session:
        run_documents.cancel_documents(session, doc.run_id, reason, [doc.id])
    return current_status(ctx, doc.id)


def _extract(
    ctx: Context, work: _Work, started: float, summarize: Summarizer | None, check: stops.Check | None = None
) -> str:
    """The started document's chunks, merge, summary and one closing write, under its lease
    (an outage of the endpoint is waited out until the run's deadline, when it has one and
    PIPELINE_OUTAGE_TOLERANCE_S is unset)."""
    document_id = work.doc.id
    with ctx.leases.holding(document_id, work.fence), run_deadline(deadline_of(ctx, work.doc.run_id)):
        if check is not None:  # under the lease's watch: a Redis that never answers loses it the lease
            check()  # a delivery of a cancelled run's document starts nothing
        try:
            answers = _answer_chunks(ctx, work, started)
            model = Counter(model for _, model in answers).most_common(1)[0][0]
            parts = [part for part, _ in answers]
            # The 10-K schema: merged, grounded, each field scored (the doubtful ones escalated).
            result = _custom_result(work, parts) if work.schema else assess_document(ctx, work, parts)
            summary: str | None = None
            calls: list[CallRecord] = []
            if summarize is not None and not _budget_spent(ctx, work):
                sink = spending(ctx, work.doc.run_id, calls.append) if work.capped else calls.append
                summary = summarize(
                    work.query, result.grounded if isinstance(result, Assessed) else result, sink
                )
            try:
                with (
                    tracing.span("store extraction", {"llm.calls": len(calls)}),
                    session_scope(ctx.engine) as session,  # the lease's check and lock come first
                ):
                    document_leases.mark_extracted(session, document_id, work.fence)
                    _save(session, work, result, model, summary)
                    llm_calls.record_calls(session, work.doc.run_id, document_id, None, calls)
            except BaseException:
                _record_anyway(ctx, work, calls)  # the summary was paid for
                raise
        except errors.PermanentError as exc:
            with session_scope(ctx.engine) as session:  # only while the lease holds
                document_leases.hold(session, document_id, work.fence)
                document_leases.fail_document(session, document_id, str(exc), work.fence)
            raise
        except (errors.LeaseLost, errors.RetryableError):
            raise  # lost, or handed back already
        except BaseException:
            _release(ctx, document_id, work.fence)
            raise
    return "extracted"


def _record_anyway(ctx: Context, work: _Work, calls: list[CallRecord]) -> None:
    """Best effort, when the closing write failed: the summary's calls in a transaction of
    their own (the database may be what failed)."""
    if not calls:
        return
    try:
        with session_scope(ctx.engine) as session:
            llm_calls.record_calls(session, work.doc.run_id, work.doc.id, None, calls)
    except Exception as exc:
        log.info("document %s: the summary's call records are lost (%s)", work.doc.id, exc)


def _budget_spent(ctx: Context, work: _Work) -> bool:
    """The run's budget is spent: the document is stored without a summary (finalize falls
    back to one made from its fields)."""
    if not work.capped:
        return False
    run_id = work.doc.run_id
    try:
        check_spend(ctx, run_id)
    except errors.BudgetSpent:
        return True
    return False


def _grace_s(ctx: Context, exc: BaseException | None = None) -> float:
    """How long a released document waits for its retry before a live worker reclaims it: a
    lease, past the wait the error asks for. The task layer sets it to the retry's own
    countdown (`retry_due`); a reclaim that comes before the retry is harmless."""
    wait = exc.retry_after_s if isinstance(exc, errors.RetryableError) and exc.retry_after_s else 0.0
    return ctx.leases.lease_s + wait


def retry_due(ctx: Context, document_id: int, countdown_s: float) -> None:
    """The released document's retry is due in `countdown_s`: reclaim waits that long, and a
    lease more, for it."""
    with session_scope(ctx.engine) as session:
        document_leases.expect_retry(session, document_id, countdown_s + ctx.leases.lease_s)


def _release(ctx: Context, document_id: int, fence: int) -> None:
    """Best effort (the database may be what failed): the heartbeat releases it otherwise."""
    try:
        with session_scope(ctx.engine) as session:
            document_leases.release_lease(session, document_id, fence, _grace_s(ctx))
    except Exception as exc:
        log.info("document %s: lease %s left to the heartbeat to release (%s)", document_id, fence, exc)
        ctx.leases.release_later(document_id, fence)


@dataclass
class _Work:
    """A started document: what its extraction needs, loaded in one transaction."""

    doc: Document
    text: str
    chunks: list[Chunk]
    schema: str | None
    version: str
    """The prompt version its answers are asked and stored in (the run's, its schema's)."""
    query: str
    """The run's question (what the summary is written for)."""
    capped: bool
    """The run has a budget: each call holds its largest cost against it (`context.spending`)."""
    service_tier: str | None
    """"flex" for a flex run (or an auto run the planner sent to flex): its extract calls go at
    flex processing's tier..."""
    standard_from: float | None
    """...until then (epoch seconds), when only the standard tier still makes the deadline."""
    failed_attempts: int
    fence: int
    """This attempt's lease: every write it makes is refused once the fence moved on."""
    xbrl_revenue: tuple[float, str] | None  # the filing's own revenue fact (value, concept)
    verified_at: float = field(default_factory=time.monotonic)
    """When a write last proved the lease (monotonic seconds)."""


def _start(ctx: Context, document_id: int, failed_attempts: int) -> _Work | None:
    """Count the attempt and load the document, its text and chunks (filling those an earlier
    run answered for the same text); None when the document is final or out of attempts."""
    with session_scope(ctx.engine) as session:
        doc = document_leases.start_document(
            session,
            document_id,
            ctx.settings.document_max_attempts,
            ctx.leases.owner,
            ctx.leases.lease_s,
            scope=ctx.leases.scope,
            owner_idle=True,  # claimed by this thread: no other of the process works on it
        )
        if doc is None:
            return None
        logs.bind(run_id=doc.run_id)
        text, run = documents.text_and_run(session, doc)
        chunks = documents.chunks_of(session, document_id)
        if run.reuse_answers and not run.schema:
            documents.reuse_answers(session, doc, chunks, ctx.llm.extract_model_names(), run.prompt_version)
        return _Work(
            doc=doc,
            text=text,
            chunks=chunks,
            schema=run.schema,
            version=prompt_version(run.schema, run.prompt_version),
            query=run.query,
            capped=run.budget_usd is not None,
            service_tier="flex" if run.extract_tier == "flex" else None,
            standard_from=run.standard_from.timestamp() if run.standard_from else None,
            failed_attempts=max(failed_attempts, doc.attempts - 1),  # earlier deliveries count too
            fence=doc.fence,
            xbrl_revenue=documents.xbrl_revenue(session, document_id) if not run.schema else None,
        )


def _answer_chunks(ctx: Context, work: _Work, started: float) -> list[tuple[BaseModel, str]]:
    """Each chunk's answer and model, in order, within the task's time budget.

    With the process's chunk pool, the chunks not answered yet go to it together: a document's
    calls then overlap instead of forming a chain as long as its chunk count (a 1 MB filing has
    about 60), while the pool keeps the process's calls in flight at its concurrency. The
    first failure in chunk order is raised once every chunk is done, as the loop without the
    pool would have raised it. A failure stops the chunks not yet begun (a lost lease would
    only have their answers refused); the answers of those begun are stored.
    """

    def answer(chunk: Chunk) -> tuple[BaseModel, str]:
        now = time.monotonic()
        if now - started > ctx.settings.task_time_budget_s:
            raise errors.Deferred("the task ran past its time budget; answered chunks kept", 0.0)
        if ctx.stopping.is_set():  # a warm shutdown waits for the calls in flight, not whole documents
            raise errors.Deferred("the worker is stopping; answered chunks kept", 0.0)
        if now - work.verified_at > ctx.leases.lease_s / 2:
            # Long since a write proved the lease (a pause, a long queue in the pool): prove it
            # before paying for a call whose answer would be refused.
            with session_scope(ctx.engine) as session:
                document_leases.hold(session, work.doc.id, work.fence)
        result = _chunk_result(ctx, work, chunk)
        if not _answered(chunk, work.version):
            work.verified_at = time.monotonic()  # its answer was stored under the lease
        return result

    try:
        pending = [c for c in work.chunks if not _answered(c, work.version)]
        if ctx.chunk_pool is None or len(pending) < 2:
            return [answer(chunk) for chunk in work.chunks]
        futures = {
            chunk.idx: ctx.chunk_pool.submit(contextvars.copy_context().run, answer, chunk)
            for chunk in pending
        }

        def stop_the_rest(done: Future[tuple[BaseModel, str]]) -> None:
            # Run by the pool thread that finished `done`, before it takes the next chunk.
            if not done.cancelled() and done.exception() is not None:
                for future in futures.values():
                    future.cancel()

        for future in futures.values():
            future.add_done_callback(stop_the_rest)
        wait(futures.values(), return_when=FIRST_EXCEPTION)
        # A cancelled chunk counts as done only once a pool thread reaches it in the queue:
        # wait for the chunks begun, not for the queue.
        wait([f for f in futures.values() if not f.cancel()])
        return [
            futures[c.idx].result() if c.idx in futures else answer(c)
            for c in work.chunks
            if not (c.idx in futures and futures[c.idx].cancelled())  # a failure before stopped it
        ]
    except errors.RetryableError as exc:
        # Handed back to the task layer, which retries with backoff (or defers): not a lost
        # delivery. The stored count is for deliveries that never came back (a worker died).
        with session_scope(ctx.engine) as session:
            document_leases.release_for_retry(session, work.doc.id, work.fence, _grace_s(ctx, exc))
        raise


def _custom_result(work: _Work, parts: list[BaseModel]) -> CustomResult:
    data, total, grounded = custom.ground(
        custom.merge([p.model_dump(mode="json") for p in parts]), Source(work.text)
    )
    return CustomResult(data, total, grounded)


def _save(
    session: Session, work: _Work, result: Assessed | CustomResult, model: str, summary: str | None
) -> None:
    if isinstance(result, CustomResult):
        documents.save_custom_extraction(
            session,
            work.doc,
            result.data,
            quotes_total=result.quotes_total,
            quotes_grounded=result.quotes_grounded,
            model=model,
            prompt_version=work.version,
            summary=summary,
        )
    else:
        documents.save_extraction(
            session, work.doc, result, model=model, prompt_version=work.version, summary=summary
        )


def _chunk_result(ctx: Context, work: _Work, chunk: Chunk) -> tuple[BaseModel, str]:
    """The chunk's answer and the model that gave it: stored, or asked for now."""
    doc, schema = work.doc, work.schema
    if _answered(chunk, work.version):
        answer_model = custom.load_schema(schema) if schema else FilingExtraction
        return answer_model.model_validate(first_answer(chunk.result or {})), chunk.model or ctx.llm.model
    # A capped run's call holds its largest cost against the budget (in the client): no check here.
    model = ctx.llm.pick_model("extract", work.failed_attempts)
    count = len(work.chunks)
    messages, answer_model = chunk_messages(chunk, work.text, count, schema, doc=doc, version=work.version)
    calls: list[CallRecord] = []
    token_p = TokenProbabilities()
    try:
        result = ctx.llm.structured(
            messages,
            answer_model,
            stage="extract",
            max_tokens=ctx.settings.extract_max_tokens,
            sink=spending(ctx, doc.run_id, calls.append) if work.capped else calls.append,
            model=model,
            service_tier=work.service_tier,
            standard_from=work.standard_from,
            on_logprobs=token_p.read if ctx.settings.llm_logprobs and not schema else None,
            cache_key=cache_key(doc, work.version),
        )
    except errors.PipelineError:
        with session_scope(ctx.engine) as session:
            llm_calls.record_calls(session, doc.run_id, doc.id, chunk.idx, calls)
        raise
    try:
        with session_scope(ctx.engine) as session:
            llm_calls.record_calls(session, doc.run_id, doc.id, chunk.idx, calls)
            documents.save_chunk_result(
                session,
                chunk,
                work.fence,
                result,
                model=model,
                prompt_version=work.version,
                token_p=token_p.found,
            )
        chunk.token_p = token_p.found  # the detached row the document's assessment reads
    except errors.LeaseLost:
        with session_scope(ctx.engine) as session:  # the answer is refused; what it cost is not
            llm_calls.record_calls(session, doc.run_id, doc.id, chunk.idx, calls)
        raise
    return result, model


def _answered(chunk: Chunk, version: str) -> bool:
    """Whether the chunk holds an answer to this prompt (from an earlier attempt or run)."""
    return chunk.result is not None and chunk.prompt_version == version


def note_retry(ctx: Context, document_id: int, reason: str) -> None:
    """Remember why an attempt failed; the document is retried."""
    with session_scope(ctx.engine) as session:
        document_leases.note_attempt_error(session, document_id, reason, ctx.leases.owner)


def fail(ctx: Context, document_id: int, reason: str, attempt: Attempt) -> str:
    """Record that the document cannot be extracted, and why: the verdict of `attempt`, so only
    while no later lease or reclaim took the document from it."""
    with session_scope(ctx.engine) as session:
        document_leases.fail_document(session, document_id, reason, attempt.fence)
    return current_status(ctx, document_id)


def current_status(ctx: Context, document_id: int) -> str:
    """The document's status; raises UnknownToDatabase when this database has no such document
    (a worker on another database than the producer's must not acknowledge it as done), or
    DeletedFromDatabase when it issued its id and deleted it since (the message ends)."""
    with session_scope(ctx.engine) as session:
        doc = session.get(Document, document_id)
        if doc is None:
            if issued.document_id_issued(session, document_id):
                raise errors.DeletedFromDatabase(f"document {document_id}", database_url(ctx.engine))
            raise errors.UnknownToDatabase(f"document {document_id}", database_url(ctx.engine))
        return doc.status
