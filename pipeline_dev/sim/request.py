"""Pure request handling: parse a chat completions body, compose and finish its answer."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from dataclasses import dataclass
from typing import Any

from pipeline_dev.sim.answers import build_json_answer
from pipeline_dev.sim.faults import Draw
from pipeline_dev.sim.hooked import (
    blank_one_item,
    lengthen_first_string,
    nul_in_one_item,
    raw_newline_in_a_string,
)
from pipeline_dev.sim.replies import build_text_answer, malformed_json, truncate, violate_schema
from pipeline_dev.sim.ungrounded import change_figures, make_up_items, replace_quotes

CHARS_PER_TOKEN = 4
FAILING_STATUSES = (400, 401, 403, 404, 429, 500, 503)
"""The statuses `[[sim:fail-NNN]]` asks for (one documented error each)."""
HOOKS = (
    "invalid",
    "error",
    "badjson",
    "badkey",
    "ctrlchar",
    "baditem",
    "cutoff",
    "nulchar",
    "longstring",
    "slowcopy",
    *(f"fail-{status}" for status in FAILING_STATUSES),
)
"""What a prompt can ask for with `[[sim:NAME]]`: a schema violation, a 5xx, broken JSON, a 401
that echoes the key, and as small models write: a raw control character inside a string, one
list item that breaks the schema (an empty string), an answer cut off at max_tokens mid-item;
and answers valid JSON and schema allow but a database refuses: a NUL character (`\\u0000`) in
one list item's string, a first string field of `hooked.LONG_STRING_CHARS` characters; and `slowcopy`:
a request the simulator has had before (the same model and messages) is answered SLOW_COPY_S
later, as the slower of hedged copies is. `fail-NNN`: OpenAI's documented error of that status
(`pipeline_dev.sim.errors.DOCUMENTED`), on the chat endpoint and in a batch's lines."""
SLOW_COPY_S = 1.5
_FORMATS = ("text", "json_object", "json_schema")


class RequestError(ValueError):
    """The request body is not a valid chat completions request (HTTP 400)."""


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    format_type: str | None  # response_format.type, None when absent
    shape: str  # json_schema | json_object_schema | json_object | prompt (the client's mode names)
    schema: dict[str, Any] | None  # the schema asked for: in response_format, or in the prompt
    max_tokens: int | None
    prompt: str  # all message text
    prompt_tokens: int
    hooks: frozenset[str]  # the [[sim:...]] test hooks the prompt holds
    params: frozenset[str] = frozenset()  # the body's top-level keys
    kept: dict[str, Any] | None = None  # after a cut: the items the client kept (`<kept>` tags)
    service_tier: str = "default"  # what the request asked for: auto, default, flex or priority
    logprobs: bool = False  # `logprobs: true`: each answer token's log-probability is returned
    temperature: float = 0.0  # above 0 a sample: the adversarial faults are drawn afresh
    cache_scope: str = ""  # the response_format, hashed: another schema is another cache
    schema_prefix: str = ""  # the json_schema response_format's schema, as the prompt's start
    prompt_cache_key: str | None = None  # accepted; only steers routing at OpenAI


@dataclass(frozen=True)
class Composed:
    """The full answer before faults and max_tokens cut it."""

    content: str
    is_json: bool
    quotes: int = 0  # quote fields in the answer
    invented: tuple[str, ...] = ()  # those replaced by text not in the document
    doubtful: tuple[str, ...] = ()  # the JSON of every value a fault changed (misread, made up)

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.content)


@dataclass(frozen=True)
class Finished:
    payload: dict[str, Any]
    completion_tokens: int
    bad_json: bool
    truncated: bool


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") for part in content if isinstance(part, dict)]
        return "\n".join(part for part in parts if isinstance(part, str))
    return ""


_DOCUMENT = re.compile(r"<(document(?:-[0-9A-Za-z]+)?)>\n(.*?)</\1>", re.DOTALL)
"""Data from a line's opening tag, `<document>` or one of a boundary the prompt names
(`<document-1f2e3d4c>`), to its own closing tag: with a boundary nothing else ends it, as a
model that reads its instructions takes it; with plain tags the first `</document>` does, as
it would a model's (where a filing held one, the rest read as instructions)."""
_SCHEMA = re.compile(r"<schema>(.*?)</schema>", re.DOTALL)
_KEPT = re.compile(r"<kept>(.*?)</kept>", re.DOTALL)


def tagged_object(tag: re.Pattern[str], text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds between the tags of `tag`, if any."""
    match = tag.search(text)
    try:
        found = json.loads(match.group(1)) if match else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def kept_items(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the last user message says was kept of a cut-off answer, asking for the rest."""
    last = content_text(messages[-1].get("content")) if messages[-1].get("role") == "user" else ""
    return tagged_object(_KEPT, last)


def without_kept(instance: Any, kept: dict[str, Any]) -> Any:
    """`instance` without the list items already kept (a model answering "the rest")."""
    if not isinstance(instance, dict):
        return instance
    return {
        key: [item for item in value if item not in (kept.get(key) or [])]
        if isinstance(value, list)
        else value
        for key, value in instance.items()
    }


def document_text(messages: list[dict[str, Any]]) -> str:
    """The source text: what lies between `<document>` (or `<document-…>`) tags in user
    messages, else all of them.

    Text outside the tags is instructions and is never used as a source.
    """
    user = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    inside = [match.group(2).strip("\n") for text in user for match in _DOCUMENT.finditer(text)]
    return "\n\n".join(inside) if inside else "\n\n".join(user)


def request_shape(format_type: str | None, fmt: Any) -> str:
    """How the request asks for JSON, in the pipeline's structured-output mode names."""
    if format_type == "json_schema":
        return "json_schema"
    if format_type == "json_object":
        return "json_object_schema" if isinstance(fmt, dict) and "schema" in fmt else "json_object"
    return "prompt"


def schema_in_prompt(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A JSON schema the system or user messages state between `<schema>` tags."""
    for message in messages:
        text = content_text(message.get("content"))
        if message.get("role") in ("system", "user") and _SCHEMA.search(text):
            return tagged_object(_SCHEMA, text)
    return None


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """All message contents joined, for token counts and test hooks."""
    return "\n".join(content_text(m.get("content")) for m in messages)


def estimate_tokens(text: str) -> int:
    """ceil(chars / 4): the simulator's token count."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RequestError(f"Invalid '{key}': expected an integer >= 1, got {value!r}.")
        return value
    return None


def parse(body: Any) -> ChatRequest:
    """A validated request; raises RequestError with an OpenAI-like message otherwise."""
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(f"Invalid 'messages[{index}]': expected an object with a role.")
    if body.get("stream"):
        raise RequestError("'stream': true is not supported by pipeline-sim.")
    fmt = body.get("response_format")
    format_type: str | None = None
    schema: dict[str, Any] | None = None
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in _FORMATS:
            raise RequestError(f"Invalid 'response_format': type must be one of {_FORMATS}.")
        format_type = fmt["type"]
        if format_type == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise RequestError("Missing required parameter: 'response_format.json_schema'.")
        elif format_type == "json_object" and isinstance(fmt.get("schema"), dict):
            schema = fmt["schema"]  # llama-cpp-python's form, enforced by grammar there
    prompt = prompt_text(messages)
    prefix = schema_prefix(fmt)
    shape = request_shape(format_type, fmt)
    if schema is None and format_type != "text":
        schema = schema_in_prompt(messages)  # a model that follows the prompt's instruction
    return ChatRequest(
        model=model,
        messages=messages,
        format_type=format_type,
        shape=shape,
        schema=schema,
        max_tokens=_max_tokens(body),
        params=frozenset(body),
        prompt=prompt,
        prompt_tokens=estimate_tokens(prefix + prompt),
        hooks=frozenset(hook for hook in HOOKS if f"[[sim:{hook}]]" in prompt),
        kept=kept_items(messages),
        service_tier=_service_tier(body),
        logprobs=body.get("logprobs") is True,
        temperature=float(body.get("temperature") or 0.0),
        cache_scope=_cache_scope(fmt),
        schema_prefix=prefix,
        prompt_cache_key=_prompt_cache_key(body),
    )


def schema_prefix(fmt: Any) -> str:
    """The text a `json_schema` response_format adds before the messages: OpenAI's prompt-caching
    guide says a structured output's schema "serves as a prefix to the system message and can be
    cached", and usage counts it in `prompt_tokens`. Its compact JSON is what the simulator
    counts (the provider's rendering of it is not published); other formats add nothing (a
    `json_object` schema, llama-cpp-python's form, is a grammar, not prompt text)."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return ""
    return json.dumps(fmt.get("json_schema"), separators=(",", ":"), sort_keys=True) + "\n"


def _cache_scope(fmt: Any) -> str:
    """The response_format as a cache keys it: a structured-output schema is part of the prefix
    (OpenAI's prompt-caching guide), so another schema is another cache."""
    if fmt is None:
        return ""
    return hashlib.sha1(json.dumps(fmt, sort_keys=True).encode()).hexdigest()


def _prompt_cache_key(body: dict[str, Any]) -> str | None:
    key = body.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        raise RequestError("Invalid type for 'prompt_cache_key': expected a string.")
    return key


SERVICE_TIERS = ("auto", "default", "flex", "priority")
"""The Chat Completions `service_tier` values (the API reference); auto and default are the
standard tier here, priority too (the simulator has no faster lane)."""


def _service_tier(body: dict[str, Any]) -> str:
    tier = body.get("service_tier")
    if tier is None:
        return "default"
    if tier not in SERVICE_TIERS:
        raise RequestError(f"Invalid value for 'service_tier': expected one of {', '.join(SERVICE_TIERS)}.")
    return str(tier)


CUTOFF_FRACTION = 0.85
"""Where `[[sim:cutoff]]` cuts an answer: inside its last list items, past the fields before them."""


def compose(
    chat: ChatRequest,
    ungrounded_rate: float = 0.0,
    seed: int | None = None,
    wrong_figure_rate: float = 0.0,
    made_up_rate: float = 0.0,
) -> Composed:
    """The answer the request asks for, built from its document text (CPU only); a share
    `ungrounded_rate` of its quotes is replaced by text the document does not hold, a share
    `wrong_figure_rate` of its money figures is misread, and a share `made_up_rate` of its
    quoted items is made up whole (`pipeline_dev.sim.ungrounded`)."""
    document = document_text(chat.messages)
    max_chars = chat.max_tokens * CHARS_PER_TOKEN if chat.max_tokens else None
    if chat.schema is not None:
        instance = faithful = build_json_answer(chat.schema, document)
        instance, invented = replace_quotes(instance, document, ungrounded_rate, seed)
        instance = change_figures(instance, wrong_figure_rate, seed)
        instance, made_up = make_up_items(instance, document, made_up_rate, seed)
        invented.quotes.extend(made_up)
        if chat.kept is not None:
            instance = without_kept(instance, chat.kept)
        if "invalid" in chat.hooks:
            instance = violate_schema(instance, chat.schema)
        if "baditem" in chat.hooks:
            instance = blank_one_item(instance)
        if "nulchar" in chat.hooks:
            instance = nul_in_one_item(instance)
        if "longstring" in chat.hooks:
            instance = lengthen_first_string(instance)
        content = json.dumps(instance, ensure_ascii=False)
        if "ctrlchar" in chat.hooks:
            content = raw_newline_in_a_string(content)
        # Only a request for logprobs reads them: the walk is not paid for on every answer.
        changed = changed_leaves(faithful, instance) if chat.logprobs else []
        doubtful = tuple(json.dumps(v, ensure_ascii=False) for v in changed)
        return Composed(content, True, invented.quotes_seen, tuple(invented.quotes), doubtful)
    if chat.format_type == "json_object":
        summary = build_text_answer(document, max_chars and max_chars - 20)
        return Composed(json.dumps({"summary": summary}, ensure_ascii=False), True)
    return Composed(build_text_answer(document, max_chars), False)


def changed_leaves(before: Any, after: Any) -> list[Any]:
    """The leaf values of `after` that differ from `before`'s at the same place."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [v for k in after for v in changed_leaves(before.get(k), after[k])]
    if isinstance(before, list) and isinstance(after, list):
        return [
            v
            for i, item in enumerate(after)
            for v in changed_leaves(before[i] if i < len(before) else None, item)
        ]
    return [] if before == after else [after]


_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


def token_logprobs(content: str, doubtful: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each token of `content` with a log-probability, as `logprobs.content` holds them.

    An assumption, not a measurement: a value the simulator changed (a misread figure, a made-up
    title or quote) is written with less certainty (p uniform in 0.05-0.8) than the rest (p near
    1: 1 - u^2 x 0.4), and the two overlap. Deterministic for the same content."""
    rng = random.Random(hashlib.sha1(content.encode()).hexdigest())
    unsure: list[tuple[int, int]] = []
    for value in doubtful:
        at = content.find(value)
        while at != -1:
            unsure.append((at, at + len(value)))
            at = content.find(value, at + 1)
    tokens = []
    for match in _TOKEN.finditer(content):
        start, end = match.span()
        low = any(a < end and start < b for a, b in unsure)
        p = rng.uniform(0.05, 0.8) if low else 1 - rng.random() ** 2 * 0.4
        token = match.group(0)
        tokens.append(
            {"token": token, "logprob": math.log(p), "bytes": list(token.encode()), "top_logprobs": []}
        )
    return tokens


def finish(
    chat: ChatRequest, composed: Composed, draw: Draw, number: int, cached_tokens: int = 0
) -> Finished:
    """The OpenAI chat.completion body, after bad-JSON, truncation and max_tokens cuts;
    `cached_tokens` of its prompt were served from the prompt cache."""
    content = composed.content
    bad_json = composed.is_json and (draw.bad_json or "badjson" in chat.hooks)
    if bad_json:
        content = malformed_json(content)
    # `[[sim:cutoff]]` cuts a first answer; the rest asked for after it is short enough.
    cut_by_hook = "cutoff" in chat.hooks and chat.kept is None
    truncated = (draw.truncate or cut_by_hook) and len(content) > 1
    if truncated:
        content = truncate(content, draw.truncate_fraction if draw.truncate else CUTOFF_FRACTION)
    if chat.max_tokens is not None and len(content) > chat.max_tokens * CHARS_PER_TOKEN:
        content = content[: chat.max_tokens * CHARS_PER_TOKEN]
        truncated = True
    completion_tokens = estimate_tokens(content)
    payload = {
        "id": f"chatcmpl-sim{number:010d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": chat.model,
        "service_tier": "flex" if chat.service_tier == "flex" else "default",
        "system_fingerprint": "fp_pipeline_sim",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": {"content": token_logprobs(content, composed.doubtful)}
                if chat.logprobs
                else None,
                "finish_reason": "length" if truncated else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": chat.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": chat.prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
    }
    return Finished(payload, completion_tokens, bad_json, truncated)
