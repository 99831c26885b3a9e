"""pipeline-sim: an OpenAI-compatible LLM simulator for tests, dry runs and benchmarks.

`SimServer` runs it in-process for tests; `serve()` runs it in the foreground.
"""

from pipeline.sim.config import SimConfig
from pipeline.sim.runner import SimServer, serve
from pipeline.sim.server import build_app

__all__ = ["SimConfig", "SimServer", "build_app", "serve"]
