"""The test suite (see conftest.py)."""

import os
import sys

# Bytecode is written (and then read) even where PYTHONDONTWRITEBYTECODE is set, as on the CI
# machine: without it every process of the suite (a few hundred workers, commands, simulators)
# compiled the project's modules again, about 1 s of CPU each, and each test process rewrote
# every test module's assertions again. This package is imported before its conftest; this
# process and its children write to the checkout's own __pycache__ directories.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
