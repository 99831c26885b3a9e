"""A confidence per field of a merged 10-K extraction (pure): which facts to check first.

Each field's score starts from how its evidence was found in the filing, then moves with the
cheap signals there are (docs/extraction.md, "Confidence", states the rule with examples):

- `match`: the field's quote (revenue, a risk factor) or, for a field without one (company,
  fiscal year), the value itself: found verbatim (exact), after folding case, whitespace and
  typography (normalised), only approximately within the chunk that stated it (fuzzy, rapidfuzz's
  partial ratio of at least 85), or not at all (none). Base 0.9, 0.8, 0.45, 0.15.
- `value_in_quote`: a revenue figure its own quote does not state (no amount in the quote comes
  within 0.5 %, at any scale the quote allows) keeps 0.3 of its score; one the quote states moves
  half way to 1.
- Agreement across chunks: where two or more chunks stated the field, unanimity moves the score
  0.3 of the way to 1, and disagreement scales it by 0.5 + 0.5 x the agreeing share.
- `token_p`: the probability of the answer's tokens (log-probabilities, when the server returns
  them) scales the score by 0.5 + 0.5 x p.
- `second`: a second answer for the same chunk (the PIPELINE_VERIFY_SHARE sample) that agrees
  moves the score half way to 1; one that disagrees keeps 0.4 of it.

A field the filing's answers leave empty scores 0: nothing stated is nothing to trust, and it is
what escalation asks again first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from rapidfuzz import fuzz

from pipeline.extraction.grounding import GroundedExtraction, Match, Source, ground, normalise
from pipeline.extraction.merge import merge_chunks, risk_key
from pipeline.extraction.schemas import FilingExtraction, RiskFactor
from pipeline.extraction.signals import same_figure, states_figure, states_fiscal_year
from pipeline.ingest.sections import find_sections

MATCH_BASE = {"exact": 0.9, "normalised": 0.8, "fuzzy": 0.45, "short": 0.15, "none": 0.15}
MIN_QUOTE_WORDS = 4
"""A quote of fewer words ("$", a company's name) is found in any filing and grounds nothing."""
HEADING_CHARS = 600
"""How far before its quote a risk factor's title is looked for (the heading above its paragraph)."""
FUZZY_CUTOFF = 85.0
SCALAR_FIELDS = ("company", "fiscal_year", "revenue_usd")
BANDS = ((0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0))
"""The confidence bands the report and `pipeline eval` count by: fifths of [0, 1], the top closed."""
T = TypeVar("T")


@dataclass(frozen=True)
class Evidence:
    """The signals behind one field's value."""

    match: str
    value_in_quote: bool | None = None
    stating: int = 1
    """Chunks that stated a value for the field..."""
    agreeing: int = 1
    """...and of those, the chunks that stated this value."""
    token_p: float | None = None
    second: bool | None = None


def band_of(confidence: float) -> int:
    """The band's index: the first whose upper edge is above `confidence` (the top band holds
    1.0), as the database counts them (`storage.confidence.band_counts`)."""
    return next((i for i, (_, high) in enumerate(BANDS) if confidence < high), len(BANDS) - 1)


def score(evidence: Evidence) -> float:
    """The confidence in [0, 1] the rule gives `evidence` (rounded to 3 places)."""
    c = MATCH_BASE[evidence.match]
    if evidence.value_in_quote is False:
        c *= 0.3
    elif evidence.value_in_quote:
        c += (1 - c) * 0.5
    if evidence.stating >= 2:
        share = evidence.agreeing / evidence.stating
        c = c + (1 - c) * 0.3 if share >= 1 else c * (0.5 + 0.5 * share)
    if evidence.token_p is not None:
        c *= 0.5 + 0.5 * min(max(evidence.token_p, 0.0), 1.0)
    if evidence.second is True:
        c += (1 - c) * 0.5
    elif evidence.second is False:
        c *= 0.4
    return round(min(max(c, 0.0), 1.0), 3)


@dataclass(frozen=True)
class FieldScore:
    """A field's confidence, how its evidence was found, and which chunk (by position among the
    document's chunks) stated it (None: no chunk did)."""

    confidence: float
    match: str | None
    chunk: int | None


ABSENT = FieldScore(0.0, None, None)


@dataclass(frozen=True)
class Assessed:
    """A merged, grounded extraction with a score per field."""

    grounded: GroundedExtraction
    fields: dict[str, FieldScore]
    """company, fiscal_year, revenue_usd."""
    risks: list[FieldScore]
    escalated: list[str] = field(default_factory=list)
    """Fields whose value came from the escalation model ('risk_factors' for risks)."""
    checks: dict[str, Any] = field(default_factory=dict)
    """The filing's own metadata against the model's answer, per field (`extraction.filed`)."""

    def below(self, threshold: float) -> list[str]:
        """The fields scoring under `threshold` ('risk:N' for the Nth risk factor)."""
        low = [name for name, s in self.fields.items() if s.confidence < threshold]
        return low + [f"risk:{i}" for i, s in enumerate(self.risks) if s.confidence < threshold]

    def chunks_of(self, names: Sequence[str], home: dict[str, int]) -> set[int]:
        """The chunks that stated `names`, and for a scalar field its `home` chunk as well (the
        first of the section filings state it in): a doubtful value may have come from a chunk
        that does not hold the field at all."""
        found: set[int] = set()
        for name in names:
            s = self.risks[int(name[5:])] if name.startswith("risk:") else self.fields[name]
            found |= {c for c in (s.chunk, home.get(name)) if c is not None}
        return found


class Assessor:
    """Scores a document's answers: its text, its chunks' spans, the signals from second answers."""

    def __init__(self, source: Source, spans: Sequence[tuple[int, int]]) -> None:
        self.source = source
        self.spans = spans

    @cached_property
    def _risk_sections(self) -> list[tuple[int, int]]:
        """Where Item 1A lies ([] when the filing has no item headings: nothing to check)."""
        return [
            (s.start, s.end)
            for s in find_sections(self.source.text, check=False)
            if s.name.endswith("Item 1A")
        ]

    def assess(
        self,
        parts: Sequence[FilingExtraction],
        second: dict[int, FilingExtraction] | None = None,
        token_p: Sequence[dict[str, float] | None] | None = None,
    ) -> Assessed:
        """Merge `parts` (one per chunk, in order), ground the result and score each field."""
        merged = merge_chunks(parts, lambda quote: self.source.find(quote) is not None)
        grounded = ground(merged, self.source)
        second = second or {}
        probs = [p or {} for p in (token_p or [None] * len(parts))]
        fields = {
            "company": self._company(merged.company, parts, second, probs),
            "fiscal_year": self._year(merged.fiscal_year, parts, second, probs),
            "revenue_usd": self._revenue(merged.revenue_usd, merged.revenue_quote, parts, second, probs),
        }
        risks = [self._risk(risk, parts, second, probs) for risk in merged.risk_factors]
        return Assessed(grounded, fields, risks)

    def escalate(
        self,
        assessed: Assessed,
        names: Sequence[str],
        parts: Sequence[FilingExtraction],
        better: dict[int, FilingExtraction],
    ) -> Assessed:
        """`assessed` with each low field of `names` replaced by the escalation model's answer of
        a chunk (`better`, by chunk) where that answer scores higher; the fields replaced are listed."""
        merged = assessed.grounded.extraction
        values = merged.model_dump()
        fields = dict(assessed.fields)
        escalated: list[str] = []
        for name in (n for n in SCALAR_FIELDS if n in names):
            for chunk, answer in sorted(better.items()):
                candidate = self._scalar(name, answer, parts, chunk)
                if candidate.confidence > fields[name].confidence:
                    fields[name] = candidate
                    values[name] = getattr(answer, name)
                    if name == "revenue_usd":
                        values["revenue_quote"] = answer.revenue_quote
                    escalated += [name] if name not in escalated else []
        risks, risk_scores = merged.risk_factors, assessed.risks
        if any(n.startswith("risk:") for n in names):
            risks, risk_scores = self._better_risks(risks, risk_scores, parts, better)
        if risks != merged.risk_factors:
            escalated.append("risk_factors")
        values["risk_factors"] = [r.model_dump() for r in risks]
        extraction = FilingExtraction.model_validate(values)
        return Assessed(ground(extraction, self.source), fields, risk_scores, escalated)

    # Scalars ---------------------------------------------------------------------------

    def _scalar(
        self, name: str, answer: FilingExtraction, parts: Sequence[FilingExtraction], chunk: int
    ) -> FieldScore:
        """The score the escalation answer's value of `name` would have (its chunk: `chunk`)."""
        others = _answered_by(parts, chunk, answer)
        if name == "company":
            scored = self._company(answer.company, others, {}, [])
        elif name == "fiscal_year":
            scored = self._year(answer.fiscal_year, others, {}, [])
        else:
            scored = self._revenue(answer.revenue_usd, answer.revenue_quote, others, {}, [])
        return FieldScore(scored.confidence, scored.match, chunk if scored.chunk is not None else None)

    def _company(
        self,
        value: str | None,
        parts: Sequence[FilingExtraction],
        second: dict[int, FilingExtraction],
        probs: list[dict[str, float]],
    ) -> FieldScore:
        if value is None:
            return ABSENT
        chunk = _first([p.company for p in parts], lambda v: v == value)
        found = self.source.find(value)
        match = found.how if found else self._fuzzy(value, chunk)[0]
        return _scalar_score("company", value, _same_name, Seen(parts, second, probs, chunk, match))

    def _year(
        self,
        value: int | None,
        parts: Sequence[FilingExtraction],
        second: dict[int, FilingExtraction],
        probs: list[dict[str, float]],
    ) -> FieldScore:
        if value is None:
            return ABSENT
        chunk = _first([p.fiscal_year for p in parts], lambda v: v == value)
        text = self.source.text
        if states_fiscal_year(text, value):
            match = "exact"
        else:
            match = "fuzzy" if re.search(rf"\b{value}\b", text) else "none"
        return _scalar_score("fiscal_year", value, _same_year, Seen(parts, second, probs, chunk, match))

    def _revenue(
        self,
        value: float | None,
        quote: str | None,
        parts: Sequence[FilingExtraction],
        second: dict[int, FilingExtraction],
        probs: list[dict[str, float]],
    ) -> FieldScore:
        if value is None:
            return ABSENT
        stated = [(p.revenue_usd, p.revenue_quote) for p in parts]
        chunk = _first(stated, lambda v: v == (value, quote))
        chunk = (
            chunk if chunk is not None else _first([v for v, _ in stated], lambda v: same_figure(v, value))
        )
        match = self._quote(quote, chunk)[0]
        seen = Seen(parts, second, probs, chunk, match, states_figure(quote, value) if quote else None)
        return _scalar_score("revenue_usd", value, same_figure, seen)

    # Risk factors ----------------------------------------------------------------------

    def _risk(
        self,
        risk: RiskFactor,
        parts: Sequence[FilingExtraction],
        second: dict[int, FilingExtraction],
        probs: list[dict[str, float]],
    ) -> FieldScore:
        key = risk_key(risk)
        stating = [i for i, p in enumerate(parts) if any(risk_key(r) & key for r in p.risk_factors)]
        chunk = stating[0] if stating else None
        match, found = self._quote(risk.quote, chunk)
        evidence = Evidence(
            match,
            value_in_quote=self._titled(risk.title, found) if found and match != "short" else None,
            stating=len(stating),
            agreeing=len(stating),
            token_p=_at(probs, chunk, "risk"),
            second=_second(second, chunk, lambda p: any(risk_key(r) & key for r in p.risk_factors)),
        )
        return FieldScore(score(evidence), match, chunk)

    def _better_risks(
        self,
        risks: list[RiskFactor],
        scores: list[FieldScore],
        parts: Sequence[FilingExtraction],
        better: dict[int, FilingExtraction],
    ) -> tuple[list[RiskFactor], list[FieldScore]]:
        """Each risk scored below one the escalation answer of its chunk gives in its place (same
        title or quote, else the first not yet kept) is replaced by it."""
        kept = list(zip(risks, scores, strict=True))
        for chunk, answer in sorted(better.items()):
            answered = _answered_by(parts, chunk, answer)
            offered = [(r, self._risk(r, answered, {}, [])) for r in answer.risk_factors]
            offered = [(r, FieldScore(s.confidence, s.match, chunk)) for r, s in offered]
            for i, (risk, current) in enumerate(kept):
                if current.chunk != chunk:
                    continue
                same = next((o for o in offered if risk_key(o[0]) & risk_key(risk)), None)
                pick = same or next(
                    (o for o in offered if not any(risk_key(o[0]) & risk_key(k[0]) for k in kept)), None
                )
                if pick is not None and pick[1].confidence > current.confidence:
                    kept[i] = pick
        return [r for r, _ in kept], [s for _, s in kept]

    def _quote(self, quote: str | None, chunk: int | None) -> tuple[str, Match | None]:
        """How `quote` was found (exact, normalised, fuzzy, none; short: too few words to ground
        anything), and where."""
        if not quote:
            return "none", None
        found = self.source.find(quote)
        how, where = (found.how, found) if found else self._fuzzy(quote, chunk)
        return ("short" if len(re.findall(r"[^\W\d_]{2,}", quote)) < MIN_QUOTE_WORDS else how), where

    def _titled(self, title: str, quote: Match) -> bool:
        """Whether a risk factor's quote lies in the filing's risk factors (Item 1A, where the
        filing has item headings) under its title: the title the heading above the quote, or
        said in it. A title the passage does not bear out is a label the model made."""
        if self._risk_sections and not any(a <= quote.start < b for a, b in self._risk_sections):
            return False
        passage = self.source.text[max(0, quote.start - HEADING_CHARS) : quote.end]
        wanted = normalise(title).strip(" .:;")
        if wanted and wanted in normalise(passage):
            return True
        return fuzz.partial_ratio(wanted, passage.lower(), score_cutoff=FUZZY_CUTOFF) > 0

    def _fuzzy(self, quote: str, chunk: int | None) -> tuple[str, Match | None]:
        """Where `quote` lies approximately within chunk `chunk`'s span: ('fuzzy', match) or
        ('none', None). Within one chunk only: partial matching is quadratic-ish in the text."""
        if chunk is None or chunk >= len(self.spans) or len(quote.strip()) < 12:
            return "none", None
        start, end = self.spans[chunk]
        hit = fuzz.partial_ratio_alignment(
            quote.strip().lower(), self.source.text[start:end].lower(), score_cutoff=FUZZY_CUTOFF
        )
        if hit is None:
            return "none", None
        return "fuzzy", Match(start + hit.dest_start, start + hit.dest_end, "fuzzy")


@dataclass(frozen=True)
class Seen:
    """What was found of a scalar field's value: the answers and second answers it is set
    against, the token probabilities, the chunk that stated it, how it was found in the text and
    whether its quote states it."""

    parts: Sequence[FilingExtraction]
    second: dict[int, FilingExtraction]
    probs: list[dict[str, float]]
    chunk: int | None
    match: str
    value_in_quote: bool | None = None


def _scalar_score(name: str, value: Any, same: Callable[[Any, Any], bool], seen: Seen) -> FieldScore:
    """The score of scalar field `name`'s `value` (`same`: do two values agree?)."""
    stated = [getattr(p, name) for p in seen.parts]
    evidence = Evidence(
        seen.match,
        value_in_quote=seen.value_in_quote,
        stating=sum(v is not None for v in stated),
        agreeing=sum(same(v, value) for v in stated),
        token_p=_at(seen.probs, seen.chunk, name),
        second=_second(seen.second, seen.chunk, lambda p: same(getattr(p, name), value)),
    )
    return FieldScore(score(evidence), seen.match, seen.chunk)


def _same_year(a: int | None, b: int | None) -> bool:
    return a is not None and a == b


def _answered_by(
    parts: Sequence[FilingExtraction], chunk: int, answer: FilingExtraction
) -> list[FilingExtraction]:
    """The chunks' answers with chunk `chunk`'s replaced by `answer`: positions stay those of the
    chunks, whose spans the fuzzy lookup reads."""
    return [answer if i == chunk else p for i, p in enumerate(parts)]


def _same_name(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.strip().lower() == b.strip().lower()


def _first(values: Sequence[T | None], test: Callable[[T], bool]) -> int | None:
    return next((i for i, v in enumerate(values) if v is not None and test(v)), None)


def _at(probs: list[dict[str, float]], chunk: int | None, name: str) -> float | None:
    """The probability of field `name`'s tokens in chunk `chunk`'s answer, when known."""
    return probs[chunk].get(name) if chunk is not None and chunk < len(probs) else None


def _second(
    second: dict[int, FilingExtraction], chunk: int | None, agrees: Callable[[FilingExtraction], bool]
) -> bool | None:
    if chunk is None or chunk not in second:
        return None
    return bool(agrees(second[chunk]))
