"""pipeline-sim: an OpenAI-compatible LLM simulator for tests, dry runs and benchmarks.

`SimServer` runs it in-process for tests; `serve()` runs it in the foreground.
"""

from pipeline_dev.sim.config import SimConfig
from pipeline_dev.sim.runner import SimServer, serve
from pipeline_dev.sim.server import build_app

__all__ = ["SimConfig", "SimServer", "build_app", "serve"]
