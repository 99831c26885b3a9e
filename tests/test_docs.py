"""The documentation keeps its shape: the README is a user's guide of at most 300 lines that links
every page of docs/, every relative link of the README and of docs/ reaches a file (and, with an
anchor, one of its headings), and dated lab notes stay in docs/benchmarks.md and the changelog."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300
DATED_NOTES_ALLOWED = {DOCS / "benchmarks.md"}
"""Besides CHANGELOG.md (not scanned), the one page whose measurements carry their date."""

LAB_NOTES = (
    r"\b20\d\d-\d\d-\d\d\b",  # a date: a measurement's or a fix's day
    r"\bslow(er)? machine\b",
    r"\bthe night before\b",
    r"\bgit worktree\b",
    r"\b(before|without) the fix\b",
    r"\bas before\b",
    r"\bonly one layer retries\b",  # three layers retry: docs/design.md says which
)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """`text` without fenced code blocks (sample screens, commands) and link targets."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"\]\([^)]*\)", "]()", text)


def links(text: str) -> list[str]:
    """Relative link targets of a Markdown page, code blocks left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes for `page`: lower case, punctuation dropped, spaces to
    hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_the_readme_is_a_guide_of_at_most_300_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move some to docs/"
    headings = re.findall(r"^## (.+)$", README.read_text(), re.M)
    for section in ("Quick start", "Configuration", "Querying the results", "Deploying", "Security"):
        assert section in headings, section


def test_the_security_table_names_tests_that_exist() -> None:
    """Each row of the README's Security table names the tests that check it: every file and
    every `file::test` it names is there."""
    section = README.read_text().split("## Security", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert {row.split("|")[1].strip() for row in rows} >= {
        "Secrets",
        "Files",
        "Report",
        "Prompt delimiters",
        "Flower",
        "Compose and ops",
    }
    for row in rows:
        named = re.findall(r"`(test_\w+\.py)(?:::(\w+))?`", row.split("|")[3])
        assert named, f"a Security row names no test: {row}"
        for file, test in named:
            path = ROOT / "tests" / file
            assert path.is_file(), f"the Security table names {file}, which is not in tests/"
            if test:
                assert re.search(rf"^def {test}\(", path.read_text(), re.M), f"{file} has no {test}"


def test_the_quick_start_commands_are_the_ones_ci_and_the_local_run_test_run() -> None:
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    run, test = re.findall(r"```sh\n(.*?)\n```", quick, flags=re.S)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci, ".ci/run must run the README's test command"
    # The real model's server is built portably by the command itself, not by an environment
    # only CI has: a build for the host's CPU alone crashed on its first completion (issue 47).
    assert "CMAKE_ARGS=-DGGML_NATIVE=OFF .venv/bin/pip install" in test and "realmodel" in test
    assert [line for line in ci if "CMAKE_ARGS" in line and not line.startswith("#")] == [test], (
        ".ci/run sets no CMAKE_ARGS of its own"
    )
    assert [line for line in ci if "realmodel" in line and not line.startswith("#")] == [test], (
        "the README's command is what installs (and builds) the real model on CI"
    )
    assert f"```sh\n{test}\n```" in (ROOT / "docs" / "testing.md").read_text()
    assert run.endswith("&& .venv/bin/pipeline run examples/filings")
    local_run = (ROOT / "tests" / "test_local_run.py").read_text()
    assert '"pipeline", "run", str(ROOT / "examples" / "filings")]' in local_run


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / t.split("#")[0]).resolve() for t in links(README.read_text())}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md does not link docs/{', docs/'.join(missing)}"


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in pages():
        for target in links(page.read_text()):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_no_dated_lab_note_outside_the_benchmarks_page() -> None:
    found = []
    for page in pages():
        if page in DATED_NOTES_ALLOWED:
            continue
        text = prose(page.read_text())
        for pattern in LAB_NOTES:
            for m in re.finditer(pattern, text, re.I):
                found.append(f"{page.relative_to(ROOT)}: {text[max(0, m.start() - 40) : m.end() + 20]!r}")
    assert found == [], "move measurements to docs/benchmarks.md and history to CHANGELOG.md"


def test_the_link_and_note_checks_find_what_they_look_for(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# A page\n\n## Two words: `here`\n\nSee [x](p.md#two-words-here) and [y](q.md).\n")
    assert anchors(page) == {"a-page", "two-words-here"}
    assert links(page.read_text()) == ["p.md#two-words-here", "q.md"]
    noted = "Measured on 2026-12-02 (before the fix).\n```\nrun 2026-12-03 13:56\n```\n"
    assert [p for p in LAB_NOTES if re.search(p, prose(noted), re.I)] == [LAB_NOTES[0], LAB_NOTES[4]]
