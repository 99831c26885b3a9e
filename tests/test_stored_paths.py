"""Paths are stored absolute: a submit from a directory with relative paths stores what the
nightly's absolute globs store, and what it prints stays as the user typed it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import select

from pipeline.core.settings import get_settings
from pipeline.ingest import inputs
from pipeline.ingest.producer import prepare_run
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document


def test_relative_paths_are_stored_absolute_and_shown_as_typed(
    pipeline_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.txt").write_text("Item 7. Revenue was $12 million in fiscal 2024.\n" * 40)
    (inbox / "empty.txt").write_text(" \n")
    (tmp_path / "linked.txt").symlink_to(inbox / "a.txt")  # a link: skipped, not followed
    monkeypatch.chdir(tmp_path)
    plan = prepare_run(
        get_engine(pipeline_env["PIPELINE_DATABASE_URL"]),
        get_settings(),
        ["inbox/", "./linked.txt", "inbox/../missing.txt"],
    )
    with session_scope(get_engine(pipeline_env["PIPELINE_DATABASE_URL"])) as session:
        stored = {
            d.path: d.status for d in session.scalars(select(Document).where(Document.run_id == plan.run_id))
        }
    assert stored == {
        str(inbox / "a.txt"): "pending",
        str(inbox / "empty.txt"): "skipped",
        str(tmp_path / "linked.txt"): "skipped",  # the name given, not the link's target
        str(tmp_path / "missing.txt"): "skipped",  # normalised: no "inbox/.."
    }
    shown = sorted(path for path, _ in plan.rejected)  # what stderr and the summary list
    assert shown == ["inbox/../missing.txt", "inbox/empty.txt", "linked.txt"]


def test_a_file_name_that_is_not_utf8_is_stored_absolute_and_printable(tmp_path: Path) -> None:
    name = b"bad\xff name.txt".decode("utf-8", "surrogateescape")
    stored = inputs.stored_path(os.path.join(str(tmp_path), name))
    assert stored == f"{tmp_path}/bad\ufffd name.txt"
    stored.encode("utf-8")  # what a database column takes
