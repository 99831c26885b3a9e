"""The prompt tokens a run's extract calls will be served from the provider's cache, for
`pipeline plan` and the run's stored estimate (issue 50).

A provider serves a prompt's prefix from its cache when a recent request began the same way:
from 1,024 tokens, in steps of 128 (OpenAI's prompt-caching guide). In the cached layout
(`pipeline.extraction.layout`) every call begins with the same instructions, schema and
examples, and a filing's calls with its context as well; so, per filing:

- its first call is served the instructions (all but the run's very first call, which finds
  nothing cached);
- each later call is served the instructions and the filing's context;

each rounded down to a step, and nothing under the minimum. The compact layout shares less than
the minimum: nothing is estimated for it. Assumed: a run's calls follow one another within the
provider's time-to-live, and a filing's later calls reach the provider after its first has been
read. A provider that takes a filing's chunks all at once, before it has cached any of them, or
spreads one key's requests over machines, serves less: the estimate is then an upper bound.
Repairs and second answers, which repeat a whole prompt, are not counted.
"""

from __future__ import annotations

from pipeline.core.settings import Settings
from pipeline.extraction import layout_choice
from pipeline.ingest.producer import SubmitPlan
from pipeline.llm import prompts
from pipeline.llm.tokens import counter_for
from pipeline.runs.mode import PROMPT_OVERHEAD_TOKENS

servable = layout_choice.servable


def shared_tokens(settings: Settings, schema: str | None = None) -> tuple[int, int]:
    """(the tokens every call of the run begins with, the answer's schema first, those a
    filing's calls share besides its context's), counted with the model's tokenizer."""
    return layout_choice.shared_tokens(settings.llm_model, schema)


def cached_tokens(settings: Settings, survey: SubmitPlan, schema: str | None = None) -> int:
    """The run's extract calls' prompt tokens the provider is estimated to serve from its cache."""
    if layout_choice.chosen(settings).layout != "cached":
        return 0
    every_call, per_filing = shared_tokens(settings, schema)
    total, first = 0, True
    for number, chunks in survey.chunk_counts.items():
        if chunks <= 0:
            continue
        total += 0 if first else servable(every_call)
        first = False
        context = survey.context_tokens.get(number, 0)
        total += (chunks - 1) * servable(every_call + per_filing + context)
    return total


def prompt_overhead_tokens(settings: Settings, survey: SubmitPlan, schema: str | None = None) -> int:
    """An extract call's prompt tokens besides its chunk's text, where no run taught the plan
    better: PROMPT_OVERHEAD_TOKENS in the compact layout (its instructions, hint and schema);
    in the cached layout that, less the compact layout's own instructions, plus the cached
    layout's (instructions, schema and examples, the filing's context on average, the part's
    line)."""
    if layout_choice.chosen(settings).layout != "cached":
        return PROMPT_OVERHEAD_TOKENS
    count = counter_for(settings.llm_model)
    compact = layout_choice.compact_tokens(settings.llm_model)
    every_call, per_filing = shared_tokens(settings, schema)
    contexts = list(survey.context_tokens.values())
    context = sum(contexts) // len(contexts) if contexts else 0
    part = count("1 of 1 of the filing.\n" + prompts.delimited(""))
    return PROMPT_OVERHEAD_TOKENS - compact + every_call + per_filing + context + part
