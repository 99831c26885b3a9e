"""The producer: check the files, store the run, its documents and their chunks.

Enqueueing is the caller's (the Celery layer's) job: this returns the ids to enqueue.
"""

from __future__ import annotations

import itertools
import math
import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry.trace import Span

from pipeline.core import tracing
from pipeline.core.settings import Settings
from pipeline.ingest import filing_context, inputs, readers, sections
from pipeline.llm.tokens import counter_for
from pipeline.storage import db, intake, run_state
from pipeline.storage.db import session_scope
from pipeline.storage.models import DocStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

COMMIT_EVERY_DOCUMENTS = 200
"""Documents per transaction: bounds memory (text is held until commit) and lock time."""
FIRST_SENT_DOCUMENTS = 8
"""Of a streamed run's early documents, those sent as soon as they are stored, before the rest
of them is read: each filing read is a few ms of CPU the first call waits for (more under load)."""

T = TypeVar("T")

DEFAULT_QUERY = "Summarize revenue and the top risk factors across these filings."


@dataclass
class SubmitPlan:
    run_id: str
    document_ids: list[int] = field(default_factory=list)
    """In the order to enqueue them (see `enqueue_order`); without those in `early_ids`."""
    early_ids: list[int] = field(default_factory=list)
    """Documents already handed to `on_early` (streamed to the queue batch by batch, as stored)."""
    chunk_counts: dict[int, int] = field(default_factory=dict)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) of every file that will not be extracted."""
    already_processed: list[str] = field(default_factory=list)
    """With `only_new`: files whose content an earlier run extracted (not part of this run)."""
    tokens: int = 0
    """Estimated tokens of the run's documents (what PIPELINE_MAX_RUN_TOKENS caps)."""
    spans: dict[int, tuple[str, list[tuple[int, int, int]]]] = field(default_factory=dict)
    """Each document's content hash and chunks (start, end, estimated tokens): where an
    earlier run answered the same text, `pipeline plan` counts no call."""
    context_tokens: dict[int, int] = field(default_factory=dict)
    """Each document's context in the cached layout, in tokens (its chunks share it: `pipeline
    plan` counts it as cached after their first); none in the compact layout."""
    files: list[dict[str, Any]] = field(default_factory=list)
    """`survey` only: what was read of each file (`file_view`), for `pipeline plan`."""
    reused_chunks: int = 0
    """Of the chunks, those an earlier run answered (set by `pipeline.runs.estimate.reusing`)."""
    created: bool = True
    """False when `only_new` found nothing new: no run was stored."""

    @property
    def submitted(self) -> int:
        """Documents the run extracts: those sent early and those still to enqueue."""
        return len(self.early_ids) + len(self.document_ids)


def new_run_id() -> str:
    return uuid.uuid4().hex


def prepare_run(
    engine: Engine,
    settings: Settings,
    paths: Sequence[str],
    *,
    query: str | None = None,
    name: str | None = None,
    simulated: bool = False,
    reuse_answers: bool = True,
    only_new: bool = False,
    schema: str | None = None,
    on_early: Callable[[list[int]], None] | None = None,
    run_id: str | None = None,
    reader: readers.Reader | None = None,
) -> SubmitPlan:
    """Store a run (of `run_id`, or a new id) and its documents; rejected files are stored
    `skipped` with their reason.

    With `reuse_answers`, workers take stored chunk answers of earlier runs for unchanged
    filings instead of asking the LLM again. With `only_new` (the nightly inbox), files whose
    content an earlier run extracted are left out, and no run is stored when nothing is new.

    With `on_early`, a run of more than `settings.early_documents` files starts at once: the first ones
    are handed to it (the run is then `running`) as soon as they are stored (FIRST_SENT_DOCUMENTS,
    then the rest of the early ones), then every batch of COMMIT_EVERY_DOCUMENTS as it is
    committed, so the calls begin while the rest is read and the queue is fed all along; the
    caller's finalize (sent once the run is marked stored) reports.
    `reader` reads the files, batch by batch (`readers.read_batches`, in this process, by default)."""
    inputs.check_bases(paths)  # a mistyped directory is refused before a run is stored
    plan = SubmitPlan(run_id or new_run_id())
    with session_scope(engine) as session:
        intake.create_run(
            session,
            plan.run_id,
            name=name,
            query=query or DEFAULT_QUERY,
            model=settings.llm_model,
            prompt_version=settings.prompt_version(),
            simulated=simulated,
            reuse_answers=reuse_answers,
            budget_usd=settings.run_budget_usd,
            schema=schema,
        )
    first_path_of: dict[str, str] = {}
    candidates = (
        candidate
        for candidate in inputs.expand(paths, follow_links=settings.follow_links)
        if not (only_new and candidate.problem in inputs.NOTHING_THERE)  # an empty inbox tonight is not a run
    )
    batches = _batches(candidates, settings.early_documents if on_early else None)
    for files, last in (reader or readers.read_batches)(readers.Spec.of(settings), batches):
        with session_scope(engine) as session:
            if only_new:
                files = _not_extracted(session, plan, files)
            _store_batch(session, settings, plan, files, first_path_of)
        if on_early and not last and plan.document_ids:
            _stream(engine, plan, on_early)  # this batch goes to the queue while the next is stored
    if only_new and not plan.submitted and not plan.rejected:
        with session_scope(engine) as session:
            intake.delete_run(session, plan.run_id)
        plan.created = False
        return plan
    if plan.early_ids and on_early and plan.document_ids:
        _stream(engine, plan, on_early)  # the last batch: before the run is marked stored
    plan.document_ids = enqueue_order(plan.document_ids, plan.chunk_counts, plan.run_id)
    with session_scope(engine) as session:
        run_state.mark_stored(session, plan.run_id)
        if plan.early_ids:
            return plan  # running since the early start
        if plan.document_ids:
            run_state.move_run(session, plan.run_id, "start")
        else:
            run_state.move_run(session, plan.run_id, "refuse", error="no usable document")
    return plan


def _stream(engine: Engine, plan: SubmitPlan, on_early: Callable[[list[int]], None]) -> None:
    """Hand the documents stored since the last call to `on_early` (the queue), the first time
    moving the run to `running`: workers start on a night's first filings while the rest is read,
    and the queue never waits for the whole batch to be stored. Each batch goes in the order
    `enqueue_order` gives (shuffled, its shortest last)."""
    if not plan.early_ids:
        with session_scope(engine) as session:
            run_state.move_run(session, plan.run_id, "start")
    stored = enqueue_order(plan.document_ids, plan.chunk_counts, plan.run_id)
    plan.document_ids = []
    on_early(stored)
    plan.early_ids.extend(stored)


SORTED_TAIL_SHARE = 0.25
"""The share of a run's documents, the shortest, enqueued last in order of length."""


def enqueue_order(document_ids: list[int], chunk_counts: dict[int, int], seed: str) -> list[int]:
    """Documents in the order to enqueue them: shuffled, then the shortest quarter, longest first.

    A document's chunks go one after another, so its chain of calls is as long as its chunk
    count: the run should end on short chains, not trail after a long one. Before that, the order
    is shuffled (seeded by the run): documents of equal length started together finish together,
    and each thread then starts its next one at the same moment, so in a length-sorted run the
    threads move in lockstep and their compressions come in waves that spend the request quota
    while the token quota idles.
    """
    by_length = sorted(document_ids, key=lambda doc_id: -chunk_counts[doc_id])
    cut = len(by_length) - math.ceil(len(by_length) * SORTED_TAIL_SHARE)
    head = by_length[:cut]
    random.Random(seed).shuffle(head)
    return head + by_length[cut:]


def _not_extracted(
    session: Session, plan: SubmitPlan, files: list[readers.ReadFile]
) -> list[readers.ReadFile]:
    """`only_new`: the files whose content no run extracted yet; the others noted in the plan."""
    done = intake.extracted_contents(session, {f.loaded.sha256 for f in files if f.loaded.sha256})
    plan.already_processed += [f.loaded.path for f in files if f.loaded.sha256 in done]
    return [f for f in files if f.loaded.sha256 not in done]


def _store_batch(
    session: Session,
    settings: Settings,
    plan: SubmitPlan,
    files: list[readers.ReadFile],
    first_path_of: dict[str, str],
) -> None:
    """Store the files in a savepoint, in a few multi-row statements (`_add_files`). Where the
    database refuses the batch (e.g. a NUL in a text, a lone surrogate), it is stored again file
    by file, and the one file refused becomes its own `skipped` row with the database's reason."""
    tokens, known = plan.tokens, set(first_path_of)
    try:
        with session.begin_nested():
            _add_files(session, settings, plan, files, first_path_of)
        return
    except (db.REFUSED, UnicodeError) as exc:
        plan.tokens = tokens  # as before the batch: its rows are not stored
        for sha256 in set(first_path_of) - known:
            del first_path_of[sha256]
        said = db.driver_error(exc)
    if len(files) > 1:
        for read in files:
            _store_batch(session, settings, plan, [read], first_path_of)
        return
    reason = f"could not be stored: {str(said).splitlines()[0][:300]}"
    refused = files[0].loaded
    skipped = inputs.LoadedFile(inputs.printable(refused.path), refused.size_bytes, problem=reason)
    _add_files(session, settings, plan, [readers.ReadFile(skipped)], first_path_of)


def _add_files(
    session: Session,
    settings: Settings,
    plan: SubmitPlan,
    files: list[readers.ReadFile],
    first_path_of: dict[str, str],
) -> None:
    """Store the files as their documents, each with the first span of its document's trace (its
    traceparent stored with it: every delivery's extract span opens under it), open until the
    rows are stored; the plan learns of them once they are."""
    opened: list[Span] = []
    try:
        entries = []
        for read in files:
            attributes = {"run.id": plan.run_id, "document.bytes": read.loaded.size_bytes}
            opened.append(tracing.start("submit document", attributes))
            entries.append(_entry(settings, plan, read, first_path_of, opened[-1]))
        ids = intake.add_documents(session, plan.run_id, entries)
        for document_id, read, new, current in zip(ids, files, entries, opened, strict=True):
            _account(settings, plan, document_id, read, new, current)
    except BaseException as exc:
        for current in opened:
            tracing.failed(current, exc)
        raise
    finally:
        for current in opened:
            current.end()


def _entry(
    settings: Settings,
    plan: SubmitPlan,
    read: readers.ReadFile,
    first_path_of: dict[str, str],
    current: Span,
) -> intake.NewDocument:
    """The file's document as it is to be stored (chunked, or skipped with its reason)."""
    loaded = read.loaded
    problem = _problem(settings, plan, read, first_path_of)
    stored = inputs.stored_path(loaded.path)  # what is shown (plan.rejected) stays as typed
    trace_parent = tracing.traceparent(current)
    if problem or loaded.text is None or loaded.sha256 is None:
        return intake.NewDocument(
            stored,
            None,
            loaded.size_bytes,
            status=DocStatus.SKIPPED,
            error=problem or "unusable",
            trace_parent=trace_parent,
            read=_read_of(loaded),
        )
    first_path_of[loaded.sha256] = loaded.path
    plan.tokens += read.tokens
    return intake.NewDocument(
        stored,
        loaded.sha256,
        loaded.size_bytes,
        note=loaded.note,
        spans=read.spans,
        injection_excerpt=read.injection_excerpt,
        trace_parent=trace_parent,
        read=_read_of(loaded, read.found),
        text=loaded.text,
        offsets=loaded.intake.offsets if loaded.intake else (),
    )


def _account(
    settings: Settings,
    plan: SubmitPlan,
    document_id: int,
    read: readers.ReadFile,
    new: intake.NewDocument,
    current: Span,
) -> None:
    """The stored document in the plan: to enqueue (its chunks, for the plan's estimate), or rejected."""
    if new.status == DocStatus.SKIPPED:
        current.set_attribute("document.status", "skipped")
        plan.rejected.append((read.loaded.path, new.error or "unusable"))
        return
    current.set_attributes({"document.id": document_id, "document.chunks": len(new.spans)})
    plan.document_ids.append(document_id)
    plan.chunk_counts[document_id] = len(new.spans)
    plan.spans[document_id] = (
        new.sha256 or "",
        [(c.char_start, c.char_end, c.token_estimate) for c in new.spans],
    )
    _count_context(settings, plan, document_id, read.loaded, read.found)


def _problem(
    settings: Settings, plan: SubmitPlan, read: readers.ReadFile, first_path_of: dict[str, str]
) -> str | None:
    """Why the file is not taken (unreadable, a duplicate, over a token cap), or None."""
    loaded = read.loaded
    if loaded.sha256 and loaded.sha256 in first_path_of:
        return f"duplicate of {first_path_of[loaded.sha256]} in this batch"
    if loaded.problem or loaded.text is None:
        return loaded.problem
    return _over_token_caps(settings, plan, read.tokens)


def _count_context(
    settings: Settings, plan: SubmitPlan, number: int, loaded: inputs.LoadedFile, found: sections.Found | None
) -> None:
    """The tokens of the document's context in the cached layout (`filing_context`), for the plan."""
    if settings.chosen_layout()[0] != "cached" or loaded.text is None:
        return
    facts = filing_context.FilingFacts.read(loaded.intake.meta if loaded.intake else None)
    context = filing_context.build(loaded.text, facts, found.sections if found else None)
    plan.context_tokens[number] = counter_for(settings.llm_model)(context)


def _read_of(loaded: inputs.LoadedFile, found: sections.Found | None = None) -> intake.Read | None:
    """What the document row keeps of the intake: the format, the metadata, the documents
    taken and left out, the sections found and doubted."""
    if loaded.intake is None:
        return None
    summary = loaded.intake.summary()
    if found is not None:
        summary["sections"] = found.summary()
    meta, revenue = loaded.intake.meta, loaded.intake.revenue
    return intake.Read(
        source_format=loaded.intake.format,
        form_type=meta.form,
        company_name=meta.company,
        cik=meta.cik,
        period_of_report=meta.period,
        fiscal_year=meta.fiscal_year,
        accession_number=meta.accession,
        filing_date=meta.filed,
        intake=summary,
        revenue={
            "value": revenue.value_usd,
            "concept": revenue.concept,
            "context": (revenue.context or "")[:200] or None,
            "period_start": revenue.start,
            "period_end": revenue.end,
            "why": revenue.why,
        },
    )


def survey(settings: Settings, paths: Sequence[str]) -> SubmitPlan:
    """What `prepare_run` would store of `paths`, read and chunked the same way, with nothing
    stored: `pipeline plan` prices it. Documents are numbered in the order read."""
    inputs.check_bases(paths)
    plan = SubmitPlan(run_id="")
    first_path_of: dict[str, str] = {}
    spec = readers.Spec.of(settings)
    for candidate in inputs.expand(paths, follow_links=settings.follow_links):
        read = readers.read_file(spec, candidate)
        loaded, found, spans, tokens = read.loaded, read.found, read.spans, read.tokens
        readable = loaded.text is not None and not loaded.problem and loaded.sha256 not in first_path_of
        problem = _problem(settings, plan, read, first_path_of)
        plan.files.append(file_view(loaded, found if readable else None, tokens if readable else 0, problem))
        if problem or loaded.sha256 is None:
            plan.rejected.append((loaded.path, problem or "unusable"))
            continue
        first_path_of[loaded.sha256] = loaded.path
        plan.tokens += tokens
        number = len(plan.document_ids) + 1
        plan.document_ids.append(number)
        plan.chunk_counts[number] = len(spans)
        plan.spans[number] = (loaded.sha256, [(c.char_start, c.char_end, c.token_estimate) for c in spans])
        _count_context(settings, plan, number, loaded, found)
    return plan


def file_view(
    loaded: inputs.LoadedFile, found: sections.Found | None, tokens: int, problem: str | None
) -> dict[str, Any]:
    """What the intake read of one file, as `pipeline plan` shows it: the format and form found,
    the company and fiscal year, the documents taken and left out, the sections, the tokens."""
    read = loaded.intake
    meta = read.meta if read else None
    return {
        "path": loaded.path,
        "format": read.format if read else None,
        "form": meta.form if meta else None,
        "company": meta.company if meta else None,
        "fiscal_year": meta.fiscal_year if meta else None,
        "taken": [t["type"] or t["format"] for t in read.taken] if read else [],
        "left_out": dict(read.left_out) if read else {},
        "sections": [s.name for s in found.sections if s.name != "Cover"] if found else [],
        "doubted": found.doubted if found else [],
        "tokens": tokens,
        "problem": problem,
    }


def _over_token_caps(settings: Settings, plan: SubmitPlan, tokens: int) -> str | None:
    """Why a document of `tokens` estimated tokens is not taken, or None when it fits."""
    if settings.max_document_tokens and tokens > settings.max_document_tokens:
        return f"about {tokens:,} tokens, over the {settings.max_document_tokens:,}-token document cap"
    if settings.max_run_tokens and plan.tokens + tokens > settings.max_run_tokens:
        return f"the run's {settings.max_run_tokens:,}-token cap is reached"
    return None


def _batches(items: Iterable[T], early: int | None = None) -> Iterator[list[T]]:
    """`items` in lists of COMMIT_EVERY_DOCUMENTS. With `early`, a run of more than `early`
    items starts with FIRST_SENT_DOCUMENTS of them, then the rest of its first `early`; a run of
    at most `early` is one list (sent as one chord)."""
    pending = iter(items)
    if early:
        head = list(itertools.islice(pending, early + 1))
        if len(head) <= early:
            yield from [head] if head else []
            return
        cut = min(FIRST_SENT_DOCUMENTS, early)
        yield from (part for part in (head[:cut], head[cut:early]) if part)
        pending = itertools.chain(head[early:], pending)
    while batch := list(itertools.islice(pending, COMMIT_EVERY_DOCUMENTS)):
        yield batch
