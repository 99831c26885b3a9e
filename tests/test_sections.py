"""Section-aware chunking (pure): item headings, chunks along them, full coverage."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pipeline.core.constants import CHARS_PER_TOKEN
from pipeline.core.settings import Settings
from pipeline.ingest.inputs import load_bytes
from pipeline.ingest.sections import find_sections, hint, split_by_section
from pipeline.llm import prompts
from pipeline_dev.synth_filings import generate_filing

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples" / "filings").glob("*-10k*"))


def _assert_covers(text: str, spans: list, chunk_tokens: int) -> None:  # type: ignore[type-arg]
    assert spans[0].char_start == 0 and spans[-1].char_end == len(text)
    for earlier, later in itertools.pairwise(spans):
        assert later.char_start <= earlier.char_end, "no character falls between two chunks"
        assert later.char_start > earlier.char_start
    assert all(s.char_end - s.char_start <= chunk_tokens * CHARS_PER_TOKEN for s in spans)
    assert [s.idx for s in spans] == list(range(len(spans)))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("chunk_tokens", [1_000, 6_000])
def test_every_character_of_every_example_is_in_a_chunk(path: Path, chunk_tokens: int) -> None:
    text = load_bytes(path.name, path.read_bytes()).text  # as stored: an HTML filing converted
    assert text is not None
    spans = split_by_section(text, chunk_tokens, 100)
    _assert_covers(text, spans, chunk_tokens)
    assert all(s.section for s in spans)


def test_chunks_start_at_item_headings_unless_a_long_section_is_split() -> None:
    text, _ = generate_filing(2, seed=7, target_bytes=60_000)
    starts = {s.start for s in find_sections(text)}
    spans = split_by_section(text, 2_000, 100)
    for span in spans:
        if span.char_start not in starts:  # a later window of one long section, overlapping the last
            assert "," not in (span.section or "") and " to " not in (span.section or "")
    risk = [s for s in spans if s.section and "Item 1A" in s.section]
    assert risk and text[risk[0].char_start :].lstrip().startswith("Item")


def test_tiny_sections_are_merged_and_long_ones_split() -> None:
    titles = {1: "Business", 2: "Properties", 3: "Legal Proceedings"}
    text = "Cover page\n" + "".join(f"Item {n}. {titles[n]}\nA line.\n" for n in (1, 2, 3))
    text += "Item 7. Management's Discussion and Analysis\n"
    text += "Revenue grew. " * 2_000
    spans = split_by_section(text, 1_000, 50)
    _assert_covers(text, spans, 1_000)
    assert spans[0].section == "Cover, Item 1" or spans[0].section == "Cover to Item 7"
    assert spans[-1].section == "Item 7" and len(spans) > 3


def test_text_without_item_headings_is_windowed_as_before() -> None:
    text = "Revenue grew in every segment.\n\n" * 3_000
    spans = split_by_section(text, 1_000, 50)
    _assert_covers(text, spans, 1_000)
    assert {s.section for s in spans} == {None}


def test_the_prompt_says_which_section_and_what_to_look_for() -> None:
    assert "risk factors" in hint("Item 1A. Risk Factors\nWe may fail.", None)
    assert "total revenue" in hint("no heading in this window", "Item 7")
    assert hint("plain text", None) == ""
    user = prompts.extract_messages("Item 8. Financial Statements", 0, 3, hint("Item 8. x", None))[1][
        "content"
    ]
    assert "from Item 8 of the filing" in user and user.index("Item 8 of") < user.index("<document-")


def test_the_chunk_budget_comes_from_the_model_context() -> None:
    settings = Settings(
        _env_file=None, chunk_tokens=6_000, model_context_tokens=4_000, extract_max_tokens=1_000
    )  # type: ignore[call-arg]
    assert settings.chunk_budget_tokens() == 4_000 - 2_000 - 1_000  # the cached layout's prompt
    compact = settings.model_copy(update={"prompt_layout": "compact"})
    assert compact.chunk_budget_tokens() == 4_000 - 600 - 1_000
    assert Settings(_env_file=None, chunk_tokens=6_000).chunk_budget_tokens() == 6_000  # type: ignore[call-arg]


def _ten_k(*items: tuple[str, int]) -> str:
    """A 10-K's text: a table of contents of every item, then each item with `size` characters."""
    contents = "".join(f"Item {n}. | {title} | {i + 3}\n" for i, (n, title, _) in enumerate(_titled(items)))
    body = "".join(
        f"Item {n}. {title}\n" + "Our business is described here. " * (size // 32) + "\n"
        for n, title, size in _titled(items)
    )
    return "FORM 10-K\nTable of Contents\n" + contents + body


def _titled(items: tuple[tuple[str, int], ...]) -> list[tuple[str, str, int]]:
    titles = {"1": "Business", "1A": "Risk Factors", "1B": "Unresolved Staff Comments", "6": "[Reserved]",
              "7": "Management's Discussion and Analysis", "8": "Financial Statements and Supplementary Data"}  # fmt: skip
    return [(n, titles[n], size) for n, size in items]


def test_a_short_item_is_taken_from_the_body_not_from_the_table_of_contents() -> None:
    text = _ten_k(("1", 5_000), ("1A", 4_000), ("1B", 10), ("6", 12), ("7", 4_000), ("8", 4_000))
    found = find_sections(text, "10-K")
    names = [s.name for s in found]
    assert names == ["Cover", "Item 1", "Item 1A", "Item 1B", "Item 6", "Item 7", "Item 8"]
    contents_end = text.index("Item 1. Business\n")
    assert all(s.start >= contents_end for s in found if s.name != "Cover")


def test_an_older_10k_without_item_1a_gets_none_from_a_risk_factors_line_in_its_mdna() -> None:
    mdna = "Item 7. Management's Discussion and Analysis\n" + "Sales grew. " * 300
    text = (
        "FORM 10-K\nItem 1. Business\n"
        + "We make cars. " * 300
        + "\n"
        + mdna
        + "\nRisk Factors\n"
        + "Costs may rise. " * 300
    )
    assert "Item 1A" not in [s.name for s in find_sections(text, "10-K")]
    with_contents = "Item 1A. | Risk Factors | 12\n" + text
    assert "Item 1A" in [s.name for s in find_sections(with_contents, "10-K")], (
        "named, then found by its title"
    )
