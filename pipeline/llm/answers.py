"""Structured answers: the mode negotiated, the answer read and validated, repaired once, and
the rest of an answer cut off at max_tokens asked for.

`StructuredAnswers` makes its calls through the client's `complete` (limiter, circuit and
retries included); every answer's record goes to the request's sink as `ok` (with what was
mended) or `invalid` (with why).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from pydantic import BaseModel, ValidationError

from pipeline.core import errors
from pipeline.llm import lenient, prompts
from pipeline.llm.request import MAX_ERROR_CHARS, CallRecord, CallSink, Completion, LLMRequest
from pipeline.llm.structured import ModeStore, rejection_message

log = logging.getLogger(__name__)

Complete = Callable[[LLMRequest], Completion]


class StructuredAnswers:
    def __init__(self, complete: Complete, modes: ModeStore, endpoint: str) -> None:
        self._complete = complete
        self._modes = modes
        self._endpoint = endpoint

    def in_current_mode(self, request: LLMRequest) -> LLMRequest:
        """`request` asking for its schema in the structured-output mode the endpoint takes now
        (as a synchronous call would ask; a Batch API line's request)."""
        return self._in_mode(request, self._modes.current(self._endpoint, request.model))

    def ask(self, request: LLMRequest) -> BaseModel:
        """The answer to `request` (its messages as the caller wrote them, no format yet),
        validated, repaired once.

        Raises SchemaViolation when the repaired answer does not validate either."""
        done, asked = self._first_answer(request)
        return self.finish(done, asked)

    def finish(self, done: Completion, asked: LLMRequest) -> BaseModel:
        """The answer `done` to `asked`, validated; repaired once, and the rest of a cut-off
        answer asked for, with calls made now (also for a Batch API line's answer)."""
        schema = _schema(asked)
        reading, problem = read(done, schema, asked.sink)
        if reading.value is not None:
            return self._with_rest(reading.value, done, asked)
        repair = asked.asking(prompts.repair_messages(asked.messages, done.content, problem), "repair")
        done = self._complete(repair)
        reading, problem = read(done, schema, asked.sink, max_dropped=None)
        if reading.value is None:
            assert reading.error is not None
            # Garbled (not cut off at max_tokens, which would recur): worth asking again later.
            if done.finish_reason != "length" and all(
                e["type"] == "json_invalid" for e in reading.error.errors()
            ):
                raise errors.MalformedAnswer(f"answer was not JSON, even after repair: {problem}") from None
            raise errors.SchemaViolation(f"answer did not validate after repair: {problem}") from None
        return self._with_rest(reading.value, done, repair)

    def _first_answer(self, request: LLMRequest) -> tuple[Completion, LLMRequest]:
        """The first answer and the request that got it: with `auto`, each mode the endpoint
        rejects is stepped down from (under the probe, so that a call waiting its turn asks in
        the new mode)."""
        model = request.model
        while True:
            with self._modes.probing(self._endpoint, model):
                mode = self._modes.current(self._endpoint, model)
                asked = self._in_mode(request, mode)
                try:
                    done = self._complete(asked)
                except errors.FormatRejected as exc:
                    lower = self._modes.step_down(self._endpoint, model, mode) if self._modes.auto else None
                    if lower is None:
                        raise errors.FormatRejected(
                            rejection_message(self._modes.configured, mode, str(exc))
                        ) from None
                    log.warning(
                        "%s rejects structured output as %s: asking as %s from now on", model, mode, lower
                    )
                    continue
                self._modes.confirm(self._endpoint, model)
                return done, asked

    def _with_rest(self, kept: BaseModel, done: Completion, asked: LLMRequest) -> BaseModel:
        """`kept`, and when its answer was cut off at max_tokens, the items the cut left out:
        one more call asks for them. The kept items stand whatever that call answers."""
        if done.finish_reason != "length":
            return kept
        rest_request = asked.asking(
            prompts.rest_messages(asked.messages, done.content, kept.model_dump(mode="json")), "rest"
        )
        try:
            rest = self._complete(rest_request)
        except errors.PipelineError as exc:
            log.warning("asking for the rest of a cut-off answer failed, the kept items stand: %s", exc)
            return kept
        reading, _ = read(rest, _schema(asked), asked.sink)
        return kept if reading.value is None else lenient.combine(kept, reading.value)

    @staticmethod
    def _in_mode(request: LLMRequest, mode: str) -> LLMRequest:
        """`request` (its messages as the caller wrote them) asking for its schema in `mode`."""
        messages, response_format = prompts.structured_request(request.messages, _schema(request), mode)
        return replace(request, messages=messages, response_format=response_format)


def read(
    done: Completion, schema: type[BaseModel], sink: CallSink, max_dropped: int | None = lenient.MAX_DROPPED
) -> tuple[lenient.Reading[BaseModel], str]:
    """The answer read as models write it, and its call recorded: `ok` with what was mended, or
    `invalid` with why (the second value, "" when it validated)."""
    reading = lenient.read(done.content, schema, done.finish_reason, max_dropped)
    if reading.value is not None:
        sink(_with_notes(done.record, reading.notes))
        return reading, ""
    assert reading.error is not None
    problem = _describe(reading.error, done.finish_reason)
    sink(replace(done.record, status="invalid", error=problem))
    return reading, problem


def _schema(request: LLMRequest) -> type[BaseModel]:
    assert request.schema is not None, "a structured answer needs the request's schema"
    return request.schema


def _with_notes(record: CallRecord, notes: list[str]) -> CallRecord:
    """An answer that validated once mended: its record says what was mended (status ok)."""
    if not notes:
        return record
    return replace(record, error=f"mended: {'; '.join(notes)}"[:MAX_ERROR_CHARS])


def _describe(exc: ValidationError, finish_reason: str) -> str:
    lines = [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:8]]
    if finish_reason == "length":
        lines.insert(0, "the answer was cut off at max_tokens")
    return "; ".join(lines)[:MAX_ERROR_CHARS]
