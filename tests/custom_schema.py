"""A user's extraction schema, for `submit --schema tests.custom_schema:SegmentFacts`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Segment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    quote: str


class SegmentFacts(BaseModel):
    """The company and its business segments, each with the sentence naming it."""

    model_config = ConfigDict(extra="forbid")

    company: str | None
    segments: list[Segment]


NOT_A_MODEL = "just a string"
