"""Pure logic: chunking, merging, reduction, rendering, retry timing, settings."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
import threading

import pytest
from markdown_it import MarkdownIt
from pydantic import ValidationError

from pipeline.core.redaction import redact
from pipeline.core.retry import backoff_s
from pipeline.core.settings import Settings
from pipeline.extraction.merge import merge_chunks
from pipeline.extraction.schemas import FilingExtraction, RiskFactor
from pipeline.ingest import chunking
from pipeline.reporting import render
from pipeline.reporting.reduce import first_answer, pack, reduce_to_one


def _text(chars: int) -> str:
    paragraph = "Revenue grew in every segment. Demand could adversely affect margins.\n\n"
    return (paragraph * (chars // len(paragraph) + 1))[:chars]


@pytest.mark.parametrize("chars", [10, 4_000, 100_000, 1_000_000])
def test_chunks_cover_every_character_with_overlap(chars: int) -> None:
    text = _text(chars)
    spans = chunking.split(text, chunk_tokens=2_000, overlap_tokens=100)
    assert spans[0].char_start == 0
    assert spans[-1].char_end == len(text)
    for earlier, later in itertools.pairwise(spans):
        assert later.char_start < earlier.char_end, "consecutive chunks overlap"
        assert later.char_start > earlier.char_start, "every chunk makes progress"
    assert all(s.char_end - s.char_start <= 8_000 for s in spans)


def test_chunks_end_at_paragraph_breaks_when_they_can() -> None:
    spans = chunking.split(_text(50_000), chunk_tokens=1_000, overlap_tokens=50)
    text = _text(50_000)
    assert all(text[s.char_end - 2 : s.char_end] == "\n\n" for s in spans[:-1])


def test_overlap_must_be_smaller_than_the_chunk() -> None:
    with pytest.raises(ValueError):
        chunking.split("x", chunk_tokens=100, overlap_tokens=100)


def _part(
    company: str | None = None,
    year: int | None = None,
    revenue: float | None = None,
    risks: tuple[str, ...] = (),
) -> FilingExtraction:
    return FilingExtraction(
        company=company,
        fiscal_year=year,
        revenue_usd=revenue,
        revenue_quote=f"Revenue was {revenue}." if revenue else None,
        risk_factors=[RiskFactor(title=r, quote=f"{r} could hurt us.") for r in risks],
    )


def test_merge_takes_agreed_scalars_first_revenue_and_unique_risks() -> None:
    merged = merge_chunks(
        [
            _part("Acme Inc.", 2025, None, ("Supply chain",)),
            _part(None, 2024, 5e9, ("Supply chain", "Cyber")),
            _part("Acme Inc.", 2025, 6e9, ("cyber",)),
        ]
    )
    assert merged.company == "Acme Inc."
    assert merged.fiscal_year == 2025
    assert merged.revenue_usd == 5e9
    assert [r.title for r in merged.risk_factors] == ["Supply chain", "Cyber"]


def test_merge_of_nothing_found_is_empty() -> None:
    merged = merge_chunks([_part(), _part()])
    assert merged.company is None and merged.revenue_usd is None and merged.risk_factors == []


def test_the_schema_rejects_implausible_values_and_extra_keys() -> None:
    base = {
        "company": "A",
        "fiscal_year": 2025,
        "revenue_usd": 1.0,
        "revenue_quote": None,
        "risk_factors": [],
    }
    FilingExtraction.model_validate(base)
    for bad in ({"fiscal_year": 25}, {"revenue_usd": -1}, {"extra": 1}):
        with pytest.raises(ValidationError):
            FilingExtraction.model_validate({**base, **bad})


def test_pack_fits_the_budget_and_always_pairs() -> None:
    items = ["word " * 400] * 5  # 500 tokens each
    assert [len(b) for b in pack(items, 1_100)] == [2, 2, 1]
    assert [len(b) for b in pack(items, 100)] == [2, 2, 1]


def test_reduce_recurses_until_one_answer_remains() -> None:
    calls: list[int] = []

    def synthesize(batch: list[str]) -> str:
        calls.append(len(batch))
        return "summary " * 50

    answer, depth = reduce_to_one(["fact " * 100] * 40, 600, synthesize, parallelism=2)
    assert answer.startswith("summary")
    assert depth >= 3
    assert sum(calls[: len(pack(["fact " * 100] * 40, 600))]) == 40


def test_escape_removes_html_links_and_images() -> None:
    dirty = "<script>x</script> ![img](http://evil/x.png) [click](https://evil) | ok"
    shown = MarkdownIt("gfm-like").render(render.escape(dirty))
    assert "<script" not in shown and "<img" not in shown and "<a " not in shown
    assert "|" not in render.cell(dirty).replace("\\|", "")


def test_money_formats_units() -> None:
    assert render.money(1_234_500_000) == "$1.2B"
    assert render.money(999) == "$999"
    assert render.money(None) == ""


def test_backoff_is_jittered_capped_and_honours_retry_after() -> None:
    rng = random.Random(1)
    delays = [backoff_s(n, rng=rng, base_s=1, cap_s=30) for n in range(12)]
    assert all(0 <= d <= 30 for d in delays)
    assert backoff_s(0, 7.5, rng=rng) >= 7.5


def test_redact_removes_keys() -> None:
    message = "Incorrect API key provided: sk-abc123***xyz and my-secret-value"
    cleaned = redact(message, Settings(llm_api_key="my-secret-value"))
    assert "sk-abc" not in cleaned and "my-secret-value" not in cleaned


def test_settings_fall_back_to_openai_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPELINE_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("PIPELINE_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-env")
    monkeypatch.setenv("PIPELINE_DATABASE_URL", "postgres://u:p@h/db")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.llm_base_url == "http://127.0.0.1:1/v1"
    assert settings.api_key_value() == "sk-from-openai-env"
    assert "sk-from-openai-env" not in repr(settings)
    assert settings.database_url == "postgresql+psycopg://u:p@h/db"
    monkeypatch.setenv("PIPELINE_LLM_BASE_URL", "http://127.0.0.1:2/v1")
    assert Settings(_env_file=None).llm_base_url == "http://127.0.0.1:2/v1"  # type: ignore[call-arg]


def test_unset_database_means_sqlite_in_the_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    settings = Settings(_env_file=None, data_dir="/tmp/x")  # type: ignore[call-arg]
    assert settings.resolved_database_url == "sqlite:////tmp/x/pipeline.db"


@pytest.mark.slow  # a fresh interpreter imports the whole domain
def test_the_domain_package_never_imports_celery() -> None:
    code = (
        "import sys, pkgutil, importlib, pipeline\n"
        "for m in pkgutil.walk_packages(pipeline.__path__, 'pipeline.'):\n"
        "    if m.name != 'pipeline.__main__': importlib.import_module(m.name)\n"
        "assert 'celery' not in sys.modules, 'celery imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_run_fails_when_more_than_the_threshold_of_its_documents_failed() -> None:
    from pipeline.reporting.synthesize import run_failure

    assert run_failure({"extracted": 9, "failed": 1}, 0.10) is None
    assert run_failure({"extracted": 8, "failed": 2, "skipped": 0}, 0.10) == (
        "2 of 10 documents failed, over the 10% threshold"
    )
    assert run_failure({}, 0.10) is None


def test_the_apps_time_limits_nest_below_the_visibility_timeout() -> None:
    """A task is never handed out twice while it runs: the extract task's own budget (checked
    between chunks, so one more call may follow) ends before Celery's limits, and those end
    before Redis gives the message out again, for the broker and the result backend alike."""
    from workers.app import create_app

    conf = create_app().conf
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    visibility_s = conf.broker_transport_options["visibility_timeout"]
    assert settings.task_time_budget_s + settings.llm_timeout_s < conf.task_soft_time_limit
    assert conf.task_soft_time_limit < conf.task_time_limit < visibility_s
    assert conf.result_backend_transport_options["visibility_timeout"] == visibility_s
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.worker_prefetch_multiplier == 1


def test_the_first_of_hedged_copies_answers_and_the_rest_still_run() -> None:
    release = threading.Event()
    finished: list[str] = []
    calls = itertools.count()

    def call() -> str:
        if next(calls) == 0:  # the first copy is the provider's straggler
            release.wait(10)
            finished.append("slow")
            return "slow"
        finished.append("fast")
        return "fast"

    assert first_answer(call, 2) == "fast"
    release.set()
    for _ in range(100):
        if len(finished) == 2:
            break
        threading.Event().wait(0.05)
    assert finished == ["fast", "slow"], "the other copy ran to its end (it records its own call)"


def test_hedged_copies_that_all_fail_raise_the_failure() -> None:
    def call() -> str:
        raise ValueError("provider down")

    with pytest.raises(ValueError, match="provider down"):
        first_answer(call, 3)
    assert first_answer(lambda: "only", 1) == "only"


def test_every_redis_key_is_declared_once_and_no_prefix_is_anothers() -> None:
    """`pipeline.core.keys` is the one place a Redis key is named: no prefix starts another
    (a scan of one would also match the other's keys), and no module spells a key of its own."""
    from pathlib import Path

    from pipeline.core import keys

    prefixes = [key.prefix for key in keys.ALL]
    assert len(set(prefixes)) == len(prefixes)
    for a, b in itertools.permutations(prefixes, 2):
        assert not b.startswith(a), f"{b!r} starts with {a!r}"
    root = Path(__file__).resolve().parents[1]
    spelt = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("pipeline", "workers")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "keys.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(f"{quote}pipeline:" in line for quote in ('"', "'"))
    ]
    assert not spelt, f"Redis keys spelt outside pipeline.core.keys: {spelt}"


MAX_MODULE_LINES = 450
"""A module that needs more has more than one reason to change (issue 31): split it by concern."""


def test_no_module_of_the_domain_or_the_workers_is_over_450_lines() -> None:
    from pathlib import Path

    root = Path(__file__).parents[1]
    sizes = {
        str(path.relative_to(root)): len(path.read_text().splitlines())
        for package in ("pipeline", "workers")
        for path in (root / package).rglob("*.py")
    }
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}
