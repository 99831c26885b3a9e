"""`pipeline eval --html`: the scores and the calibration of a run as one self-contained page
(pure): the per-band table, and the reliability diagram as inline SVG, under the report page's
Content-Security-Policy (nothing may load)."""

from __future__ import annotations

from typing import Any

from pipeline.reporting.calibration import Calibration, reliability_figure
from pipeline.reporting.charts import to_svg
from pipeline.reporting.html import CSP, STYLE
from pipeline.reporting.html_parts import figure, join, note, section, table, tag, text

FIELD_NAMES = {
    "company": "Company",
    "fiscal_year": "Fiscal year",
    "revenue_usd": "Revenue",
    "risk_factor": "Risk factors",
}


def render_eval_page(run_id: str, data: dict[str, Any], calibration: Calibration) -> str:
    """The page: overall scores, accuracy per confidence band (in all and per field), and the
    reliability diagram."""
    overall = data["overall"]
    scores = table(
        ["Filings found", "Company", "Fiscal year", "Revenue", "Risk recall", "Risk precision"],
        [
            [
                f"{overall['found']} of {overall['filings']}",
                *(_share(overall[k]) for k in ("company_normalised", "fiscal_year", "revenue")),
                _share(overall["risk_recall"]),
                _share(overall["risk_precision"]),
            ]
        ],
    )
    cal = data["calibration"]
    spread = calibration.spread()
    said = (
        f"The lowest band with fields is right {spread[0]:.0%} of the time, the highest {spread[1]:.0%}."
        if spread
        else "Fewer than two bands hold fields: the score separates nothing here."
    )
    bands = table(
        ["Confidence", "Fields", "Correct", "Accuracy", "Mean confidence"], _band_rows(cal["bands"])
    )
    by_field = join(
        tag("h3", FIELD_NAMES.get(kind, kind))
        + table(["Confidence", "Fields", "Correct", "Accuracy", "Mean confidence"], _band_rows(rows))
        for kind, rows in cal["by_field"].items()
    )
    diagram = (
        figure(
            to_svg(reliability_figure(calibration)),
            "Accuracy against mean confidence per band; the dashed diagonal is a calibrated score.",
        )
        if cal["fields"]
        else note("No scored field has a confidence: nothing to draw.")
    )
    ece = cal["expected_calibration_error"]
    body = join(
        [
            tag("h1", f"Evaluation of run {run_id}"),
            section("scores", "Scores", scores),
            section(
                "calibration",
                "Calibration",
                note(
                    f"{cal['fields']} fields with a confidence. {said}"
                    + (f" Expected calibration error {ece:.3f}." if ece is not None else "")
                ),
                diagram,
                bands,
                by_field,
            ),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{text('Evaluation: ' + run_id)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def _band_rows(bands: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            b["band"],
            str(b["fields"]),
            str(b["correct"]),
            _share(b["accuracy"]),
            "" if b["mean_confidence"] is None else f"{b['mean_confidence']:.2f}",
        ]
        for b in bands
    ]
