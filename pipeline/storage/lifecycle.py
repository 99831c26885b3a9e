"""The document and run lifecycles, as one table: each state, the moves between them, who makes
each move and under which fence.

Every status write goes through a move of this table. For runs, `run_state.move_run` takes the
move and writes only from one of its sources, so a late writer cannot undo a later state (a
watchdog's stall over a report that just landed, a Ctrl-C's cancel over a completed run). For
documents, each move is one statement of `pipeline.storage.document_leases`, `reclaims` or
`run_documents` whose WHERE clause is the move's sources and fence; `tests/test_lifecycle.py`
drives every one of them from every state on the database and checks the outcome against this
table. `docs/lifecycle.md` draws it
(`diagram()`; a test keeps the two the same).

A fence is the document's `fence` column: each lease taken or reclaimed raises it, and every
write of a lease's holder names the fence it took, so a holder whose lease was taken writes
nothing. "Expired" is read on the database's clock (`pipeline.storage.clock`), never a host's.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.storage.models import DocStatus, RunStatus


@dataclass(frozen=True)
class Move:
    name: str
    sources: tuple[str, ...]
    """The states it may start from (none: the row is created by the move)."""
    targets: tuple[str, ...]
    by: str
    """Who makes it (the function that writes it)."""
    fence: str
    """What must hold for it to happen, besides the source state."""


_P, _R, _E, _F, _S, _C = (
    DocStatus.PENDING,
    DocStatus.RUNNING,
    DocStatus.EXTRACTED,
    DocStatus.FAILED,
    DocStatus.SKIPPED,
    DocStatus.CANCELLED,
)

DOCUMENT_MOVES: tuple[Move, ...] = (
    Move("store", (), (_P, _S, _F), "the producer (`intake.add_document`)", "a new row"),
    Move(
        "lease",
        (_P, _R),
        (_R,),
        "a delivery (`document_leases.start_document`)",
        "no live lease of another owner's (expired on the database's clock), attempts left; "
        "the fence is raised",
    ),
    Move(
        "renew",
        (_R,),
        (_R,),
        "the holder's heartbeat (`document_leases.renew_leases`)",
        "the holder's fence, and its thread made progress within its calls' bound",
    ),
    Move(
        "release",
        (_R,),
        (_R,),
        "the holder, before its retry is queued (`document_leases.release_lease`, `release_for_retry`)",
        "the holder's fence; the owner is cleared, a reclaim waits a grace period",
    ),
    Move(
        "reclaim",
        (_R,),
        (_R,),
        "a live worker's heartbeat (`reclaims.reclaim_expired`)",
        "the lease expired on the database's clock, its owner has no heartbeat (or is this "
        "process, its thread stuck), the fence as read; the fence is raised",
    ),
    Move(
        "reclaim delivery",
        (_P,),
        (_R,),
        "a live worker's heartbeat (`reclaims.reclaim_unstarted`)",
        "the owner that received its delivery has no heartbeat; the fence is raised",
    ),
    Move("extract", (_R,), (_E,), "the holder (`document_leases.mark_extracted`)", "the holder's fence"),
    Move(
        "fail",
        (_R,),
        (_F,),
        "the holder's last attempt (`document_leases.fail_document`)",
        "the attempt's fence (no later lease or reclaim since)",
    ),
    Move(
        "fail unstarted",
        (_P,),
        (_F,),
        "a delivery that never leased it (`document_leases.fail_document`, no fence)",
        "nobody has started it",
    ),
    Move(
        "give up",
        (_P, _R),
        (_F,),
        "a delivery that finds its attempts used up (`document_leases.start_document`)",
        "no live lease of another owner's",
    ),
    Move(
        "cancel",
        (_P, _R),
        (_C,),
        "`pipeline cancel`, or a delivery that finds its run cancelled (`run_documents.cancel_documents`)",
        "the run is cancelled; the fence is raised, so a holder's next write is refused",
    ),
    Move(
        "retry",
        (_F, _C),
        (_P,),
        "`pipeline retry` (`run_documents.retry_documents`)",
        "the round is kept in document_attempts; its attempts count from 0 again; the fence is raised",
    ),
)
"""Extracted, failed, skipped and cancelled are final: only an operator's retry starts from one
(failed or cancelled)."""

RUN_MOVES: tuple[Move, ...] = (
    Move("create", (), (RunStatus.PENDING,), "the producer (`intake.create_run`)", "a new row"),
    Move(
        "start",
        (RunStatus.PENDING,),
        (RunStatus.RUNNING,),
        "the producer, once its documents are stored or its first ones start early",
        "none",
    ),
    Move(
        "refuse",
        (RunStatus.PENDING,),
        (RunStatus.FAILED,),
        "the producer, when no document is usable",
        "none",
    ),
    Move(
        "stall",
        (RunStatus.PENDING, RunStatus.RUNNING),
        (RunStatus.STALLED,),
        "the watchdog (`runs.watchdog.check`)",
        "no activity for PIPELINE_WATCHDOG_IDLE_S on the database's clock, and resuming did not help",
    ),
    Move(
        "revive",
        (RunStatus.STALLED,),
        (RunStatus.RUNNING,),
        "a document of the run ending (`run_state.revive`)",
        "none",
    ),
    Move(
        "resume",
        (RunStatus.PENDING, RunStatus.STALLED, RunStatus.CANCELLED, RunStatus.FAILED),
        (RunStatus.RUNNING,),
        "`pipeline resume`, the watchdog (`runs.resume.plan_resume`)",
        "the run has no report",
    ),
    Move(
        "report",
        (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.STALLED),
        (RunStatus.COMPLETED, RunStatus.FAILED),
        "the run's one report step (`reports.save_report`)",
        "every document final and the run fully stored (`finalize.next_step`); the report step "
        "lease. A cancelled run's report (`reports.keep_report`) leaves it cancelled",
    ),
    Move(
        "cancel",
        (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.STALLED),
        (RunStatus.CANCELLED,),
        "`pipeline cancel`, `pipeline run` stopped by a signal, or `submit` stopped before its "
        "documents were stored (`runs.cancel.cancel_run`)",
        "none",
    ),
    Move(
        "retry",
        (RunStatus.RUNNING, RunStatus.STALLED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED),
        (RunStatus.RUNNING,),
        "`pipeline retry` (`runs.retry.start_retry`)",
        "the run fully stored, with documents to retry; its report is dropped for the new one",
    ),
)
"""A report ends a run (completed or failed; a cancelled run stays cancelled); `pipeline retry`
starts it again for its failed or cancelled documents, and `pipeline resume` finishes one
without a report."""


def move(table: tuple[Move, ...], name: str) -> Move:
    for found in table:
        if found.name == name:
            return found
    raise KeyError(name)


def diagram() -> str:
    """Both lifecycles as Mermaid state diagrams, each with its table of moves
    (`docs/lifecycle.md`)."""
    lines: list[str] = []
    for title, table in (("Document", DOCUMENT_MOVES), ("Run", RUN_MOVES)):
        lines += [f"### {title}", "", "```mermaid", "stateDiagram-v2"]
        for m in table:
            for source in m.sources or ("[*]",):
                for target in m.targets:
                    lines.append(f"    {source} --> {target}: {m.name}")
        lines += ["```", "", "| move | from | to | by | only when |", "|---|---|---|---|---|"]
        for m in table:
            sources = ", ".join(m.sources) or "(new row)"
            lines.append(f"| {m.name} | {sources} | {', '.join(m.targets)} | {m.by} | {m.fence} |")
        lines.append("")
    return "\n".join(lines)
