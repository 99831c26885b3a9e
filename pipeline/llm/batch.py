"""The provider's Batch API (`/v1/files` + `/v1/batches`): request lines, input files within the
provider's limits, and the batch objects' life cycle, through the `openai` SDK.

Nothing here touches the database: `pipeline.runs.batching` decides what goes in a batch and
records every step before the next one depends on it.

OpenAI's Batch API reference: one JSON request per line (`custom_id`, `method`, `url`, `body`),
at most 50,000 requests and 200 MB per input file, a 24 h completion window; output and error
files hold one line per request, in no particular order.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any, Final

import httpx
import openai

from pipeline.core import errors

ENDPOINT: Final = "/v1/chat/completions"
COMPLETION_WINDOW: Final = "24h"
SPOOL_BYTES = 8 * 1024 * 1024
"""An input file is held in memory up to this, then on disk (a file may be 200 MB)."""
ENDED_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})


def custom_id(chunk_id: int, prompt_version: str, model: str) -> str:
    """A request's name in its batch: the chunk, the prompt's version and the model."""
    return f"{chunk_id}|{prompt_version}|{model}"


def parse_custom_id(text: str) -> tuple[int, str, str] | None:
    """(chunk id, prompt version, model) of a `custom_id`, or None when it is not one of ours."""
    head, sep, rest = text.partition("|")
    version, sep2, model = rest.rpartition("|")
    if not sep or not sep2 or not head.isdigit():
        return None
    return int(head), version, model


@dataclass(frozen=True)
class Request:
    """One line of an input file."""

    chunk_id: int
    custom_id: str
    body: dict[str, Any]
    tokens: int
    """Prompt estimate + max_tokens: what the line counts against the enqueued-token limit."""

    def line(self) -> bytes:
        payload = {"custom_id": self.custom_id, "method": "POST", "url": ENDPOINT, "body": self.body}
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


@dataclass(frozen=True)
class FileLimits:
    max_requests: int
    max_bytes: int
    max_tokens: int
    """Enqueued tokens this file may hold (0: no limit)."""


@dataclass
class InputFile:
    """Requests written as JSONL into a spooled temporary file, ready to upload."""

    handle: IO[bytes]
    chunk_ids: list[int]
    tokens: int
    size: int

    def close(self) -> None:
        self.handle.close()


def pack(requests: Iterable[Request], limits: FileLimits) -> tuple[InputFile, Request | None]:
    """The first input file the requests fill within `limits` (the iterable is read only as far
    as needed), and the request that did not fit (None: the requests ran out). A request that
    fits no file on its own comes back with an empty file."""
    handle: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - InputFile closes it
    packed = InputFile(handle, [], 0, 0)
    for request in requests:
        line = request.line()
        full = (
            len(packed.chunk_ids) >= limits.max_requests
            or packed.size + len(line) > limits.max_bytes
            or (limits.max_tokens > 0 and packed.tokens + request.tokens > limits.max_tokens)
        )
        if full:
            handle.seek(0)
            return packed, request
        handle.write(line)
        packed.chunk_ids.append(request.chunk_id)
        packed.tokens += request.tokens
        packed.size += len(line)
    handle.seek(0)
    return packed, None


@dataclass(frozen=True)
class BatchState:
    """What the provider says of a batch."""

    id: str
    status: str
    total: int
    completed: int
    failed: int
    output_file_id: str | None
    error_file_id: str | None
    errors: str | None
    """The batch's own errors (validation, enqueued-token limit), joined; None when it has none."""
    token_limit: bool
    """It failed on the enqueued-token limit: send it again once earlier batches are done."""

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES


@dataclass(frozen=True)
class OutputLine:
    """One line of an output or error file."""

    custom_id: str
    status_code: int
    body: dict[str, Any] | None
    error: str | None

    @property
    def answered(self) -> bool:
        return self.status_code == 200 and self.body is not None and bool(self.body.get("choices"))


class BatchAPI:
    """Files and batches of one endpoint, through one SDK client (SDK retries off: the tick
    that calls these is repeated anyway)."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float) -> None:
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def upload(self, packed: InputFile, filename: str) -> str:
        with _mapped(f"uploading {filename}"):
            found = self._client.files.create(
                file=(filename, packed.handle, "application/jsonl"), purpose="batch"
            )
        return found.id

    def find_upload(self, filename: str) -> str | None:
        """The id of an input file uploaded under `filename` before (a crash after the upload)."""
        with _mapped("listing files"):
            for item in self._client.files.list(purpose="batch"):
                if item.filename == filename:
                    return item.id
        return None

    def create(self, input_file_id: str, metadata: dict[str, str]) -> BatchState:
        with _mapped(f"creating a batch of {input_file_id}"):
            batch = self._client.batches.create(
                input_file_id=input_file_id,
                endpoint=ENDPOINT,
                completion_window=COMPLETION_WINDOW,
                metadata=metadata,
            )
        return _state(batch)

    def find_batch(self, input_file_id: str) -> BatchState | None:
        """The batch created from `input_file_id` before (a crash before its id was stored)."""
        with _mapped("listing batches"):
            for batch in self._client.batches.list(limit=100):
                if batch.input_file_id == input_file_id:
                    return _state(batch)
        return None

    def holds(self, batch_id: str | None, file_id: str | None) -> bool:
        """Whether this endpoint (and key) holds the batch `batch_id`, or, without one, the input
        file `file_id`: a batch's id means something only at the endpoint that issued it. Raises
        as the other calls do when the endpoint cannot tell (down, refusing the key)."""
        with _mapped(f"reading batch {batch_id}" if batch_id else f"reading file {file_id}"):
            try:
                if batch_id:
                    self._client.batches.retrieve(batch_id)
                elif file_id:
                    self._client.files.retrieve(file_id)
            except openai.NotFoundError:
                return False
        return True

    def retrieve(self, batch_id: str) -> BatchState:
        with _mapped(f"reading batch {batch_id}"):
            return _state(self._client.batches.retrieve(batch_id))

    def cancel(self, batch_id: str) -> BatchState:
        with _mapped(f"cancelling batch {batch_id}"):
            return _state(self._client.batches.cancel(batch_id))

    def delete_file(self, file_id: str) -> None:
        """Delete an uploaded or output file; one already gone counts as deleted."""
        with _mapped(f"deleting file {file_id}"):
            with suppress(openai.NotFoundError):
                self._client.files.delete(file_id)

    def lines(self, file_id: str) -> Iterator[OutputLine]:
        """The lines of an output or error file, streamed (not held in memory)."""
        with (
            _mapped(f"reading file {file_id}"),
            self._client.files.with_streaming_response.content(file_id) as response,
        ):
            for raw in response.iter_lines():
                if raw.strip():
                    yield _output_line(raw)


@contextmanager
def _mapped(doing: str) -> Iterator[None]:
    """The SDK's errors as the pipeline's: transient ones are retried by the next tick."""
    try:
        yield
    except openai.APIStatusError as exc:
        message = f"{doing}: HTTP {exc.status_code}: {_message(exc)}"
        if exc.status_code == 429 or exc.status_code >= 500:
            raise errors.UpstreamUnavailable(message) from None
        raise errors.BatchRefused(message) from None
    except (openai.APIConnectionError, httpx.HTTPError) as exc:
        raise errors.UpstreamUnavailable(f"{doing}: {type(exc).__name__}: {exc}") from None


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        found = body.get("message") or (body.get("error") or {}).get("message")
        if found:
            return str(found)[:300]
    return str(exc)[:300]


def _state(batch: Any) -> BatchState:
    counts = batch.request_counts
    problems = list(batch.errors.data or []) if batch.errors else []
    text = "; ".join(
        f"{p.code or 'error'}{f' (line {p.line})' if p.line else ''}: {p.message or ''}" for p in problems
    )
    return BatchState(
        id=batch.id,
        status=batch.status,
        total=counts.total if counts else 0,
        completed=counts.completed if counts else 0,
        failed=counts.failed if counts else 0,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        errors=text or None,
        token_limit=any(p.code == "token_limit_exceeded" for p in problems),
    )


def _output_line(raw: str) -> OutputLine:
    try:
        item = json.loads(raw)
    except ValueError:
        return OutputLine("", 0, None, f"not JSON: {raw[:100]!r}")
    if not isinstance(item, dict):
        return OutputLine("", 0, None, f"not an object: {raw[:100]!r}")
    response = item.get("response") or {}
    error = item.get("error")
    body = response.get("body") if isinstance(response, dict) else None
    status = int(response.get("status_code") or 0) if isinstance(response, dict) else 0
    reason = None
    if isinstance(error, dict):
        reason = f"{error.get('code') or 'error'}: {error.get('message') or ''}"
    elif error:
        reason = str(error)[:300]
    elif status != 200:
        detail = (body or {}).get("error", {}) if isinstance(body, dict) else {}
        reason = f"HTTP {status}: {detail.get('message') if isinstance(detail, dict) else detail}"
    return OutputLine(
        str(item.get("custom_id") or ""), status, body if isinstance(body, dict) else None, reason
    )
