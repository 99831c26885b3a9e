"""The `pipeline` command line: one module per command group, each registering its commands
on `main` (the `pipeline = "pipeline.cli:main"` entry point)."""

from pipeline.cli import dev, operate, plan, repair, results, retention, review, run, submit
from pipeline.cli.base import main

__all__ = ["dev", "main", "operate", "plan", "repair", "results", "retention", "review", "run", "submit"]
