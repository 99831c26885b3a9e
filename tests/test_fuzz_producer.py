"""Property-based tests (hypothesis) of the producer on any input (issue 30, "Fuzzing in CI"):

- `inputs.load_bytes` on any bytes gives text a database column takes (no NUL, valid UTF-8,
  not blank) or a reason, never both, and never raises;
- `prepare_run` (what `pipeline submit` and the nightly call) over a directory of arbitrary
  files (random bytes, text in a dozen encodings, NULs and control characters in filings,
  lines of megabytes, names that are not UTF-8, links, FIFOs) never raises, and leaves each
  file as exactly one `documents` row: usable ones `pending` with their text stored, every
  other one `skipped` with its reason. Hidden files (a leading dot) are not filings and have
  no row (a directory of hidden files only is one row: it holds no file). On Postgres as on SQLite: Postgres refuses a NUL in a text column.

Bounded in time (`max_examples` below: the stored test dominates), no example database.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from pipeline.core.settings import Settings
from pipeline.ingest import inputs
from pipeline.ingest.producer import prepare_run
from pipeline.storage import intake
from pipeline.storage.db import get_engine, session_scope, upgrade
from pipeline.storage.models import Content, Document

FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
STORED = settings(
    max_examples=40,  # each example is a submit's storing, into Postgres: ~0.3 s each on CI
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MAX_FILE_BYTES = 1_000_000
"""Giant lines are drawn on either side of it."""

ENCODINGS = [
    "utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-32", "cp1252", "latin-1", "shift_jis",
    "gb18030", "koi8-r", "mac_roman", "cp437",
]  # fmt: skip
CONTROLS = [
    "\x00", "\x01", "\x07", "\x08", "\x1b[2J", "\x1b]8;;http://attacker.example\x07", "\r", "\r\n",
    "\x0b", "\x0c", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\ufeff", "\ufffd", "\u202e",
    "\u200b", "\U0010ffff", "\t",
]  # fmt: skip
BASE = "Item 7. Management's Discussion and Analysis. Revenue was $12.5 million in fiscal 2024.\n" * 40

text_with_controls = st.lists(st.one_of(st.text(), st.sampled_from(CONTROLS)), max_size=60).map("".join)
encoded = st.tuples(text_with_controls, st.sampled_from(ENCODINGS)).map(
    lambda pair: pair[0].encode(pair[1], errors="replace")
)
filing_with_inserts = st.lists(
    st.tuples(st.integers(0, len(BASE)), st.sampled_from(CONTROLS)), max_size=8
).map(lambda inserts: _insert(BASE, inserts).encode("utf-8"))
giant_line = st.tuples(
    st.sampled_from([b"x", b"word ", "\u00e9".encode(), b"\x00", b" ", "\u202e".encode(), b"\r"]),
    st.integers(MAX_FILE_BYTES // 8, MAX_FILE_BYTES // 2),
).map(lambda pair: pair[0] * pair[1])
content = st.one_of(
    st.binary(max_size=4096), encoded, filing_with_inserts, giant_line, st.just(b""), st.just(BASE.encode())
)
name = st.one_of(
    st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]), min_size=1, max_size=24
    ),
    st.binary(min_size=1, max_size=24)
    .filter(lambda raw: b"/" not in raw and b"\x00" not in raw)
    .map(os.fsdecode),
).filter(lambda n: n not in (".", "..") and len(os.fsencode(n)) < 200)
entry = st.one_of(
    st.tuples(st.just("file"), content),
    st.tuples(st.sampled_from(["link-out", "link-in", "fifo"]), st.just(b"")),
)


def _insert(text: str, inserts: list[tuple[int, str]]) -> str:
    for at, what in sorted(inserts, reverse=True):
        text = text[:at] + what + text[at:]
    return text


@FAST
@given(data=st.one_of(st.binary(max_size=8192), encoded, filing_with_inserts))
def test_any_bytes_load_as_storable_text_or_a_reason(data: bytes) -> None:
    loaded = inputs.load_bytes("f.txt", data)
    assert (loaded.text is None) != (loaded.problem is None)
    if loaded.text is not None:
        assert "\x00" not in loaded.text and loaded.text.strip()
        loaded.text.encode("utf-8")  # no lone surrogate: what Postgres and SQLite both take
        assert loaded.sha256 is not None


@pytest.fixture(scope="module")
def sqlite_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz-db') / 'pipeline.db'}"
    upgrade(url)
    return get_engine(url)


@pytest.fixture(params=["session", "sqlite"])
def any_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The session's database (Postgres when there is one, always under CI), and SQLite."""
    if request.param == "sqlite":
        yield request.getfixturevalue("sqlite_engine")
    else:
        yield request.getfixturevalue("engine")


@STORED
@example(  # two names that are not UTF-8 print alike ("\ufffd"): each is its own row
    entries=[(os.fsdecode(b"\xff"), ("file", BASE.encode())), (os.fsdecode(b"\xfe"), ("file", b"x"))]
)
@given(entries=st.lists(st.tuples(name, entry), min_size=1, max_size=6, unique_by=lambda e: e[0]))
def test_every_file_ends_as_one_row_with_a_reason_when_not_extracted(
    any_engine: Engine, entries: list[tuple[str, tuple[str, bytes]]]
) -> None:
    settings_ = Settings(_env_file=None, database_url=str(any_engine.url), max_file_bytes=MAX_FILE_BYTES)  # type: ignore[call-arg]
    with tempfile.TemporaryDirectory() as tmp:
        inbox = Path(tmp) / "inbox"
        inbox.mkdir()
        (Path(tmp) / "secret.env").write_text("PIPELINE_LLM_API_KEY=sk-live-fuzz\n" * 10)
        for filename, (kind, data) in entries:
            path = inbox / filename
            if kind == "file":
                path.write_bytes(data)
            elif kind == "fifo":
                os.mkfifo(path)
            else:
                path.symlink_to(Path(tmp) / "secret.env" if kind == "link-out" else inbox)
        plan = prepare_run(any_engine, settings_, [str(inbox)])
        expected = sorted(inputs.stored_path(str(inbox / n)) for n, _ in entries if not n.startswith("."))
        expected = expected or [inputs.stored_path(str(inbox))]  # hidden files only: "holds no file"
    try:
        with session_scope(any_engine) as session:
            rows = session.execute(
                select(Document.path, Document.status, Document.error, Content.text)
                .outerjoin(Content, Content.sha256 == Document.sha256)
                .where(Document.run_id == plan.run_id)
            ).all()
        assert sorted(path for path, *_ in rows) == expected
        for path, status, error, text in rows:
            assert "sk-live-fuzz" not in (text or ""), path  # no file from outside the batch
            if status == "pending":
                assert error is None and text and "\x00" not in text, path
            else:
                assert status == "skipped" and error, (path, status, error)
        assert len(plan.rejected) == sum(1 for _, status, *_ in rows if status == "skipped")
    finally:
        with session_scope(any_engine) as session:
            intake.delete_run(session, plan.run_id)
