"""The exit codes of every `pipeline` command: one small table, documented in the README.

0    done: the run completed with its report (or the command did what was asked)
1    some documents failed, or the run ended failed
2    bad usage or configuration: a setting, an option, a path the user gave
3    infrastructure unreachable or full: the database (or its connections all taken), the broker
     (Redis) or the LLM endpoint; a later try may work
4    stuck: `--wait` gave up on a run that does not move (no live worker, every call
     failing, a long provider pause); the run goes on, `pipeline status` follows it
5    the LLM endpoint refused us: the API key, the model, or no structured-output mode works
6    over budget: `pipeline plan` (or `submit --dry-run`) estimates the run above PIPELINE_RUN_BUDGET_USD
70   internal error (a bug): the message says so; `pipeline --debug …` shows the traceback
130  interrupted (Ctrl-C, SIGTERM): what was started is stopped and marked
"""

from __future__ import annotations

OK = 0
DOCUMENTS_FAILED = 1
USAGE = 2
UNREACHABLE = 3
STUCK = 4
REFUSED = 5
OVER_BUDGET = 6
INTERNAL = 70
INTERRUPTED = 130
