"""Streaming synthesis: the first level of the report's reduce tree, made while the run extracts.

Each time a document is done, the run's summaries that no partial holds yet are looked at; once
they fill half a synthesis prompt, they are claimed, and a task of its own answers them as one
partial synthesis (the document's task, which may be the run's last, does not wait for it). The
final synthesis then reads the partials and the few summaries left over, usually in one call,
instead of waiting for a whole level of calls after the last extraction.
"""

from __future__ import annotations

import logging

from pipeline.context import Context
from pipeline.reporting.synthesize import batch_budget_tokens, synthesize_batch
from pipeline.storage import partials
from pipeline.storage.db import session_scope

log = logging.getLogger(__name__)

STREAM_BATCH_SHARE = 0.5
"""A partial takes summaries worth half a synthesis prompt: what is left over at the end (less
than half) and the partials' answers then fit the final prompt together for runs of a few
thousand filings."""


def claim_ready(ctx: Context, document_id: int) -> int | None:
    """Claim a batch of the document's run's summaries for a partial synthesis when enough
    wait for one; returns the partial's id (`synthesize_partial` answers it)."""
    prompt_tokens = batch_budget_tokens(ctx)
    with session_scope(ctx.engine) as session:
        return partials.claim_batch(
            session, document_id, int(prompt_tokens * STREAM_BATCH_SHARE), prompt_tokens
        )


def give_back(ctx: Context, partial_id: int) -> None:
    """The claim's summaries go back (for a later batch or the final synthesis)."""
    with session_scope(ctx.engine) as session:
        partials.release(session, partial_id)


def synthesize_partial(ctx: Context, partial_id: int) -> str:
    """Answer a claimed partial synthesis. When the call fails, its summaries go back (for a
    later batch or the final synthesis) and the error is raised."""
    with session_scope(ctx.engine) as session:
        claim = partials.load_claim(session, partial_id)
    if claim is None:
        return "not needed"
    try:
        model = ctx.llm.pick_model("synthesize", 0)
        text = synthesize_batch(ctx, claim.run_id, claim.query, claim.budget_usd, claim.summaries, model)
    except BaseException:
        give_back(ctx, partial_id)
        raise
    with session_scope(ctx.engine) as session:
        partials.complete(session, partial_id, text)
    log.info("run %s: partial synthesis %s of %d summaries", claim.run_id, partial_id, len(claim.summaries))
    return "done"
