"""A run's confidence summary (what `pipeline status --json` and the report show): fields per
confidence band, the fields escalated, and what each tier of models cost against asking the
escalation model for everything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.core.cost import call_cost
from pipeline.extraction.confidence import BANDS
from pipeline.storage import confidence

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from pipeline.core.settings import Settings

TIER_STAGES = {"extract": "first answers", "verify": "verification", "escalate": "escalation"}


def trust_view(session: Session, run_id: str, settings: Settings) -> dict[str, Any]:
    """Fields per band (by kind and in all), how many scored under the escalation threshold,
    the fields escalated, and calls and cost per tier (extract, verify, escalate)."""
    bands, below = confidence.band_counts(
        session, run_id, [high for _, high in BANDS], settings.escalate_below
    )
    every = [sum(column) for column in zip(*bands.values(), strict=True)]
    escalated = confidence.escalations(session, run_id)
    calls = confidence.calls_by_stage_and_model(session, run_id)
    tiers: dict[str, dict[str, Any]] = {}
    for stage, name, n, _, _, cost, failed in calls:
        if stage in TIER_STAGES:
            tier = tiers.setdefault(stage, {"calls": 0, "failed": 0, "cost_usd": 0.0, "models": []})
            tier["calls"] += n
            tier["failed"] += failed
            tier["cost_usd"] = round(tier["cost_usd"] + cost, 6)
            tier["models"].append(name)
    model = settings.escalate_model or next((m for s, m, *_ in calls if s == "escalate"), None)
    everything = None
    if model is not None:
        prices = settings.prices()
        priced = [call_cost(prices, model, p, c) for s, _, _, p, c, _, _ in calls if s == "extract"]
        everything = None if any(v is None for v in priced) else round(sum(v or 0.0 for v in priced), 6)
    spent = round(sum(t["cost_usd"] for t in tiers.values()), 6)
    return {
        "fields": sum(every),
        "bands": [
            {"band": f"{lo:.1f}-{hi:.1f}", "fields": n} for (lo, hi), n in zip(BANDS, every, strict=True)
        ],
        "by_field": bands,
        "below_threshold": below,
        "threshold": settings.escalate_below,
        "escalation_model": model,
        "escalated_fields": sum(len(e.split(",")) for e in escalated),
        "escalated_documents": len(escalated),
        "tiers": tiers,
        "extraction_cost_usd": spent,
        "escalate_everything_usd": everything,
        "xbrl_revenue": confidence.xbrl_verdicts(session, run_id),
    }
