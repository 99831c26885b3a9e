"""Child processes for the all-in-one `pipeline run` (a private Redis, the simulator, workers).

Only the CLI (and tests and dev tools) import this: the domain never starts processes.
"""
