"""Synthesize: the run's report from its summaries (a reduce tree when they exceed the
context budget), with the per-filing table and totals, stored; it closes the run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from dataclasses import replace
from datetime import timedelta
from itertools import chain
from typing import TYPE_CHECKING, Any

from pipeline.context import Context, check_spend, spending, stop_check
from pipeline.core.constants import DEFAULT_SYNTHESIZE_MAX_TOKENS
from pipeline.extraction import grounding
from pipeline.llm import prompts, stops
from pipeline.llm.client import CallRecord
from pipeline.reporting import render, report_rows
from pipeline.reporting.reduce import hedge, reduce_to_one
from pipeline.runs.status import RunStatusView, run_status
from pipeline.storage import clock, llm_calls, partials, reports, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import Run, RunStatus, aware

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)

PROMPT_OVERHEAD_TOKENS = 400
PARTIAL_GRACE_S = 5.0
"""Beyond a call's timeout, how long a partial synthesis may take (its task's own steps)."""
PARTIAL_POLL_S = 0.1


def synthesize_run(
    ctx: Context,
    run_id: str,
    *,
    answer: str | None = None,
    failed_attempts: int = 0,
    guard: Callable[[], None] | None = None,
    answering: Callable[[int], bool] | None = None,
) -> RunStatus:
    """Write the run's report (idempotent) and close the run; RUNNING (nothing written) when a
    retry sent documents back while it was made (`reports.save_report`).

    The answer is synthesized from the stored summaries, hierarchically when they exceed
    the context budget. Passing `answer` skips the LLM (used when synthesis failed for good).
    `guard()` runs before the report is written, and raises when this synthesis lost its lease.
    `answering(partial_id)` says whether a live worker answers that partial (its step lease).
    """
    if answer is None:
        _await_partials(ctx, run_id, answering)
        with session_scope(ctx.engine) as session:
            partials.close(session, run_id)  # no partial claims a summary after this
        _await_partials(ctx, run_id, answering)  # those claimed just before it
    run, partial_texts = _load(ctx.engine, run_id)
    levels = 0
    copies: list[Future[str]] = []
    if answer is None:
        model = ctx.llm.pick_model("synthesize", failed_attempts)
        # The summaries are read a page at a time as the synthesis takes them, never all at once.
        items = chain(partial_texts.values(), report_rows.summaries(ctx.engine, run_id, partial_texts))
        answer, levels, copies = _synthesize(ctx, run, items, model)
        levels += 1 if partial_texts else 0
    running = [copy for copy in copies if not copy.done()]  # before the totals: a done one is in them
    view = run_status(ctx.engine, run_id)
    failure = run_failure(view.documents, ctx.settings.run_failure_threshold)
    report = _report_input(ctx.engine, run, answer, view, levels, len(running), failure)
    status = RunStatus.FAILED if failure else RunStatus.COMPLETED
    if guard is not None:
        guard()
    with session_scope(ctx.engine) as session:
        saved = reports.save_report(
            session, run_id, render.markdown(report), render.as_json(report), status, failure
        )
    if not saved:  # a retry sent documents back meanwhile: its finalize reports them
        log.info("run %s: documents were sent again during its synthesis; the report waits for them", run_id)
        return RunStatus.RUNNING
    if running:
        _count_late_copies(ctx, report, running)
    return status


def _count_late_copies(ctx: Context, report: render.ReportInput, running: list[Future[str]]) -> None:
    """The report's totals again once the hedged copies still running when it was written have
    ended (each records its calls as it ends), so that it counts every call of the run. The run
    is closed already: its report was not held back by the slower copies. A copy still running
    after a call's timeout stays named in the totals as one whose calls come after them.

    No guard: the report exists, so no other synthesis of the run writes one (`next_step` says
    done), and these totals are read from the database whoever writes them."""
    wait(running, timeout=ctx.settings.llm_timeout_s + PARTIAL_GRACE_S)
    still = sum(1 for copy in running if not copy.done())
    amended = replace(report, totals=_totals(run_status(ctx.engine, report.run_id), still))
    with session_scope(ctx.engine) as session:
        reports.amend_report(session, report.run_id, render.markdown(amended), render.as_json(amended))


def _await_partials(ctx: Context, run_id: str, answering: Callable[[int], bool] | None = None) -> None:
    """Wait for the partial syntheses still being answered (one sent by the run's last
    documents, typically), so that each summary reaches the report once: through its partial.
    A partial older than a call's timeout is not waited for (its worker died), nor, with
    `answering`, one made more than a lease ago that no live worker answers (its worker died
    holding it, or its task has not started in a lease): the final synthesis reads its
    summaries."""
    with session_scope(ctx.engine) as session:  # partials are made on the database's clock
        made_after = clock.now(session) - timedelta(seconds=ctx.settings.llm_timeout_s + PARTIAL_GRACE_S)
    deadline = time.monotonic() + ctx.settings.llm_timeout_s + PARTIAL_GRACE_S
    while time.monotonic() < deadline:
        with session_scope(ctx.engine) as session:
            waiting = partials.pending(session, run_id, made_after)
            unstarted = clock.now(session) - timedelta(seconds=ctx.settings.lease_s)
        if answering is not None:
            waiting = [(pid, made) for pid, made in waiting if aware(made) > unstarted or answering(pid)]
        if not waiting:
            return
        time.sleep(PARTIAL_POLL_S)


def synthesize_without_answer(
    ctx: Context, run_id: str, reason: str, guard: Callable[[], None] | None = None
) -> RunStatus:
    """The report when synthesis failed for good: the reason instead of an answer, and the
    per-filing table, which does not need the LLM."""
    answer = f"(The synthesis failed: {reason}. The per-filing table below is complete.)"
    return synthesize_run(ctx, run_id, answer=answer, guard=guard)


def _report_input(
    engine: Engine,
    run: Run,
    answer: str,
    view: RunStatusView,
    levels: int = 0,
    still_running: int = 0,
    failure: str | None = None,
) -> render.ReportInput:
    """The report of the run as it stands: its answer, the documents it lists (read in pages;
    past `report_rows.LISTED_ROWS` documents, only those that need a look) and the totals."""
    listed = report_rows.listing(engine, run.id, sum(view.documents.values()))
    return render.ReportInput(
        run_id=run.id,
        name=run.name,
        query=run.query,
        model=run.model,
        simulated=run.simulated,
        answer=answer,
        synthesis_levels=levels,
        documents=listed.documents,
        totals=_totals(view, still_running),
        failure=failure,
        complete=listed.complete,
    )


def report_cancelled(engine: Engine, run_id: str) -> None:
    """The report of a cancelled run: the per-filing tables and the totals of what was done
    before the cancel, and no answer to the run's question (a synthesis would be a new call).
    The run stays cancelled (`reports.keep_report`); `pipeline retry` replaces the report."""
    run, _ = _load(engine, run_id)
    view = run_status(engine, run_id)
    extracted, total = view.documents.get("extracted", 0), sum(view.documents.values())
    answer = (
        f"(The run was cancelled: {run.error or 'no reason recorded'}. No answer was synthesized, "
        f"which would have been a new call. The tables below show what was done before the "
        f"cancel: {extracted} of {total} documents extracted; `pipeline retry {run_id}` "
        "finishes the rest.)"
    )
    report = _report_input(engine, run, answer, view)
    data = {**render.as_json(report), "cancelled": run.error}
    with session_scope(engine) as session:
        reports.keep_report(session, run_id, render.markdown(report), data)


def _load(engine: Engine, run_id: str) -> tuple[Run, dict[int, str]]:
    """The run and its partial syntheses' texts by id (its documents are read in pages, by
    `report_rows`, as the synthesis and the report take them)."""
    with session_scope(engine) as session:
        run = runs.get_run(session, run_id)
        if run is None:
            raise LookupError(f"no run {run_id}")
        partial_texts = partials.completed(session, run_id)
    return run, partial_texts


def _totals(view: RunStatusView, copies_running: int = 0) -> dict[str, Any]:
    """The report's totals, from `run_status` (the figures `pipeline status` shows);
    `copies_running`: hedged synthesis copies whose calls are not in them yet."""
    return {
        "documents": view.documents,
        "llm_calls": view.llm_calls,
        "synthesis_copies_running": copies_running,
        "tokens": view.prompt_tokens + view.completion_tokens,
        "prompt_tokens": view.prompt_tokens,
        "completion_tokens": view.completion_tokens,
        "cached_tokens": view.cached_tokens,
        "grounding": {
            "quotes_total": view.quotes_total,
            "quotes_grounded": view.quotes_grounded,
            "rate": grounding.rate(view.quotes_grounded, view.quotes_total),
        },
        "injection_flagged": view.injection_flagged,
        "confidence": view.confidence,
        "cost_usd": view.cost_usd,
        "mode": view.mode,
        "tiers": {tier: sum(reasons.values()) for tier, reasons in view.tiers.items()},
        "estimate": view.estimate,
        "batch": {
            "answers": view.batch_calls,
            "cost_usd": view.batch_cost_usd,
            "saved_usd": view.batch_saved_usd,
        },
    }


def run_failure(documents: dict[str, int], threshold: float) -> str | None:
    """Why the run counts as failed: more than `threshold` of its documents failed."""
    total = sum(documents.values())
    failed = documents.get("failed", 0)
    if total and failed / total > threshold:
        return f"{failed} of {total} documents failed, over the {threshold:.0%} threshold"
    return None


def batch_budget_tokens(ctx: Context) -> int:
    """How many tokens of summaries one synthesis prompt takes."""
    budget = ctx.settings.context_budget_tokens - DEFAULT_SYNTHESIZE_MAX_TOKENS - PROMPT_OVERHEAD_TOKENS
    return max(budget, 200)


def synthesize_batch(
    ctx: Context, run_id: str, query: str, budget_usd: float | None, batch: list[str], model: str
) -> str:
    """One synthesis call: the run's question answered from `batch`; its calls are recorded."""
    if budget_usd is not None:
        check_spend(ctx, run_id)
    calls: list[CallRecord] = []
    try:
        with stops.checked_by(stop_check(ctx, run_id)):  # a cancelled run's is not asked for
            return ctx.llm.text(
                prompts.synthesize_messages(query, batch),
                stage="synthesize",
                max_tokens=DEFAULT_SYNTHESIZE_MAX_TOKENS,
                sink=spending(ctx, run_id, calls.append) if budget_usd is not None else calls.append,
                model=model,
            )
    finally:
        with session_scope(ctx.engine) as session:
            llm_calls.record_calls(session, run_id, None, None, calls)


def _synthesize(
    ctx: Context, run: Run, items: Iterable[str], model: str
) -> tuple[str, int, list[Future[str]]]:
    """The answer, its levels, and the final call's hedged copies still running."""
    copies: list[Future[str]] = []

    def synthesize(batch: list[str]) -> str:
        return synthesize_batch(ctx, run.id, run.query, run.budget_usd, batch, model)

    def final(batch: list[str]) -> str:
        hedged = hedge(lambda: synthesize(batch), ctx.settings.synthesis_copies)
        copies.extend(hedged.running)
        return hedged.answer

    answer, levels = reduce_to_one(items, batch_budget_tokens(ctx), synthesize, final=final)
    return answer, levels, copies
