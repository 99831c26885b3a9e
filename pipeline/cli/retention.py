"""Retention: `pipeline prune` (old runs' filing texts, chunks and call rows)."""

from __future__ import annotations
