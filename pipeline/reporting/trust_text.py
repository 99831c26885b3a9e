"""The confidence summary in words (pure): the same sentences in `pipeline status`, the Markdown
report and the HTML page."""

from __future__ import annotations

from typing import Any


def confidence_lines(view: dict[str, Any] | None) -> list[str]:
    """Fields per confidence band; what escalation did and cost against asking the escalation
    model for everything; what verification cost. [] when no field was scored."""
    if not view or not view.get("fields"):
        return []
    bands = ", ".join(f"{b['band']}: {b['fields']}" for b in view["bands"])
    lines = [
        f"{view['fields']} fields scored; by confidence band {bands}; "
        f"{view['below_threshold']} under {view['threshold']:g}."
    ]
    tiers = view.get("tiers") or {}
    model = view.get("escalation_model")
    escalate = tiers.get("escalate")
    if model and escalate:
        line = (
            f"Escalation to {model}: {view['escalated_fields']} fields of {view['escalated_documents']} "
            f"documents replaced by its better-grounded answers, {escalate['calls']} calls, "
            f"${escalate['cost_usd']:.4f}."
        )
        everything = view.get("escalate_everything_usd")
        spent = view.get("extraction_cost_usd") or 0.0
        if everything:
            line += (
                f" Extraction cost ${spent:.4f} in all, against ${everything:.4f} to ask {model} for "
                f"every chunk ({spent / everything:.2f}x)."
            )
        if escalate.get("failed"):
            line += (
                f" {escalate['failed']} escalation calls failed (see llm_calls.error, stage escalate): "
                "check PIPELINE_ESCALATE_MODEL and its endpoint with `pipeline doctor`."
            )
        lines.append(line)
    elif model:
        lines.append(f"Escalation to {model}: no field was asked again.")
    verify = tiers.get("verify")
    if verify:
        lines.append(
            f"Verification (second answers for a sample): {verify['calls']} calls, ${verify['cost_usd']:.4f}."
        )
    if line := xbrl_line(view.get("xbrl_revenue")):
        lines.append(line)
    return lines


def xbrl_line(verdicts: dict[str, int] | None) -> str:
    """The revenues against the filings' own inline-XBRL facts, in a sentence ("" when no filing
    of the run has a fact)."""
    if not verdicts or not (verdicts.get("agrees") or verdicts.get("differs") or verdicts.get("no answer")):
        return ""
    line = (
        f"Revenue against the filings' own XBRL: {verdicts['agrees']} agree (raised), "
        f"{verdicts['differs']} differ (lowered, escalated and listed by the revenue_checks view)"
    )
    if verdicts.get("no answer"):
        line += f", {verdicts['no answer']} without a model answer"
    return line + f"; {verdicts.get('no fact', 0)} filings have no revenue fact."
