"""OpenAI's Batch API: a JSONL file of chat completions requests, answered within a window.

A batch goes validating -> in_progress -> finalizing -> completed, each step on a background
task of its own (timestamps in Unix seconds, as OpenAI's):

- validating (`batch_validate_s`): the input file is read; a bad line (not JSON, no or a repeated
  custom_id, a method other than POST, a url other than the batch's endpoint, another model),
  an empty file or one over 50,000 requests or 200 MB fails the batch with `errors`, and so does
  the organization's enqueued-token limit (`batch_enqueued_tokens`: token_limit_exceeded).
- in_progress (`batch_duration_s`): the lines complete one by one, in a shuffled order, spread
  evenly over the duration; `request_counts` follow them.
- finalizing (`batch_validate_s`), then completed: the output file holds the lines answered 200,
  the error file those answered with an error status (`batch_fail_rate`'s 500s among them).
- expired: the window (`batch_expire_after_s`) passed first; the lines done are in the output
  file, the others in the error file with `batch_expired`.
- cancelling (`batch_validate_s`) -> cancelled: likewise, the others with `batch_cancelled`.

With `echo_key`, a batch's errors and its error file's lines quote the API key that created it.

Every line is answered as POST /v1/chat/completions would answer it (`parse`, `compose`,
`finish`: structured output, usage, the bad-JSON, truncation and ungrounded-quote knobs and the
`[[sim:...]]` hooks, the refusals of models, parameters and context), without the synchronous
endpoint's rate limits, latencies, drops, hangs or 5xx draws: batches have a quota of their own
(the enqueued tokens) and a fail rate of their own.

At the end, request_counts.completed is the output file's line count and request_counts.failed
the error file's, so each custom_id of a batch that got past validation is in exactly one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pipeline_dev.sim import faults
from pipeline_dev.sim.errors import (
    asked_failure,
    echo_into,
    error_body,
    error_response,
    presented_key,
    request_refusal,
)
from pipeline_dev.sim.files import FILES, FileStore, cursor_page, list_limit, no_such_file, refused_key
from pipeline_dev.sim.request import ChatRequest, Composed, RequestError, compose, finish, parse
from pipeline_dev.sim.state import SimState

log = logging.getLogger(__name__)

MAX_REQUESTS = 50_000
MAX_INPUT_BYTES = 200 * 1024 * 1024
ENDPOINTS = ("/v1/chat/completions",)  # what the simulator answers (OpenAI's list is longer)
COMPLETION_WINDOWS = ("24h",)
ORGANIZATION = "org-pipeline-sim"
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
MAX_REPORTED_ERRORS = 1000
CANCELLABLE = ("validating", "in_progress", "finalizing")
ENQUEUED = ("in_progress", "finalizing", "cancelling")
"""The statuses whose lines count in the enqueued tokens (a validating batch is not yet counted)."""
SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request was not executed because the batch was cancelled."


# --- validation (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One request of a valid input file."""

    number: int  # 1-based, in the input file
    custom_id: str
    chat: ChatRequest | None  # None: the body is no valid chat request (answered 400)
    problem: str | None  # why not, in OpenAI's words
    tokens: int  # prompt tokens + max_tokens: what the enqueued-token limit counts


@dataclass(frozen=True)
class Checked:
    """An input file read: its lines when valid, else the errors that fail the batch."""

    lines: list[Line]
    errors: list[dict[str, Any]]
    model: str | None
    tokens: int


def _error(code: str, message: str, line: int | None = None, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": line}


def check_input(content: bytes, endpoint: str) -> Checked:
    """Validate a batch input file as OpenAI does before it runs any line (CPU only)."""
    if len(content) > MAX_INPUT_BYTES:
        message = f"The input file is {len(content):,} bytes; a batch reads at most {MAX_INPUT_BYTES:,}."
        return Checked([], [_error("file_too_large", message)], None, 0)
    raw_lines = content.split(b"\n")
    while raw_lines and not raw_lines[-1].strip():
        raw_lines.pop()
    if not raw_lines:
        return Checked([], [_error("empty_file", "The input file is empty.")], None, 0)
    if len(raw_lines) > MAX_REQUESTS:
        message = f"The input file has {len(raw_lines):,} requests; a batch holds at most {MAX_REQUESTS:,}."
        return Checked([], [_error("too_many_tasks", message)], None, 0)
    errors: list[dict[str, Any]] = []
    lines: list[Line] = []
    seen: set[str] = set()
    model: str | None = None
    tokens = 0
    for number, raw in enumerate(raw_lines, 1):
        found = _check_line(number, raw, endpoint, seen, model)
        errors.extend(found.errors)
        model = model or found.model
        if found.line is not None:
            lines.append(found.line)
            tokens += found.line.tokens
    if errors:
        return Checked([], errors[:MAX_REPORTED_ERRORS], model, 0)
    return Checked(lines, [], model, tokens)


@dataclass(frozen=True)
class _LineCheck:
    line: Line | None
    errors: list[dict[str, Any]]
    model: str | None


def _check_line(number: int, raw: bytes, endpoint: str, seen: set[str], model: str | None) -> _LineCheck:
    """One input line: a Line, or what is wrong with it (`seen`: the custom_ids before it; `model`:
    theirs)."""
    errors: list[dict[str, Any]] = []

    def wrong(code: str, message: str, param: str | None = None) -> None:
        errors.append(_error(code, message, number, param))

    try:
        item = json.loads(raw)
    except ValueError:
        item = None
    if not isinstance(item, dict):
        wrong("invalid_json_line", "This line is not parseable as valid JSON.")
        return _LineCheck(None, errors, None)
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        wrong("missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
    elif custom_id in seen:
        message = f"The custom_id '{custom_id}' is used by more than one request; each must be unique."
        wrong("duplicate_custom_id", message, "custom_id")
    else:
        seen.add(custom_id)
    if item.get("method") != "POST":
        wrong("invalid_method", "The method of a batch request must be 'POST'.", "method")
    if item.get("url") != endpoint:
        url = item.get("url")
        wrong("url_mismatch", f"The url {url!r} does not match the batch's endpoint '{endpoint}'.", "url")
    body = item.get("body")
    line_model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(body, dict):
        wrong("invalid_request", "The body of a batch request must be a JSON object.", "body")
    elif not isinstance(line_model, str) or not line_model:
        wrong("missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model")
        line_model = None
    elif model is not None and line_model != model:
        message = f"The model '{line_model}' is not the batch's '{model}': a batch has one model."
        wrong("model_mismatch", message, "body.model")
    if errors or not isinstance(custom_id, str):
        return _LineCheck(None, errors, line_model)
    try:
        chat = parse(body)
    except RequestError as exc:  # answered 400 when its turn comes, as OpenAI does
        return _LineCheck(Line(number, custom_id, None, str(exc), 0), [], line_model)
    tokens = chat.prompt_tokens + (chat.max_tokens or 0)
    return _LineCheck(Line(number, custom_id, chat, None, tokens), [], line_model)


# --- the batch --------------------------------------------------------------------------------


def _now() -> int:
    return int(time.time())


def _answer_id() -> str:
    return f"batch_req_{secrets.token_hex(12)}"


def response_line(custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """A line of an output (200) or error file (other statuses): what the endpoint answered."""
    response = {"status_code": status, "request_id": secrets.token_hex(16), "body": body}
    return {"id": _answer_id(), "custom_id": custom_id, "response": response, "error": None}


def unrun_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """A line of an error file for a request never sent (batch_expired, batch_cancelled)."""
    return {
        "id": _answer_id(),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


@dataclass
class Batch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    created_at: int
    expires_at: int
    deadline: float  # event-loop time at which the batch expires
    api_key: str = ""  # the key that created it
    status: str = "validating"
    model: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    times: dict[str, int] = field(default_factory=dict)  # in_progress_at, completed_at, ...
    total: int = 0
    completed: int = 0  # lines answered 200 (output file)
    failed: int = 0  # lines answered with an error, expired or cancelled (error file)
    enqueued: int = 0  # tokens, counted while the status is in ENQUEUED
    outputs: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    cached_tokens: int = 0  # of the input tokens, served from the prompt cache
    output_tokens: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)

    def to_object(self) -> dict[str, Any]:
        """The Batch object, as OpenAI answers it."""
        stamp = self.times.get
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": stamp("in_progress_at"),
            "expires_at": self.expires_at,
            "finalizing_at": stamp("finalizing_at"),
            "completed_at": stamp("completed_at"),
            "failed_at": stamp("failed_at"),
            "expired_at": stamp("expired_at"),
            "cancelling_at": stamp("cancelling_at"),
            "cancelled_at": stamp("cancelled_at"),
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "usage": {
                "input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": self.cached_tokens},
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + self.output_tokens,
            },
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class Answer:
    """One line answered, not yet counted: it counts when its time in the duration comes."""

    line: dict[str, Any]
    ok: bool
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    quotes: int = 0
    invented: tuple[str, ...] = ()
    model: str = ""


class BatchService:
    """Every batch, in creation order, and the tasks that move them along."""

    def __init__(self, state: SimState, files: FileStore) -> None:
        self.state = state
        self.files = files
        self.batches: dict[str, Batch] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        seed = state.config.seed
        # Its own RNG: batches leave the synchronous endpoint's seeded sequence as it was.
        self.rng = random.Random(f"pipeline-sim-batches-{seed}") if seed is not None else random.Random()

    def create(
        self,
        input_file_id: str,
        content: bytes,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str] | None,
        api_key: str = "",
    ) -> Batch:
        loop = asyncio.get_running_loop()
        window = self.state.config.batch_expire_after_s
        now = time.time()
        batch = Batch(
            id=f"batch_{secrets.token_hex(12)}",
            input_file_id=input_file_id,
            endpoint=endpoint,
            completion_window=completion_window,
            metadata=metadata,
            created_at=int(now),
            expires_at=int(now + window),
            deadline=loop.time() + window,
            api_key=api_key,
        )
        self.batches[batch.id] = batch
        self.state.batch_counters.batches_created += 1
        task = loop.create_task(self._run(batch, content), name=f"pipeline-sim-{batch.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return batch

    def request_cancel(self, batch: Batch) -> None:
        if batch.status in CANCELLABLE:
            self._move(batch, "cancelling")
            batch.cancel.set()

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    # --- the state machine --------------------------------------------------------------------

    def _echoed(self, batch: Batch, error: dict[str, Any]) -> dict[str, Any]:
        return echo_into(error, batch.api_key) if self.state.config.echo_key else error

    def _move(self, batch: Batch, status: str) -> None:
        if status == "failed":
            batch.errors = [self._echoed(batch, error) for error in batch.errors]
        batch.status = status
        batch.times[f"{status}_at"] = _now()
        counters = self.state.batch_counters
        if status in ("completed", "failed", "expired", "cancelled"):
            name = f"batches_{status}"
            setattr(counters, name, getattr(counters, name) + 1)
        self.state.enqueued_tokens = sum(b.enqueued for b in self.batches.values() if b.status in ENQUEUED)

    async def _run(self, batch: Batch, content: bytes) -> None:
        try:
            await self._lifecycle(batch, content)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a simulator bug fails the batch, as a provider's would
            log.exception("pipeline-sim batch %s failed", batch.id)
            batch.errors = [_error("server_error", f"pipeline-sim internal error: {exc!r}")]
            self._move(batch, "failed")

    async def _lifecycle(self, batch: Batch, content: bytes) -> None:
        loop = asyncio.get_running_loop()
        config = self.state.config
        started = loop.time()
        checked = await loop.run_in_executor(None, check_input, content, batch.endpoint)
        batch.model = checked.model
        await self._wait(batch, started + config.batch_validate_s)
        if batch.cancel.is_set():
            await self._close(batch, [], "cancelled")
            return
        if checked.errors:
            batch.errors = checked.errors
            self._move(batch, "failed")
            return
        limit = config.batch_enqueued_tokens
        held = sum(
            b.enqueued for b in self.batches.values() if b.status in ENQUEUED and b.model == checked.model
        )
        if limit and held + checked.tokens > limit:
            message = (
                f"Enqueued token limit reached for {checked.model} in organization {ORGANIZATION}. "
                f"Limit: {limit:,} enqueued tokens. Please try submitting your requests again later."
            )
            batch.errors = [_error("token_limit_exceeded", message)]
            self._move(batch, "failed")
            return
        batch.total = len(checked.lines)
        batch.enqueued = checked.tokens
        if loop.time() >= batch.deadline:
            await self._close(batch, checked.lines, "expired")
            return
        self._move(batch, "in_progress")
        order = list(checked.lines)
        self.rng.shuffle(order)  # providers do not answer in the input's order
        remaining = await self._progress(batch, order)
        if batch.cancel.is_set():
            await self._close(batch, remaining, "cancelled")
        elif remaining:
            await self._close(batch, remaining, "expired")
        else:
            self._move(batch, "finalizing")
            await self._wait(batch, loop.time() + config.batch_validate_s, expires=False)
            await self._close(batch, [], "cancelled" if batch.cancel.is_set() else "completed")

    async def _progress(self, batch: Batch, order: list[Line]) -> list[Line]:
        """Answer the lines in `order`, the k-th due at k/n of the duration; returns those not
        answered when the batch was cancelled or expired."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        duration = self.state.config.batch_duration_s
        for done, line in enumerate(order):
            due = start + duration * (done + 1) / len(order)
            answer = await self._answer(batch, line)
            await self._wait(batch, due)
            if batch.cancel.is_set() or max(due, loop.time()) >= batch.deadline:
                return order[done:]
            self._count(batch, answer)
        return []

    async def _wait(self, batch: Batch, until: float, expires: bool = True) -> None:
        """Until `until` (or the deadline, when `expires`), or a cancel; yields at least once."""
        loop = asyncio.get_running_loop()
        timeout = (min(until, batch.deadline) if expires else until) - loop.time()
        if timeout <= 0 or batch.cancel.is_set():
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(batch.cancel.wait(), timeout)

    async def _close(self, batch: Batch, unrun: list[Line], status: str) -> None:
        """Write the output and error files and end in `status` (after `cancelling` lasts
        batch_validate_s, for a cancel); `unrun` go to the error file with batch_<status>."""
        counters = self.state.batch_counters
        if status == "cancelled":
            await asyncio.sleep(self.state.config.batch_validate_s)
            batch.failures.extend(
                unrun_line(line.custom_id, "batch_cancelled", CANCELLED_MESSAGE) for line in unrun
            )
            counters.batch_lines_cancelled += len(unrun)
        elif status == "expired":
            batch.failures.extend(
                unrun_line(line.custom_id, "batch_expired", EXPIRED_MESSAGE) for line in unrun
            )
            counters.batch_lines_expired += len(unrun)
        batch.failed += len(unrun)
        batch.failures = [self._echoed_line(batch, line) for line in batch.failures]
        loop = asyncio.get_running_loop()
        if batch.outputs:
            content = await loop.run_in_executor(None, _jsonl, batch.outputs)
            batch.output_file_id = self.files.add(f"{batch.id}_output.jsonl", "batch_output", content).id
        if batch.failures:
            content = await loop.run_in_executor(None, _jsonl, batch.failures)
            batch.error_file_id = self.files.add(f"{batch.id}_error.jsonl", "batch_output", content).id
        batch.outputs, batch.failures = [], []
        self._move(batch, status)

    # --- one line -----------------------------------------------------------------------------

    def _echoed_line(self, batch: Batch, line: dict[str, Any]) -> dict[str, Any]:
        """An error file's line quoting the batch's key (`echo_key`): its answer's error body, or
        the error of a request never sent."""
        response = line.get("response")
        if isinstance(response, dict) and isinstance(response.get("body"), dict):
            line = {**line, "response": {**response, "body": self._echoed(batch, response["body"])}}
        if isinstance(line.get("error"), dict):
            line = {**line, "error": self._echoed(batch, line["error"])}
        return line

    async def _answer(self, batch: Batch, line: Line) -> Answer:
        """What POST /v1/chat/completions would answer the line (composed on a worker thread)."""
        config = self.state.config
        failing = self.rng.random() < config.batch_fail_rate  # drawn for every line: a seeded
        draw = faults.draw(self.rng, config)  # run draws the same sequence whatever the lines hold
        chat = line.chat
        if chat is None:
            return self._failed(
                line, 400, error_body(line.problem or "Invalid request.", "invalid_request_error")
            )
        refusal = request_refusal(chat, config) or asked_failure(chat, batch.api_key, config)
        if refusal is not None:
            return self._failed(line, refusal.status, refusal.body)
        if chat.shape in config.rejected_shapes:
            message = f"response_format of this shape ({chat.shape}) is not supported by this server"
            return self._failed(line, config.rejected_status, error_body(message, "invalid_request_error"))
        if failing or "error" in chat.hooks:
            return self._failed(line, 500, error_body(SERVER_ERROR, "server_error"))
        loop = asyncio.get_running_loop()
        cached = self.state.serve_prompt(chat, time.monotonic())
        ungrounded, misread, made_up = config.adversarial(chat.model)
        composed: Composed = await loop.run_in_executor(
            None, compose, chat, ungrounded, config.seed, misread, made_up
        )
        self.state.next_id += 1
        body = finish(chat, composed, draw, self.state.next_id, cached)
        intact = not body.bad_json and not body.truncated  # the quotes reach the client intact
        return Answer(
            line=response_line(line.custom_id, 200, body.payload),
            ok=True,
            prompt_tokens=chat.prompt_tokens,
            cached_tokens=cached,
            completion_tokens=body.completion_tokens,
            model=chat.model,
            quotes=composed.quotes if intact else 0,
            invented=composed.invented if intact else (),
        )

    @staticmethod
    def _failed(line: Line, status: int, body: dict[str, Any]) -> Answer:
        return Answer(line=response_line(line.custom_id, status, body), ok=False)

    def _count(self, batch: Batch, answer: Answer) -> None:
        counters = self.state.batch_counters
        if not answer.ok:
            batch.failures.append(answer.line)
            batch.failed += 1
            counters.batch_lines_failed += 1
            return
        batch.outputs.append(answer.line)
        batch.completed += 1
        batch.input_tokens += answer.prompt_tokens
        batch.cached_tokens += answer.cached_tokens
        batch.output_tokens += answer.completion_tokens
        counters.batch_lines_answered += 1
        counters.batch_prompt_tokens += answer.prompt_tokens
        counters.batch_cached_tokens += answer.cached_tokens
        self.state.bill.add(
            answer.model, "batch", answer.prompt_tokens, answer.cached_tokens, answer.completion_tokens
        )
        counters.batch_completion_tokens += answer.completion_tokens
        counters.batch_quotes += answer.quotes
        counters.batch_ungrounded_quotes += len(answer.invented)
        self.state.invented_quotes.extend(answer.invented)


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()


BATCHES = web.AppKey("batches", BatchService)


# --- the endpoints ----------------------------------------------------------------------------


def _invalid(message: str, param: str | None = None, status: int = 400) -> web.Response:
    return error_response(status, message, "invalid_request_error", param=param)


def _metadata(value: Any) -> dict[str, str] | web.Response | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_METADATA_KEYS:
        return _invalid(f"Invalid 'metadata': an object of at most {MAX_METADATA_KEYS} pairs.", "metadata")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY or not isinstance(item, str) or len(item) > MAX_METADATA_VALUE:
            message = (
                f"Invalid 'metadata': keys of at most {MAX_METADATA_KEY} characters, "
                f"string values of at most {MAX_METADATA_VALUE}."
            )
            return _invalid(message, "metadata")
    return dict(value)


async def create_batch(request: web.Request) -> web.Response:
    """POST /v1/batches {input_file_id, endpoint, completion_window, metadata}."""
    if (refused := refused_key(request)) is not None:
        return refused
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError) as exc:
        return _invalid(f"We could not parse the JSON body of your request: {exc}")
    if not isinstance(body, dict):
        return _invalid("The request body must be a JSON object.")
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(name), str):
            return _invalid(f"Missing required parameter: '{name}'.", name)
    if body["endpoint"] not in ENDPOINTS:
        message = f"Invalid 'endpoint': {body['endpoint']!r}. pipeline-sim batches {', '.join(ENDPOINTS)}."
        return _invalid(message, "endpoint")
    if body["completion_window"] not in COMPLETION_WINDOWS:
        message = f"Invalid 'completion_window': {body['completion_window']!r}. Supported values are: '24h'."
        return _invalid(message, "completion_window")
    metadata = _metadata(body.get("metadata"))
    if isinstance(metadata, web.Response):
        return metadata
    stored = request.app[FILES].get(body["input_file_id"])
    if stored is None:
        return no_such_file(body["input_file_id"])
    if stored.purpose != "batch":
        message = f"The input file must have been uploaded with purpose 'batch', not '{stored.purpose}'."
        return _invalid(message, "input_file_id")
    key = presented_key(request.headers.get("Authorization", ""))
    batch = request.app[BATCHES].create(
        stored.id, stored.content, body["endpoint"], body["completion_window"], metadata, key
    )
    return web.json_response(batch.to_object())


def _batch(request: web.Request) -> Batch | web.Response:
    batch_id = request.match_info["batch_id"]
    batch = request.app[BATCHES].batches.get(batch_id)
    if batch is None:
        return _invalid(f"No batch found with id '{batch_id}'.", "batch_id", status=404)
    return batch


async def retrieve_batch(request: web.Request) -> web.Response:
    """GET /v1/batches/{batch_id}."""
    if (refused := refused_key(request)) is not None:
        return refused
    batch = _batch(request)
    return batch if isinstance(batch, web.Response) else web.json_response(batch.to_object())


async def list_batches(request: web.Request) -> web.Response:
    """GET /v1/batches (limit 1..100, default 20; after): newest first."""
    if (refused := refused_key(request)) is not None:
        return refused
    limit = list_limit(request, 20, 100)
    if isinstance(limit, web.Response):
        return limit
    batches = [b.to_object() for b in reversed(request.app[BATCHES].batches.values())]
    return web.json_response(cursor_page(batches, request.query.get("after"), limit))


async def cancel_batch(request: web.Request) -> web.Response:
    """POST /v1/batches/{batch_id}/cancel: cancelling now, cancelled once it has stopped."""
    if (refused := refused_key(request)) is not None:
        return refused
    batch = _batch(request)
    if isinstance(batch, web.Response):
        return batch
    if batch.status not in (*CANCELLABLE, "cancelling"):
        return _invalid(f"Cannot cancel a batch with status '{batch.status}'.", status=409)
    request.app[BATCHES].request_cancel(batch)
    return web.json_response(batch.to_object())


def setup(app: web.Application, state: SimState, files: FileStore) -> None:
    """The Batch API's routes on `app`; its batches stop with the app."""
    service = BatchService(state, files)
    app[BATCHES] = service
    app.router.add_post("/v1/batches", create_batch)
    app.router.add_get("/v1/batches", list_batches)
    app.router.add_get("/v1/batches/{batch_id}", retrieve_batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", cancel_batch)

    async def stop(_: web.Application) -> None:
        await service.stop()

    app.on_shutdown.append(stop)
