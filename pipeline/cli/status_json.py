"""`pipeline status --json`: the run's fields and what was gathered around them, in the shape
docs/status.md describes (versioned by JSON_VERSION)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pipeline.cli.status_page import StatusPage, summary_line

JSON_VERSION = 1
"""The version of `status --json`'s shape (docs/status.md): raised when a field changes meaning
or goes away; new fields may be added within a version."""


def status_json(page: StatusPage) -> dict[str, Any]:
    """The shape docs/status.md describes: the run's fields, then what was gathered around it."""
    return {
        "version": JSON_VERSION,
        "summary": summary_line(page.view),
        **page.view.as_dict(),
        "failures": [asdict(group) for group in page.failures],
        "grounding": [asdict(d) for d in page.grounding],
        "structured_output": _structured(page.limiter),
        "limiter": page.limiter,
        "workers": page.workers,
        "inbox_warning": page.inbox_warning,
        "broker_problem": page.broker_problem,
        "notes": [{"label": label, "text": text} for label, text in page.notes],
    }


def _structured(limiter: list[dict[str, Any]] | None) -> list[dict[str, str]] | None:
    if limiter is None:
        return None
    found = {
        scope["model"]: {
            "model": scope["model"],
            "mode": scope["structured_output_mode"],
            "how": scope["structured_output_how"],
        }
        for scope in limiter
    }
    return list(found.values())
