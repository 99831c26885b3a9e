"""Calibration (pure): is a field's confidence as good as its word? Accuracy per confidence band,
the expected calibration error, and a reliability diagram.

Bands are fifths of [0, 1] (the top one closed): few enough that a run of a few hundred fields
fills each, and the diagram of mean confidence against accuracy reads at a glance (a calibrated
score lies on the diagonal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from pipeline.extraction.confidence import BANDS, band_of
from pipeline.reporting.charts import COLORS, chart


@dataclass(frozen=True)
class Observation:
    """One scored field: its kind (company, fiscal_year, revenue_usd, risk_factor), its
    confidence, and whether the truth agreed."""

    field: str
    confidence: float
    correct: bool


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    fields: int
    correct: int
    mean_confidence: float | None

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.fields if self.fields else None

    @property
    def label(self) -> str:
        return f"{self.low:.1f}-{self.high:.1f}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "band": self.label,
            "fields": self.fields,
            "correct": self.correct,
            "accuracy": None if self.accuracy is None else round(self.accuracy, 4),
            "mean_confidence": None if self.mean_confidence is None else round(self.mean_confidence, 4),
        }


@dataclass(frozen=True)
class Calibration:
    observations: list[Observation]

    def bands(self, field: str | None = None) -> list[Band]:
        """Each band's fields, correct ones and mean confidence (of one kind of field, or all)."""
        chosen = [o for o in self.observations if field is None or o.field == field]
        bands = []
        for i, (low, high) in enumerate(BANDS):
            inside = [o for o in chosen if band_of(o.confidence) == i]
            mean = sum(o.confidence for o in inside) / len(inside) if inside else None
            bands.append(Band(low, high, len(inside), sum(o.correct for o in inside), mean))
        return bands

    def error(self) -> float | None:
        """The expected calibration error: |accuracy - mean confidence| per band, weighted by
        the band's share of the fields."""
        total = len(self.observations)
        if not total:
            return None
        return round(
            sum(
                b.fields / total * abs((b.accuracy or 0.0) - (b.mean_confidence or 0.0))
                for b in self.bands()
                if b.fields
            ),
            4,
        )

    def spread(self) -> tuple[float, float] | None:
        """(accuracy of the lowest band with fields, of the highest): what the score separates."""
        filled = [b for b in self.bands() if b.fields]
        if len(filled) < 2:
            return None
        return filled[0].accuracy or 0.0, filled[-1].accuracy or 0.0

    def as_dict(self) -> dict[str, Any]:
        kinds = sorted({o.field for o in self.observations})
        return {
            "fields": len(self.observations),
            "bands": [b.as_dict() for b in self.bands()],
            "by_field": {k: [b.as_dict() for b in self.bands(k)] for k in kinds},
            "expected_calibration_error": self.error(),
        }


def reliability_figure(calibration: Calibration) -> Figure:
    """Accuracy against mean confidence per band (bars: how many fields), with the diagonal a
    calibrated score follows."""
    bands = [b for b in calibration.bands() if b.fields]
    with chart("reliability", 3.4, 2, width_ratios=(3, 2)) as (fig, (left, right)):
        left.plot([0, 1], [0, 1], linestyle="--", color=COLORS["muted"], label="calibrated")
        left.plot(
            [b.mean_confidence for b in bands],
            [b.accuracy for b in bands],
            marker="o",
            color=COLORS["main"],
            label="this run",
        )
        left.set(
            xlim=(0, 1), ylim=(0, 1.02), title="Reliability", xlabel="mean confidence", ylabel="accuracy"
        )
        left.legend(loc="upper left", fontsize=8, frameon=False)
        every = calibration.bands()
        right.bar([b.label for b in every], [b.fields for b in every], color=COLORS["main"])
        right.set(title="Fields per band", xlabel="confidence band", ylabel="fields")
        right.tick_params(axis="x", labelrotation=45)
    return fig
