"""Repairing a run: `pipeline cancel` (stop spending on it) and `pipeline retry` (its failed
documents again, in the same run)."""

from __future__ import annotations
