"""Scoring a document's fields, with second answers where they are asked for: the verification
sample (PIPELINE_VERIFY_SHARE) and the escalation of doubtful fields (PIPELINE_ESCALATE_MODEL).

A second answer is the chunk's own extraction prompt sent again (to the escalation model when
there is one, else to the same model), never the whole document: only the chunks that state a
doubtful field go, so escalation costs a share of what asking the stronger model for everything
would. Its calls are recorded under their own stage (`verify`, `escalate`) and model, so the
report can say what each tier cost. Second answers are kept with their chunk's answer
(`pipeline.storage.second_answers`): a retried or redelivered document, or a later run of the same
text, does not ask them again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel

from pipeline.context import Context, escalation_llm, spending
from pipeline.core import errors
from pipeline.extraction import filed
from pipeline.extraction.confidence import SCALAR_FIELDS, Assessed, Assessor
from pipeline.extraction.grounding import Source
from pipeline.extraction.prompting import cache_key, chunk_messages
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm.client import CallRecord
from pipeline.storage import llm_calls, second_answers
from pipeline.storage.db import session_scope
from pipeline.storage.models import Chunk, Document

log = logging.getLogger(__name__)

SAMPLED = 0.8
"""The temperature of a verification answer by the extraction's own model: a sample, so that
agreement says something (self-consistency)."""

_HOME = {"company": ("Cover",), "fiscal_year": ("Cover",), "revenue_usd": ("Item 7", "Item 8")}
"""The sections filings state each scalar field in (a document without them: its first chunk)."""


class Started(Protocol):
    """What second answers need of a started document (`extract._Work` has it)."""

    doc: Document
    text: str
    chunks: list[Chunk]
    version: str
    """The prompt version the chunks were asked in (the run's): second answers are asked alike."""
    fence: int
    """The document's lease: second answers are kept only while it holds."""
    capped: bool
    xbrl_revenue: tuple[float, str] | None


def assess_document(ctx: Context, work: Started, answers: Sequence[BaseModel]) -> Assessed:
    """The merged extraction of `answers` (one per chunk) with a confidence per field, after the
    verification sample's second answers and the escalation of fields scoring too low."""
    parts = [a for a in answers if isinstance(a, FilingExtraction)]
    assessor = Assessor(Source(work.text), [(c.char_start, c.char_end) for c in work.chunks])
    token_p = [c.token_p for c in work.chunks]
    assessed = assessor.assess(parts, token_p=token_p)
    settings = ctx.settings
    if in_sample(work.doc.id, settings.verify_share):
        everything = [*SCALAR_FIELDS, *(f"risk:{i}" for i in range(len(assessed.risks)))]
        chunks = assessed.chunks_of(everything, _home_chunks(work.chunks))
        # A second model, or the same one sampled (at temperature 0 it would only repeat itself).
        model = settings.escalate_model or ctx.llm.model
        second = _ask(ctx, work, sorted(chunks), model, "verify", 0.0 if settings.escalate_model else SAMPLED)
        assessed = assessor.assess(parts, second, token_p)
    assessed = filed.check_revenue(assessed, work.xbrl_revenue)  # a disagreement is escalated
    if settings.escalate_model:
        low = [
            name
            for name in assessed.below(settings.escalate_below)
            if _escalated(name, settings.escalate_fields)
        ]
        if low:
            chunks = assessed.chunks_of(low, _home_chunks(work.chunks))
            better = _ask(ctx, work, sorted(chunks), settings.escalate_model, "escalate")
            assessed = assessor.escalate(assessed, low, parts, better)
            log.info(
                "document %s: escalated %s of %s doubtful fields (%s chunks asked of %s)",
                work.doc.id,
                len(assessed.escalated),
                len(low),
                len(better),
                settings.escalate_model,
            )
    assessed = filed.check_revenue(assessed, work.xbrl_revenue)  # an escalated figure, checked too
    doc = work.doc
    sources = (doc.intake or {}).get("metadata_source") or {}
    where = ", ".join(sorted({sources.get("company", ""), sources.get("fiscal_year", "")} - {""}))
    return filed.cross_check(assessed, doc.company_name, doc.fiscal_year, where or "the filing")


def in_sample(document_id: int, share: float) -> bool:
    """Whether the document is in the verification sample: a stable draw from its id."""
    if share <= 0:
        return False
    draw = int.from_bytes(hashlib.sha256(f"verify:{document_id}".encode()).digest()[:8], "big") / 2**64
    return draw < share


def _escalated(name: str, fields: str) -> bool:
    """Whether field `name` ('risk:N' for a risk factor) is one PIPELINE_ESCALATE_FIELDS names."""
    wanted = {f.strip() for f in fields.split(",")}
    return ("risk_factors" if name.startswith("risk:") else name) in wanted


def _home_chunks(chunks: Sequence[Chunk]) -> dict[str, int]:
    """For each scalar field, the first chunk of the section filings state it in, else the
    document's first chunk."""
    found: dict[str, int] = {}
    for name, sections in _HOME.items():
        at = next((i for i, c in enumerate(chunks) if c.section in sections), 0 if chunks else None)
        if at is not None:
            found[name] = at
    return found


def _ask(
    ctx: Context, work: Started, positions: Sequence[int], model: str, stage: str, temperature: float = 0.0
) -> dict[int, FilingExtraction]:
    """Each chunk's (by position) second answer from `model`; a chunk whose call fails is left
    out (the first answer stands); a cancelled run, or a call whose largest cost does not fit
    what the run's budget has left, stops the asking."""
    answers: dict[int, FilingExtraction] = {}
    llm = escalation_llm(ctx)
    for position in positions:
        chunk = work.chunks[position]
        if (kept := second_answers.stored(chunk, model, temperature)) is not None:
            answers[position] = FilingExtraction.model_validate(kept)  # paid by an earlier attempt
            continue
        messages, _ = chunk_messages(
            chunk, work.text, len(work.chunks), None, doc=work.doc, version=work.version
        )
        calls: list[CallRecord] = []
        sink = spending(ctx, work.doc.run_id, calls.append, llm) if work.capped else calls.append
        try:
            answer = llm.structured(
                messages,
                FilingExtraction,
                stage=stage,
                max_tokens=ctx.settings.extract_max_tokens,
                sink=sink,
                model=model,
                temperature=temperature,
                cache_key=cache_key(work.doc, work.version),
            )
            answers[position] = FilingExtraction.model_validate(answer.model_dump())
        except errors.RunCancelled:
            raise
        except errors.BudgetSpent as exc:  # its largest cost does not fit: the first answers stand
            log.info("document %s: no more %s answers: %s", work.doc.id, stage, exc)
            break
        except errors.PipelineError as exc:
            log.info("document %s chunk %s: no %s answer (%s)", work.doc.id, chunk.idx, stage, exc)
        finally:
            with session_scope(ctx.engine) as session:
                llm_calls.record_calls(session, work.doc.run_id, work.doc.id, chunk.idx, calls)
        if position in answers:  # kept under the lease: a retry or a redelivery asks no more
            with session_scope(ctx.engine) as session:
                answer_json = answers[position].model_dump(mode="json")
                second_answers.save(session, chunk, work.fence, model, temperature, answer_json)
    return answers
