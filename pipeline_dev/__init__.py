"""Development tools, never imported by production modules: the LLM simulator, the bench, the
synthetic filing generator. The CLI offers them (`pipeline sim`, `pipeline bench`) by importing
them lazily, and `pipeline run` starts the simulator as a child process when no endpoint is set.
"""
