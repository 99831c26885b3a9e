"""No file outside the batch (issue 30, finding 2): a symbolic link is refused unless
`--follow-links` (PIPELINE_FOLLOW_LINKS) is given and it resolves under the directory that was
named; special files are refused; each refusal is a `skipped` row with its reason, in submit's
summary and in status. The nightly inbox (beat's task on a worker) follows the same rule."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import Engine, select

from pipeline.core.constants import REPORT_QUEUE
from pipeline.core.settings import Settings
from pipeline.ingest import inputs
from pipeline.ingest.walk import BROKEN_LINK, LINK_LOOP, LINK_TO_ANCESTOR, NOT_REGULAR, expand
from pipeline.runs.nightly import prepare_nightly
from pipeline.runtime.embedded import Child
from pipeline.storage.db import session_scope
from pipeline.storage.models import Content, Document
from tests.conftest import run_cli

KEY = "sk-live-7f3a0c9e5b1d4a2f8e6c"
FILING = "Item 7. Management's Discussion. Revenue was $12.5 million in fiscal 2024.\n" * 60
NOT_FOLLOWED = "a symbolic link, not followed: "
OUT_OF_DIRECTORY = "a symbolic link out of the named directory: "


@pytest.fixture
def linked_inbox(tmp_path: Path) -> Path:
    """An inbox holding one filing and a link named like a filing to a mode-600 env file
    outside it: the experiment of the issue."""
    secrets = tmp_path / "etc"
    secrets.mkdir()
    env_file = secrets / "env"
    env_file.write_text(f"PIPELINE_LLM_API_KEY={KEY}\nPIPELINE_DATABASE_URL=postgresql://x\n" * 20)
    env_file.chmod(0o600)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "good 10-K.txt").write_text(f"{FILING}Filed from {tmp_path}.\n")  # new to --new-only
    (inbox / "filing 10-K.txt").symlink_to(env_file)
    return inbox


def _problems(found: Iterator[inputs.Candidate], base: Path) -> dict[str, str | None]:
    return {
        os.path.relpath(c.path, base) if c.path.startswith(str(base)) else c.path: c.problem for c in found
    }


def _documents(engine: Engine, run_id: str) -> dict[str, Document]:
    with session_scope(engine) as session:
        rows = list(session.scalars(select(Document).where(Document.run_id == run_id)))
        session.expunge_all()
    return {Path(d.path).name: d for d in rows}


def _key_stored(engine: Engine) -> bool:
    with session_scope(engine) as session:
        return session.scalar(select(Content.sha256).where(Content.text.contains(KEY))) is not None


def test_submit_skips_a_link_to_an_env_file_and_says_so_in_its_summary_and_status(
    pipeline_env: dict[str, str], workers: list[Child], engine: Engine, linked_inbox: Path
) -> None:
    inbox = linked_inbox
    # On the old code the link was read as a filing: its text (the key) stored and sent.
    done = run_cli("submit", str(inbox), "--wait", env=pipeline_env)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    docs = _documents(engine, run_id)
    assert docs["good 10-K.txt"].status == "extracted"
    linked = docs["filing 10-K.txt"]
    assert linked.status == "skipped" and linked.sha256 is None
    assert (
        linked.error
        == f"{NOT_FOLLOWED}--follow-links (PIPELINE_FOLLOW_LINKS) reads links that resolve under {inbox}"
    )
    assert not _key_stored(engine)
    assert KEY not in done.stdout + done.stderr
    shown = " ".join(done.stderr.split())  # rich wraps long lines
    assert f"skipped {inbox}/filing 10-K.txt: {NOT_FOLLOWED}" in shown
    status = run_cli("status", run_id, "--json", env=pipeline_env)
    assert status.returncode == 0, status.stderr
    failures = json.loads(status.stdout)["failures"]
    assert [(f["status"], f["reason"], f["documents"]) for f in failures] == [
        ("skipped", "a symbolic link, not followed", 1)
    ]
    assert failures[0]["paths"] == [str(inbox / "filing 10-K.txt")]


def test_follow_links_reads_a_link_under_the_named_directory_and_never_one_out_of_it(
    pipeline_env: dict[str, str], workers: list[Child], engine: Engine, linked_inbox: Path
) -> None:
    inbox = linked_inbox
    store = inbox / "store"
    store.mkdir()
    (store / "q3.txt").write_text(FILING.replace("12.5", "13.5"))
    (inbox / "current.txt").symlink_to(store / "q3.txt")  # under the inbox: read
    done = run_cli("submit", f"{inbox}/*.txt", "--follow-links", "--wait", env=pipeline_env)
    assert done.returncode == 0, done.stderr
    docs = _documents(engine, done.stdout.strip().splitlines()[-1])
    assert docs["current.txt"].status == "extracted" and docs["current.txt"].path == str(
        inbox / "current.txt"
    )
    assert docs["filing 10-K.txt"].status == "skipped"
    assert docs["filing 10-K.txt"].error == (
        f"{OUT_OF_DIRECTORY}it resolves to {inbox.parent}/etc/env, outside {inbox}"
    )
    assert not _key_stored(engine)


def test_the_nightly_task_on_a_worker_skips_the_inboxs_links(
    pipeline_env: dict[str, str], workers: list[Child], engine: Engine, linked_inbox: Path
) -> None:
    inbox = linked_inbox
    url = pipeline_env["PIPELINE_REDIS_URL"]
    sender = Celery(broker=url, backend=url)
    try:  # beat sends its PIPELINE_INBOX with the task: here, this test's inbox
        run_id = sender.send_task("pipeline.nightly", args=(str(inbox),), queue=REPORT_QUEUE).get(timeout=60)
    finally:
        sender.close()
    docs = _documents(engine, run_id)
    assert set(docs) == {"good 10-K.txt", "filing 10-K.txt"}
    assert (docs["filing 10-K.txt"].error or "").startswith(NOT_FOLLOWED)
    assert not _key_stored(engine)


def test_the_nightly_follows_links_under_the_inbox_with_the_setting(
    engine: Engine, linked_inbox: Path
) -> None:
    inbox = linked_inbox
    (inbox / "sub").mkdir()
    (inbox / "sub" / "a.txt").write_text(FILING.replace("12.5", "14.5"))
    (inbox / "sub" / "up").symlink_to(inbox)  # a loop: refused, never walked
    (inbox / "latest").symlink_to(inbox / "sub")
    settings = Settings(_env_file=None, database_url=str(engine.url), follow_links=True)  # type: ignore[call-arg]
    plan = prepare_nightly(engine, settings.model_copy(update={"inbox": str(inbox)}))
    assert plan is not None
    docs = _documents(engine, plan.run_id)
    assert docs["a.txt"].status == "pending"
    assert docs["up"].error == LINK_TO_ANCESTOR
    assert docs["latest"].error == f"a symbolic link to a directory read already: {inbox}/sub"
    assert (docs["filing 10-K.txt"].error or "").startswith(OUT_OF_DIRECTORY)


def test_every_kind_of_link_is_refused_by_default_and_each_named(tmp_path: Path) -> None:
    root = tmp_path / "inbox"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text(FILING)
    (root / "sub" / "b.txt").write_text(FILING)
    (tmp_path / "outside").mkdir()
    (root / "inside.txt").symlink_to(root / "a.txt")
    (root / "dangling.txt").symlink_to(root / "nowhere")
    (root / "loop1.txt").symlink_to(root / "loop2.txt")
    (root / "loop2.txt").symlink_to(root / "loop1.txt")
    (root / "linked-dir").symlink_to(tmp_path / "outside")
    (root / "sub" / "up").symlink_to(root)
    os.mkfifo(root / "fifo.txt")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "socket.txt"))
        found = _problems(expand([str(root)]), root)
    not_followed = (
        f"{NOT_FOLLOWED}--follow-links (PIPELINE_FOLLOW_LINKS) reads links that resolve under {root}"
    )
    assert found == {
        "a.txt": None,
        "dangling.txt": not_followed,
        "fifo.txt": NOT_REGULAR,
        "inside.txt": not_followed,
        "linked-dir": not_followed,
        "loop1.txt": not_followed,
        "loop2.txt": not_followed,
        "socket.txt": NOT_REGULAR,
        "sub/b.txt": None,
        "sub/up": not_followed,
    }


def test_follow_links_names_what_each_link_is(tmp_path: Path) -> None:
    root = tmp_path / "inbox"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text(FILING)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(KEY)
    (root / "inside.txt").symlink_to("a.txt")
    (root / "out.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (root / "climb.txt").symlink_to("../outside/secret.txt")
    (root / "dangling.txt").symlink_to("nowhere")
    (root / "loop1.txt").symlink_to("loop2.txt")
    (root / "loop2.txt").symlink_to("loop1.txt")
    (root / "out-dir").symlink_to(tmp_path / "outside")
    (root / "sub" / "up").symlink_to("..")
    found = _problems(expand([str(root)], follow_links=True), root)
    outside = f"{OUT_OF_DIRECTORY}it resolves to {tmp_path}/outside/secret.txt, outside {root}"
    assert found == {
        "a.txt": None,
        "climb.txt": outside,
        "dangling.txt": BROKEN_LINK,
        "inside.txt": None,
        "loop1.txt": LINK_LOOP,
        "loop2.txt": LINK_LOOP,
        "out-dir": f"{OUT_OF_DIRECTORY}it resolves to {tmp_path}/outside, outside {root}",
        "out.txt": outside,
        "sub/up": LINK_TO_ANCESTOR,
    }
    inside = next(c for c in expand([str(root / "inside.txt")], follow_links=True))
    assert inputs.load(inside, 1_000_000).text == FILING


@pytest.mark.timeout(20)
def test_a_recursive_glob_over_a_link_loop_ends_and_reads_each_file_once(tmp_path: Path) -> None:
    # The old code's glob.glob('**') followed the loop: the submit never ended.
    root = tmp_path / "inbox"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.txt").write_text(FILING)
    (root / "a" / "b" / "back").symlink_to(root / "a")
    (root / "a" / "b" / "top").symlink_to(root)
    pattern = f"{root}/**/*.txt"
    for follow in (False, True):
        found = expand([pattern], follow_links=True) if follow else expand([pattern])
        read = [path for path, problem in _problems(found, root).items() if problem is None]
        assert read == ["a/b/x.txt"], follow


@pytest.mark.parametrize("follow", [False, True])
def test_a_file_path_is_judged_by_the_directory_holding_it(tmp_path: Path, follow: bool) -> None:
    """`pipeline submit inbox/*.txt` expanded by the shell names files: a link among them stays
    a link in `inbox`, read (with --follow-links) only when it resolves under `inbox`."""
    root = tmp_path / "inbox"
    (root / "store").mkdir(parents=True)
    (root / "store" / "q3.txt").write_text(FILING)
    (tmp_path / "secret.env").write_text(KEY)
    (root / "current.txt").symlink_to(root / "store" / "q3.txt")
    (root / "filing 10-K.txt").symlink_to(tmp_path / "secret.env")
    (root / "linked").symlink_to(root / "store")
    named = [str(root / "current.txt"), str(root / "filing 10-K.txt"), str(root / "linked")]
    found = _problems(expand(named, follow_links=follow), root)
    if not follow:
        assert {path: (problem or "")[: len(NOT_FOLLOWED)] for path, problem in found.items()} == {
            "current.txt": NOT_FOLLOWED,
            "filing 10-K.txt": NOT_FOLLOWED,
            "linked": NOT_FOLLOWED,
        }
    else:
        assert found == {
            "current.txt": None,
            "filing 10-K.txt": f"{OUT_OF_DIRECTORY}it resolves to {tmp_path}/secret.env, outside {root}",
            "linked/q3.txt": None,
        }
    # A linked directory named with a trailing slash is the directory named: read as such.
    assert _problems(expand([f"{root}/linked/"]), root) == {"linked/q3.txt": None}


def test_a_file_swapped_for_a_link_after_it_was_found_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "secret.env").write_text(KEY)
    filing = tmp_path / "inbox" / "a.txt"
    filing.parent.mkdir()
    filing.write_text(FILING)
    [candidate] = list(expand([str(filing.parent)]))
    filing.unlink()
    filing.symlink_to(tmp_path / "secret.env")
    loaded = inputs.load(candidate, 1_000_000)
    assert loaded.text is None and (loaded.problem or "").startswith(NOT_FOLLOWED)


def test_a_tree_is_listed_as_it_is_walked_in_the_same_sorted_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first files of a large tree are read before the rest is listed (a directory is listed
    when the walk reaches it), in the order a full listing gives: sorted, directory by directory."""
    from pipeline.ingest import walk

    for directory, names in {"b": ["2.txt", "1.txt"], "a": ["9.txt", "3.txt"], "c/d": ["5.txt"]}.items():
        (tmp_path / directory).mkdir(parents=True)
        for name in names:
            (tmp_path / directory / name).write_text(FILING)
    (tmp_path / "0.txt").write_text(FILING)
    listed: list[str] = []
    listing = walk._listing

    def listing_seen(real: str) -> Any:
        listed.append(os.path.relpath(real, os.path.realpath(tmp_path)))
        return listing(real)

    monkeypatch.setattr(walk, "_listing", listing_seen)
    found = expand([str(tmp_path)])
    assert [os.path.relpath(next(found).path, tmp_path) for _ in range(2)] == ["0.txt", "a/3.txt"]
    assert listed == [".", "a"], "b and c are listed once the walk reaches them"
    rest = [os.path.relpath(c.path, tmp_path) for c in found]
    assert rest == ["a/9.txt", "b/1.txt", "b/2.txt", "c/d/5.txt"]
    glob_found = [os.path.relpath(c.path, tmp_path) for c in expand([f"{tmp_path}/*/*.txt"])]
    assert glob_found == ["a/3.txt", "a/9.txt", "b/1.txt", "b/2.txt"]
    assert [c.problem for c in expand([f"{tmp_path}/*/*.pdf"])] == ["the pattern matches no file"]
