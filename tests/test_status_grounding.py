"""`pipeline status`'s grounding table reads the few documents worth a look, chosen, ordered and
cut by the database (issue 49: a 20,000-document run's page did not hold a row per document);
--json still lists every extracted document, lowest share first. On Postgres and on SQLite."""

from __future__ import annotations

import uuid

from pipeline.runs.status import document_grounding
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Extraction, Run

# path: (quotes, grounded, revenue grounded, flagged)
DOCUMENTS = {
    "/in/all-found.txt": (4, 4, True, False),
    "/in/half.txt": (4, 2, True, False),
    "/in/none-found.txt": (3, 0, None, False),
    "/in/revenue-missing.txt": (2, 2, False, False),
    "/in/flagged.txt": (2, 2, True, True),
    "/in/no-quotes.txt": (0, 0, None, False),
    "/in/three-quarters.txt": (4, 3, True, False),
}


def _run(url: str) -> str:
    run_id = uuid.uuid4().hex
    with session_scope(get_engine(url)) as session:
        session.add(Run(id=run_id, query="q", model="m", prompt_version="p"))
        session.flush()
        for path, (quotes, grounded, revenue, flagged) in DOCUMENTS.items():
            document = Document(run_id=run_id, path=path, status="extracted", injection_flag=flagged)
            session.add(document)
            session.flush()
            session.add(
                Extraction(
                    document_id=document.id,
                    run_id=run_id,
                    quotes_total=quotes,
                    quotes_grounded=grounded,
                    revenue_grounded=revenue,
                    data={},
                    model="m",
                    prompt_version="p",
                )
            )
    return run_id


def test_the_page_reads_the_worst_few_and_json_reads_them_all(each_database: str) -> None:
    run_id = _run(each_database)
    engine = get_engine(each_database)
    try:
        every, total = document_grounding(engine, run_id)
        assert total == len(DOCUMENTS) == len(every)
        assert [d.path for d in every[:3]] == ["/in/none-found.txt", "/in/half.txt", "/in/three-quarters.txt"]
        assert {d.path for d in every[3:]} == {
            "/in/all-found.txt",
            "/in/flagged.txt",
            "/in/no-quotes.txt",
            "/in/revenue-missing.txt",
        }, "the rest have every quote found (or none asked), in path order"
        assert [d.path for d in every[3:]] == sorted(d.path for d in every[3:])

        worst, worth = document_grounding(engine, run_id, worth_only=True, limit=4)
        assert worth == 5, "a quote not found, the revenue not found or flagged: five documents"
        assert [d.path for d in worst] == [
            "/in/none-found.txt",
            "/in/half.txt",
            "/in/three-quarters.txt",
            "/in/flagged.txt",
        ]
        none_found = worst[0]
        assert (none_found.quotes_total, none_found.quotes_grounded, none_found.grounding_rate) == (3, 0, 0.0)
        assert document_grounding(engine, uuid.uuid4().hex, worth_only=True, limit=4) == ([], 0)
    finally:
        engine.dispose()
