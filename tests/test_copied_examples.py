"""A value an answer copied from the cached layout's worked examples is never stored as the
filing's (issue 50: SmolLM2-135M named every filing after an example's company)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from pipeline.core.settings import get_settings
from pipeline.extraction import layout
from pipeline.extraction.copied import ExampleCopies
from pipeline.extraction.examples import EXAMPLES
from pipeline.extraction.grounding import Source
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest.producer import prepare_run
from pipeline.llm import prompts
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Extraction, RiskFactor
from pipeline_dev.sim.hooked import recite_examples
from pipeline_dev.synth_filings import generate_filing

FILING = (
    "Form 10-K\nMarlow Pumps Corp.\nFor the fiscal year ended December 31, 2024.\n"
    "Item 1A. Risk Factors\nA prolonged outage at our only foundry would halt shipments for months.\n"
    "Item 8. Total net sales | 48,200 | 45,900\n"
)
HARBOR, CALLOWAY = EXAMPLES[0].answer, EXAMPLES[1].answer
REAL_RISK = {
    "title": "Foundry outage",
    "quote": "A prolonged outage at our only foundry would halt shipments",
}


def _answer(**fields: Any) -> FilingExtraction:
    base: dict[str, Any] = {
        "company": "Marlow Pumps Corp.",
        "fiscal_year": 2024,
        "revenue_usd": 48_200_000,
        "revenue_quote": "Total net sales | 48,200 | 45,900",
        "risk_factors": [REAL_RISK],
    }
    return FilingExtraction.model_validate(base | fields)


def _dropped(copies: ExampleCopies) -> list[tuple[str, int]]:
    return [(c.field, c.example) for c in copies.dropped]


def test_an_answer_that_copied_nothing_is_left_as_it_is() -> None:
    copies = ExampleCopies(Source(FILING))
    answer = _answer()
    assert copies.clean(answer, 0) is answer and copies.dropped == []


def test_a_recited_example_is_dropped_field_by_field_and_listed() -> None:
    copies = ExampleCopies(Source(FILING))
    recited = _answer(
        company=CALLOWAY["company"],
        fiscal_year=CALLOWAY["fiscal_year"],
        revenue_usd=CALLOWAY["revenue_usd"],
        revenue_quote=CALLOWAY["revenue_quote"],
        risk_factors=[HARBOR["risk_factors"][1], REAL_RISK],
    )
    cleaned = copies.clean(recited, 3)
    assert cleaned.company is None and cleaned.fiscal_year is None
    assert cleaned.revenue_usd is None and cleaned.revenue_quote is None, "the figure goes with its quote"
    assert [r.title for r in cleaned.risk_factors] == ["Foundry outage"], "the filing's own risk stays"
    assert sorted(_dropped(copies)) == [
        ("company", 2),
        ("fiscal_year", 2),
        ("revenue_usd", 2),
        ("risk_factors", 1),
    ]
    assert {c.chunk for c in copies.dropped} == {3} and {c.answer for c in copies.dropped} == {"extract"}
    company = next(c for c in copies.dropped if c.field == "company").as_json()
    assert company == {
        "chunk": 3,
        "answer": "extract",
        "field": "company",
        "value": CALLOWAY["company"],
        "example": 2,
    }


def test_an_example_s_name_is_known_however_it_is_spelled() -> None:
    copies = ExampleCopies(Source(FILING))
    assert copies.clean(_answer(company="CALLOWAY FREIGHT LINES"), 0).company is None
    assert copies.clean(_answer(company="Harbor Lane Foods"), 0).company is None
    # A risk whose title is an example's, its quote reworded (as small models reword): dropped too.
    reworded = {"title": "Commodity prices.", "quote": "Wheat and dairy prices vary."}
    assert copies.clean(_answer(risk_factors=[reworded]), 0).risk_factors == []


def test_what_the_filing_itself_holds_is_kept_even_when_an_example_holds_it_too() -> None:
    filing = (
        FILING + "Harbor Lane Foods, Inc. is our largest customer.\n" + HARBOR["risk_factors"][0]["quote"]
    )
    copies = ExampleCopies(Source(filing))
    answer = _answer(company="Harbor Lane Foods, Inc.", risk_factors=[HARBOR["risk_factors"][0]])
    assert copies.clean(answer, 0) is answer
    # The example's figure, stated with a quote the filing holds: the filing's figure.
    same_figure = _answer(
        revenue_usd=CALLOWAY["revenue_usd"], revenue_quote="Total net sales | 48,200 | 45,900"
    )
    assert copies.clean(same_figure, 0) is same_figure


def test_an_example_s_year_is_dropped_only_from_an_answer_that_recites_the_examples() -> None:
    elsewhere = FILING.replace("2024", "2019")
    alone = ExampleCopies(Source(elsewhere))
    assert alone.clean(_answer(fiscal_year=2022), 0).fiscal_year == 2022, "a year alone proves nothing"
    reciting = _answer(company=CALLOWAY["company"], fiscal_year=2024)  # Harbor Lane's year, not Calloway's
    assert alone.clean(reciting, 0).fiscal_year is None
    stated = ExampleCopies(Source(FILING))  # "For the fiscal year ended December 31, 2024."
    assert stated.clean(reciting, 0).fiscal_year == 2024, "the filing gives it as its fiscal year"
    assert _dropped(stated) == [("company", 2)]


def test_second_answers_are_cleaned_and_listed_under_their_stage() -> None:
    copies = ExampleCopies(Source(FILING))
    cleaned = copies.clean_by_chunk({1: _answer(company=HARBOR["company"])}, "escalate")
    assert cleaned[1].company is None
    assert [(c.chunk, c.answer, c.field) for c in copies.dropped] == [(1, "escalate", "company")]


def test_the_simulator_s_recite_hook_copies_the_examples_the_prompt_shows() -> None:
    faithful = _answer().model_dump(mode="json")
    cached = layout.messages("Form: 10-K", "text", 0, 1, FilingExtraction)
    recited = recite_examples(faithful, cached)
    assert recited["company"] == HARBOR["company"] and recited["fiscal_year"] == HARBOR["fiscal_year"]
    assert (recited["revenue_usd"], recited["revenue_quote"]) == (
        CALLOWAY["revenue_usd"],
        CALLOWAY["revenue_quote"],
    )
    assert recited["risk_factors"] == HARBOR["risk_factors"]
    compact = prompts.extract_messages("text", 0, 1)
    assert recite_examples(faithful, compact) == faithful, "no examples shown, nothing to recite"


def test_a_filing_whose_answer_recites_the_examples_stores_none_of_their_values(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """Through the real path: a cached-layout run, the session's simulator over HTTP answering the
    filing's last chunk as a model that recites the examples (`[[sim:recite]]`)."""
    from pipeline.extraction.extract import extract_document
    from workers.context import worker_context

    text, truth = generate_filing(5, seed=50, target_bytes=21_000)
    (tmp_path / truth.filename).write_text(f"{text}\n[[sim:recite]]\n")
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    settings = get_settings().model_copy(update={"prompt_layout": "cached"})
    plan = prepare_run(engine, settings, [str(tmp_path)], reuse_answers=False)
    (document_id,) = plan.document_ids
    assert extract_document(worker_context(), document_id) == "extracted"
    with session_scope(engine) as session:
        row = session.scalars(select(Extraction).where(Extraction.document_id == document_id)).one()
        company, revenue, version, data = row.company, row.revenue_usd, row.prompt_version, row.data
        titles = set(session.scalars(select(RiskFactor.title).where(RiskFactor.document_id == document_id)))
    assert version == settings.prompt_version() and version != "extract-v3", "the cached layout"
    examples_titles = {r["title"] for e in EXAMPLES for r in e.answer["risk_factors"]}
    assert titles and not titles & examples_titles, "no example's risk factor is stored"
    assert company == truth.company and revenue != CALLOWAY["revenue_usd"]
    dropped = data["_copied_from_examples"]
    assert {d["field"] for d in dropped} >= {"company", "revenue_usd", "risk_factors"}
    assert {d["answer"] for d in dropped} == {"extract"} and len({d["chunk"] for d in dropped}) == 1
    assert {d["value"] for d in dropped if d["field"] == "company"} == {HARBOR["company"]}
