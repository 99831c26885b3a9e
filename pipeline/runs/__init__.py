"""A run's life after submit: its status and progress, finalize's decisions, resume, the watchdog."""
