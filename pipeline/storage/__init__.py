"""Storage: SQLAlchemy models and engines, and the queries of each phase (intake at submit,
documents while extracting, llm_calls throughout, run_state and reports at the end)."""
