"""Batch LLM extraction over nightly filings: the domain package.

Subpackages in the order of the flow: `ingest` (submit), `extraction`, `runs` (finalize, resume,
status), `reporting`; beneath them `llm`, `storage` and `core`. Only the CLI (`pipeline.cli`)
reaches Celery (through `pipeline.cli.celery_app`) and starts processes (`pipeline.runtime`);
`workers/` is the Celery layer over this package; import-linter checks both (pyproject.toml).
"""

__version__ = "0.1.0"
