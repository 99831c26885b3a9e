"""The one error hierarchy of the pipeline.

    PipelineError
    ├── ConfigError                 settings that cannot work (raised at start-up)
    ├── InputError                  a file or path the user gave cannot be used
    ├── RetryableError              try the same thing again later
    │   ├── RateLimited             the provider said 429 (retry_after_s when it told us)
    │   ├── UpstreamUnavailable     5xx, dropped connection, timeout
    │   ├── MalformedAnswer         not even JSON, twice: a garbled answer, asked again later
    │   ├── Deferred                our own limiter (or an open circuit) asks to come back later
    │   └── UnknownToDatabase       a message names a document or run this worker's database lacks
    ├── DeletedFromDatabase         a message names a document its database issued and deleted since
    ├── LeaseLost                   another worker took the document over: stop, write nothing
    │   └── RunCancelled            the run was cancelled (`pipeline cancel`): no more calls for it
    └── PermanentError              trying again will not help
        ├── SchemaViolation         the answer did not validate, even after one repair
        ├── ProviderRejected        4xx other than 429 (bad request, auth, content policy)
        │   ├── FormatRejected      the endpoint rejects the request's shape (response_format)
        │   └── BatchRefused        the Batch API refused a file or batch (not a chunk's fault)
        ├── RequestTooLarge         one call needs more tokens than the quota allows per window
        ├── TextUnavailable         the document's stored text is gone or empty: never extracted as such
        └── OutageOutlasted         the endpoint's circuit stayed open past the outage tolerance

Tasks decide by class: retry a RetryableError with backoff, record a PermanentError
as the document's failure reason. A message never holds a secret: it is redacted as the error is
made (`pipeline.core.redaction`), whatever a provider's answer quoted.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pipeline.core.redaction import redact


class PipelineError(Exception):
    """Base of every error the pipeline raises on purpose."""

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class ConfigError(PipelineError):
    """The configuration cannot work; the message says which setting and why."""


class InputError(PipelineError):
    """A path given by the user cannot be used; the message names it and the reason."""


class RetryableError(PipelineError):
    """A transient failure: the same call may succeed later."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RateLimited(RetryableError):
    """The provider refused the call for rate (HTTP 429). `quota_spent`: its headers said no
    requests or no tokens remain in its window (otherwise a burst within the window was refused)."""

    def __init__(self, message: str, retry_after_s: float | None = None, *, quota_spent: bool = True) -> None:
        super().__init__(message, retry_after_s)
        self.quota_spent = quota_spent


class UpstreamUnavailable(RetryableError):
    """The provider failed (5xx), dropped the connection or timed out."""


class CapacityUnavailable(RetryableError):
    """Flex processing had no capacity for the call (HTTP 429 "Resource Unavailable", code
    `resource_unavailable`): not charged, not a rate limit (no shared pause, no cut) and not an
    outage (the circuit is not told): the call backs off and is asked again."""


class LeaseLost(PipelineError):
    """This worker's lease on the document ran out and another took it over (its fencing token
    moved on), or the document is already final: whatever this holder would write is refused.
    Neither a failure nor a retry: the task ends and the new holder carries on."""


class RunCancelled(LeaseLost):
    """The run was cancelled (`pipeline cancel`): its work stops before its next call, and its
    document ends `cancelled` (the message is the cancel's reason). Neither a failure nor a retry."""


class PermanentError(PipelineError):
    """A failure that repeating will not fix."""


class SchemaViolation(PermanentError):
    """The model's answer did not validate against the schema, even after a repair."""


class ProviderRejected(PermanentError):
    """The provider rejected the request itself (4xx other than 429)."""


class FormatRejected(ProviderRejected):
    """The endpoint rejects the request's `response_format` (a 400 or 422, or a 5xx whose body
    names it, as llama-cpp-python answers `json_schema`): never retried as an outage."""


class BatchRefused(ProviderRejected):
    """The provider's Batch API refused an upload or a batch (4xx other than 429): its chunks
    go in another batch, or synchronously."""


class BudgetSpent(PermanentError):
    """The run has spent its budget (PIPELINE_RUN_BUDGET_USD): no more LLM calls for it."""


class RequestTooLarge(PermanentError):
    """One call needs more tokens than the TPM quota allows in a whole window."""


class TextUnavailable(PermanentError, LookupError):
    """The document's stored text is gone (NULL: `pipeline prune` dropped it) or empty (a
    migration's downgrade kept '' in its place): it is not extracted as if it said nothing."""


class OutageOutlasted(PermanentError):
    """The endpoint's circuit breaker has been open (every call refused or failing) for longer
    than PIPELINE_OUTAGE_TOLERANCE_S, or past the run's deadline: the documents still waiting
    fail, with the endpoint and the setting named."""


class Deferred(RetryableError):
    """The document goes back to the queue on purpose: the global limiter has no room for
    longer than a worker should wait in place, the endpoint's circuit is open for longer than
    that (its next probe is the countdown), or the task used up its time budget.

    The task goes back to the queue with `retry_after_s` as countdown; this is not a
    failed attempt and does not count towards the document's retries.
    """


class MalformedAnswer(RetryableError):
    """The answer was not JSON at all, even after the repair: a garbled answer rather than a
    model that misreads the schema, so the document is tried again (a bounded number of times)."""


class UnknownToDatabase(RetryableError):
    """A message names a document or run that this worker's database does not hold: the worker
    most likely talks to another database than the producer did (PIPELINE_DATABASE_URL unset,
    or pointing elsewhere). Never acknowledged as done: the message goes back to the queue,
    where a worker with the right database can take it."""

    def __init__(self, what: str, database_url: str) -> None:
        self.what = what
        self.database = database_label(database_url)
        super().__init__(
            f"{what} is not in the database {self.database} that this worker uses: "
            "is PIPELINE_DATABASE_URL the one the producer used?"
        )


class DeletedFromDatabase(PipelineError):
    """A message names a document that this worker's database issued and has deleted since
    (`pipeline prune --all`, or its run deleted): the database is the producer's, and the
    message ends, acknowledged, said once (no retry will find the document)."""

    def __init__(self, what: str, database_url: str) -> None:
        self.what = what
        self.database = database_label(database_url)
        super().__init__(
            f"{what} was deleted from the database {self.database} (`pipeline prune --all`, or its "
            "run deleted): nothing to do, the message ends here"
        )


def database_label(url: str) -> str:
    """A database URL as host:port/name (a SQLite file as its path), without user or password."""
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        return f"sqlite file {parts.path.removeprefix('/') or ':memory:'}"
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}/{parts.path.removeprefix('/')}"
