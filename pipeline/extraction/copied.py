"""Values an answer copied from the worked examples, dropped before the merge (pure).

The cached layout shows three invented filings and their answers (`pipeline.extraction.examples`);
a small model recites them (SmolLM2-135M named every filing after an example's company,
docs/benchmarks.md). A chunk's answer keeps none of their values that the filing's own text does
not hold:

- a company equal to an example's (as `filed.company_key` compares names) and not found in the
  filing (`grounding.Source.find`: verbatim, else case, whitespace and typography folded);
- a revenue equal to an example's, or stated with an example's quote, unless its quote is found
  in the filing: the figure and its quote go together;
- a risk factor whose title or quote is an example's (compared as grounding normalises them)
  and whose quote is not found in the filing;
- a fiscal year equal to an example's, when the same answer copied another value of the
  examples and the filing does not give that year as a fiscal year ("fiscal 2024", "fiscal year
  ended ... 2024"): a year cannot be checked by its presence (every filing writes years), but an
  answer that recites the examples is not believed for theirs.

What is dropped is listed (`Copy`), for `extractions.data -> '_copied_from_examples'`. The
compact layout shows no examples, and a user's schema has none: there nothing matches, and each
answer costs a few set lookups.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.extraction.examples import EXAMPLES, Example
from pipeline.extraction.filed import company_key
from pipeline.extraction.grounding import Source, normalise
from pipeline.extraction.schemas import FilingExtraction
from pipeline.extraction.signals import same_figure, states_fiscal_year


@dataclass(frozen=True)
class Copy:
    """One value dropped from one answer: which chunk (by position among the document's), which
    answer (extract, or a verify or escalate second answer), the field, the value and the
    example (numbered from 1, as the prompt numbers them) it came from."""

    chunk: int
    answer: str
    field: str
    value: Any
    example: int

    def as_json(self) -> dict[str, Any]:
        return {
            "chunk": self.chunk,
            "answer": self.answer,
            "field": self.field,
            "value": self.value,
            "example": self.example,
        }


def _text_key(text: str) -> str:
    return normalise(text).strip(" .;:")


@dataclass(frozen=True)
class _Known:
    """The examples' values, keyed as they are compared."""

    companies: dict[str, int]
    years: dict[int, int]
    revenues: tuple[tuple[float, int], ...]
    revenue_quotes: dict[str, int]
    risk_texts: dict[str, int]  # titles and quotes


def _known(examples: Sequence[Example]) -> _Known:
    companies: dict[str, int] = {}
    years: dict[int, int] = {}
    revenues: list[tuple[float, int]] = []
    quotes: dict[str, int] = {}
    risks: dict[str, int] = {}
    for number, example in enumerate(examples, 1):
        answer = FilingExtraction.model_validate(example.answer)
        if answer.company:
            companies.setdefault(company_key(answer.company), number)
        if answer.fiscal_year is not None:
            years.setdefault(answer.fiscal_year, number)
        if answer.revenue_usd is not None:
            revenues.append((answer.revenue_usd, number))
        if answer.revenue_quote:
            quotes.setdefault(_text_key(answer.revenue_quote), number)
        for risk in answer.risk_factors:
            risks.setdefault(_text_key(risk.title), number)
            risks.setdefault(_text_key(risk.quote), number)
    return _Known(companies, years, tuple(revenues), quotes, risks)


@functools.cache
def _known_examples() -> _Known:
    """The cached layout's examples' values, read once per process."""
    return _known(EXAMPLES)


class ExampleCopies:
    """Drops from a document's answers what they copied from `examples` (the cached layout's,
    by default) and the filing's text `source` does not hold."""

    def __init__(self, source: Source, examples: Sequence[Example] = EXAMPLES) -> None:
        self.source = source
        self.known = _known_examples() if examples is EXAMPLES else _known(examples)
        self.dropped: list[Copy] = []
        """Every value dropped so far, in the order the answers came."""

    def clean(self, answer: FilingExtraction, chunk: int, stage: str = "extract") -> FilingExtraction:
        """`answer` (chunk `chunk`'s, from `stage`) without the examples' values the filing does
        not hold; the same object when it copied none."""
        known, found = self.known, self.source.find
        copies: list[Copy] = []
        values: dict[str, Any] = {}
        company = answer.company
        if company and (example := known.companies.get(company_key(company))) and found(company) is None:
            copies.append(Copy(chunk, stage, "company", company, example))
            values["company"] = None
        quote = answer.revenue_quote
        if (example := self._revenue_example(answer)) and not (quote and found(quote)):
            figure = {"revenue_usd": answer.revenue_usd, "revenue_quote": quote}
            copies.append(Copy(chunk, stage, "revenue_usd", figure, example))
            values |= {"revenue_usd": None, "revenue_quote": None}
        kept = []
        for risk in answer.risk_factors:
            example = known.risk_texts.get(_text_key(risk.title)) or known.risk_texts.get(
                _text_key(risk.quote)
            )
            if example and found(risk.quote) is None:
                copies.append(Copy(chunk, stage, "risk_factors", risk.model_dump(), example))
            else:
                kept.append(risk)
        if len(kept) != len(answer.risk_factors):
            values["risk_factors"] = kept
        year = answer.fiscal_year
        if (
            copies
            and year is not None
            and (example := known.years.get(year))
            and not states_fiscal_year(self.source.text, year)
        ):
            copies.append(Copy(chunk, stage, "fiscal_year", year, example))
            values["fiscal_year"] = None
        if not copies:
            return answer
        self.dropped.extend(copies)
        return answer.model_copy(update=values)

    def clean_all(
        self, answers: Sequence[FilingExtraction], stage: str = "extract"
    ) -> list[FilingExtraction]:
        """Each of a document's chunk answers (in chunk order) cleaned."""
        return [self.clean(answer, chunk, stage) for chunk, answer in enumerate(answers)]

    def clean_by_chunk(self, answers: dict[int, FilingExtraction], stage: str) -> dict[int, FilingExtraction]:
        """Second answers (by chunk position) cleaned."""
        return {chunk: self.clean(answer, chunk, stage) for chunk, answer in answers.items()}

    def _revenue_example(self, answer: FilingExtraction) -> int | None:
        known = self.known
        if answer.revenue_quote and (example := known.revenue_quotes.get(_text_key(answer.revenue_quote))):
            return example
        value = answer.revenue_usd
        return next((number for figure, number in known.revenues if same_figure(value, figure)), None)
