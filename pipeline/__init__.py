"""Batch LLM extraction over nightly filings: the domain package.

This package never imports Celery (the CLI's thin worker/submit commands excepted);
`workers/` is the Celery layer over it.
"""

__version__ = "0.1.0"
