"""Answers as small models write them (raw control characters, one invalid list item, a cut at
max_tokens) are mended, not failed: the simulator's hooks produce each, the real SDK reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core.settings import Settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.lenient import escape_control_characters, read
from pipeline.llm.prompts import extract_messages
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def client() -> Iterator[LLMClient]:
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        made = LLMClient(Settings(_env_file=None, llm_base_url=sim.base_url), pool_size=2)  # type: ignore[call-arg]
        yield made
        made.close()


def _answer(client: LLMClient, hook: str) -> tuple[FilingExtraction, list[CallRecord]]:
    text, _ = generate_filing(3, seed=5, target_bytes=6_000)
    records: list[CallRecord] = []
    answer = client.structured(
        extract_messages(f"{text}\n[[sim:{hook}]]", 0, 1),
        FilingExtraction,
        stage="extract",
        max_tokens=2_000,
        sink=records.append,
    )
    return answer, records


def test_raw_control_characters_inside_strings_are_read() -> None:
    assert escape_control_characters('{"a": "x\ny",\n "b": 1}') == '{"a": "x\\u000ay",\n "b": 1}'


def test_an_absurd_figure_is_nulled_not_the_whole_answer_failed() -> None:
    # As SmolLM2-135M wrote it: a grounded revenue sentence, and revenue_usd 1.3879e+46.
    answer = '{"company": "Amber", "fiscal_year": 2025, "revenue_usd": 1.3879e46, '
    answer += '"revenue_quote": "Revenue was $1.2 billion.", "risk_factors": []}'
    reading = read(answer, FilingExtraction)
    assert reading.value is not None and reading.value.revenue_usd is None
    assert reading.value.company == "Amber" and reading.value.revenue_quote
    assert reading.notes and reading.notes[0].startswith("dropped revenue_usd: ")


def test_the_last_answer_keeps_its_valid_items_however_many_are_dropped() -> None:
    # As SmolLM2-135M repaired a chunk of hawthorne-machines-2023: eight of sixteen titles empty.
    risks = [{"title": "" if i % 2 else f"Risk {i}", "quote": f"quote {i}"} for i in range(16)]
    answer = json.dumps(
        {
            "company": "H",
            "fiscal_year": 2023,
            "revenue_usd": None,
            "revenue_quote": None,
            "risk_factors": risks,
        }
    )
    assert read(answer, FilingExtraction).value is None, "a first answer this broken is repaired"
    last = read(answer, FilingExtraction, max_dropped=None)
    assert last.value is not None and [r.title for r in last.value.risk_factors] == [
        f"Risk {i}" for i in range(0, 16, 2)
    ]
    assert len(last.notes) == 8


@pytest.mark.parametrize(
    ("hook", "note"),
    [
        ("ctrlchar", "control characters inside strings escaped"),
        ("baditem", "dropped risk_factors.0.title"),
    ],
)
def test_a_mendable_answer_is_kept_in_one_call_and_says_what_was_mended(
    client: LLMClient, hook: str, note: str
) -> None:
    answer, records = _answer(client, hook)
    assert [r.status for r in records] == ["ok"], "no repair call"
    assert note in (records[0].error or "")
    assert answer.company and answer.risk_factors, "the valid items are kept"


def test_an_answer_cut_off_at_max_tokens_keeps_its_items_and_asks_for_the_rest(
    client: LLMClient,
) -> None:
    whole, _ = _answer(client, "none")
    answer, records = _answer(client, "cutoff")
    assert [(r.stage, r.status) for r in records] == [("extract", "ok"), ("rest", "ok")]
    assert "cut off at max_tokens: the complete items kept" in (records[0].error or "")
    titles = [risk.title for risk in answer.risk_factors]
    assert len(titles) == len(set(titles)), "the rest repeats none of the kept items"
    assert sorted(titles) == sorted(risk.title for risk in whole.risk_factors), "nothing is lost"
    assert answer.company == whole.company and answer.revenue_usd == whole.revenue_usd


@pytest.mark.usefixtures("workers")
def test_a_filing_whose_answers_need_mending_is_extracted(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    text, truth = generate_filing(4, seed=6, target_bytes=6_000)
    (tmp_path / truth.filename).write_text(f"{text}\n[[sim:ctrlchar]] [[sim:baditem]] [[sim:cutoff]]\n")
    result = run_cli("submit", str(tmp_path), "--wait", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    status = run_cli("status", result.stdout.strip().splitlines()[-1], "--json", env=pipeline_env)
    assert '"extracted": 1' in status.stdout
