"""Report: compress each extraction, synthesize the run's answer (a reduce tree), render, evaluate."""
