"""`pipeline doctor`: what the configured endpoint takes, found by asking it a few small things.

The diagnosis goes in order and stops at the first failure, whose sentence names the fix:
reachability (can we connect at all), authentication (is the API key accepted), models (does
it list the models the settings call), structured-output modes (does one work), then the
rate-limit headers (a warning when absent) and the Batch API (information). A wrong key is
said once, as the key, not as four refused modes.

Calls go straight to the endpoint (not through the limiter): a handful of one-line requests.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
from pydantic import BaseModel, ValidationError

from pipeline.core import exits
from pipeline.core.redaction import redact
from pipeline.core.settings import Settings
from pipeline.llm import prompts
from pipeline.llm.ratelimit.policy import ProviderLimits, provider_limits

CONTEXT_FIELDS = ("context_window", "context_length", "max_model_len", "max_context_length")
"""Where servers state a model's context window in /v1/models (vLLM: max_model_len)."""
LISTED_SHOWN = 20
"""How many of the models an endpoint lists a failure names (OpenAI lists a hundred)."""
AUTH_STATUSES = (401, 403)


class Probe(BaseModel):
    """The answer each structured-output probe asks for."""

    ok: bool


@dataclass(frozen=True)
class ModeResult:
    mode: str
    works: bool
    detail: str
    latency_s: float | None = None


@dataclass(frozen=True)
class Verdict:
    """Where the diagnosis ended: the step that failed ("ok" when none did), in one sentence."""

    step: str
    message: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == exits.OK


class _Stop(Exception):
    """The first failure: the diagnosis goes no further."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


@dataclass
class Diagnosis:
    endpoint: str
    model: str
    passed: list[str] = field(default_factory=list)
    """The steps that passed, in order."""
    models: list[str] | None = None
    """What /v1/models lists (None: it did not answer, or the diagnosis stopped before)."""
    models_problem: str | None = None
    context_window: int | None = None
    modes: list[ModeResult] = field(default_factory=list)
    limits: ProviderLimits | None = None
    """The x-ratelimit-* headers of the last answer (None: no answer came back)."""
    batch: str = "not tried"
    warnings: list[str] = field(default_factory=list)
    verdict: Verdict = field(default_factory=lambda: Verdict("ok", "", exits.OK))

    @property
    def working_mode(self) -> str | None:
        """The mode `auto` would settle on: the first that works."""
        return next((m.mode for m in self.modes if m.works), None)

    @property
    def headers_sent(self) -> bool:
        return self.limits is not None and any(v is not None for v in vars(self.limits).values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "verdict": {
                "ok": self.verdict.ok,
                "step": self.verdict.step,
                "message": self.verdict.message,
                "exit_code": self.verdict.exit_code,
            },
            "passed": self.passed,
            "warnings": self.warnings,
            "models": self.models,
            "models_problem": self.models_problem,
            "context_window": self.context_window,
            "modes": [vars(m) for m in self.modes],
            "working_mode": self.working_mode,
            "rate_limit_headers": vars(self.limits) if self.headers_sent and self.limits else None,
            "batch_api": self.batch,
        }


def diagnose(settings: Settings) -> Diagnosis:
    """Each step in order against the endpoint of `settings`, to the first failure (the verdict)."""
    keys = settings.api_keys()
    found = Diagnosis(shown_url(str(settings.llm_base_url)), settings.llm_model)
    with httpx.Client(timeout=settings.llm_timeout_s) as http:
        clients = [
            openai.OpenAI(
                base_url=settings.llm_base_url,
                api_key=key,
                max_retries=0,
                timeout=settings.llm_timeout_s,
                http_client=http,
            )
            for key in keys
        ]
        try:
            _reach_and_authenticate(clients, found, settings)
            _check_models(found, called_models(settings))
            _try_modes(clients[0], found, settings)
            _check_headers(found)
            found.batch = _batch(clients[0])
            found.verdict = Verdict("ok", will_use(found.working_mode or "", settings), exits.OK)
        except _Stop as stop:
            found.verdict = stop.verdict
    return found


def _reach_and_authenticate(clients: list[openai.OpenAI], found: Diagnosis, settings: Settings) -> None:
    """/v1/models with each key: a connection that fails stops at reachability, a 401 or 403
    at authentication; another refusal (a server without /v1/models) leaves the models unlisted."""
    for slot, client in enumerate(clients):
        try:
            listed = list(client.models.list())
        except openai.APIConnectionError as exc:
            raise _Stop(unreachable(settings, exc)) from None
        except openai.APIStatusError as exc:
            _answered(found)
            if exc.status_code in AUTH_STATUSES:
                raise _Stop(key_refused(settings, slot, exc.status_code, _said(exc))) from None
            if slot == 0:
                found.models_problem = redact(f"HTTP {exc.status_code}: {_said(exc)}", settings)
            continue
        _answered(found)
        if slot == 0:
            found.models = [m.id for m in listed]
            _context_window(found, listed)
    if found.models is not None:  # a listing that answered took the key
        found.passed.append("authentication")


def _answered(found: Diagnosis) -> None:
    """The endpoint answered (whatever it said): it is reachable."""
    if "reachability" not in found.passed:
        found.passed.append("reachability")


def _context_window(found: Diagnosis, listed: list[Any]) -> None:
    for entry in listed:
        if entry.id == found.model:
            extra = entry.model_extra or {}
            for name in CONTEXT_FIELDS:
                if isinstance(extra.get(name), int):
                    found.context_window = extra[name]


def _check_models(found: Diagnosis, wanted: dict[str, str]) -> None:
    if found.models:
        if failure := models_missing(wanted, found.models):
            raise _Stop(failure)
    else:
        why = found.models_problem or "it lists none"
        found.warnings.append(
            f"the endpoint does not list its models ({why}): the calls below find out whether it has {found.model}"
        )
    found.passed.append("models")


def _try_modes(client: openai.OpenAI, found: Diagnosis, settings: Settings) -> None:
    for mode in prompts.STRUCTURED_MODES:
        found.modes.append(_try_mode(client, found, mode, settings))
        if "authentication" not in found.passed:  # no listing took it, this call did
            found.passed.append("authentication")
    if failure := modes_verdict(found.modes, found.model, settings.llm_structured_output):
        raise _Stop(failure)
    found.passed.append("structured_output")


def _check_headers(found: Diagnosis) -> None:
    if not found.headers_sent:
        found.warnings.append(
            "the endpoint sends no x-ratelimit headers: set PIPELINE_RATE_LIMIT_RPM and "
            "PIPELINE_RATE_LIMIT_TPM to its quota yourself"
        )
    found.passed.append("headers")


def _batch(client: openai.OpenAI) -> str:
    try:
        client.batches.list(limit=1)
    except openai.APIStatusError as exc:
        return f"no (HTTP {exc.status_code})"
    except openai.APIError as exc:
        return f"no ({type(exc).__name__})"
    return "answers"


def _try_mode(client: openai.OpenAI, found: Diagnosis, mode: str, settings: Settings) -> ModeResult:
    """One one-line call in `mode`. A refused key or an unreachable server stops the diagnosis
    there (the key is the problem, not the mode); a missing model too."""
    messages: list[prompts.Message] = [
        {"role": "system", "content": "You answer with JSON only."},
        {"role": "user", "content": 'Answer with the JSON object {"ok": true}.'},
    ]
    messages, fmt = prompts.structured_request(messages, Probe, mode)
    kwargs: dict[str, Any] = {"response_format": fmt} if fmt else {}
    started = time.monotonic()
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=found.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=50,
            temperature=0,
            **kwargs,
        )
        found.limits = provider_limits(raw.headers)
        answer = raw.parse().choices[0].message.content or ""
    except openai.APIConnectionError as exc:
        raise _Stop(unreachable(settings, exc)) from None
    except openai.APIStatusError as exc:
        found.limits = provider_limits(exc.response.headers)
        said = _said(exc)
        if exc.status_code in AUTH_STATUSES:
            raise _Stop(key_refused(settings, 0, exc.status_code, said)) from None
        if _code(exc) == "model_not_found":
            raise _Stop(model_refused(found.model, said)) from None
        return ModeResult(mode, False, redact(f"HTTP {exc.status_code}: {said}", settings))
    except openai.APIError as exc:
        return ModeResult(mode, False, redact(f"{type(exc).__name__}: {exc}", settings))
    latency = round(time.monotonic() - started, 3)
    try:
        Probe.model_validate_json(answer)
    except ValidationError:
        return ModeResult(mode, False, f"answered, but not the JSON asked for: {answer[:80]!r}", latency)
    return ModeResult(mode, True, "works", latency)


def _said(exc: openai.APIStatusError) -> str:
    """The server's own words: the OpenAI-style body's message, else the SDK's."""
    body = exc.body
    said = body.get("message") if isinstance(body, dict) else None
    return str(said or exc.message)


def _code(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    code = body.get("code") if isinstance(body, dict) else None
    return str(code) if code else None


# The verdicts, as pure functions of what was found.


def host_of(base_url: str) -> str:
    """host:port of the endpoint, never its path, user or password."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname or base_url}:{port}"


def shown_url(base_url: str) -> str:
    """The endpoint's URL without a user or password in it."""
    parts = urlsplit(base_url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def unreachable(settings: Settings, exc: openai.APIConnectionError) -> Verdict:
    host = host_of(str(settings.llm_base_url))
    if isinstance(exc, openai.APITimeoutError):
        why = f"no answer within {settings.llm_timeout_s:g} s (PIPELINE_LLM_TIMEOUT_S)"
    else:
        cause = exc.__cause__
        why = _connect_reason(str(cause) if cause else str(exc))
    return Verdict(
        "reachability",
        f"cannot reach the LLM endpoint at {host} (PIPELINE_LLM_BASE_URL): {redact(why, settings)}; "
        "start the server there or correct PIPELINE_LLM_BASE_URL",
        exits.UNREACHABLE,
    )


def _connect_reason(text: str) -> str:
    """A socket error in words: '[Errno 111] Connection refused' -> 'connection refused'."""
    reason = text.split("] ", 1)[-1].strip() or "the connection failed"
    return reason[0].lower() + reason[1:]


def key_setting(settings: Settings, slot: int) -> tuple[str, str]:
    """The variable the key in `slot` comes from, and the key as the user would look for it."""
    if settings.llm_api_keys:
        return (
            "PIPELINE_LLM_API_KEYS",
            f"key {slot + 1} of {len(settings.api_keys())} in PIPELINE_LLM_API_KEYS",
        )
    if "PIPELINE_LLM_API_KEY" not in os.environ and "OPENAI_API_KEY" in os.environ:
        return "OPENAI_API_KEY", "OPENAI_API_KEY"
    return "PIPELINE_LLM_API_KEY", "PIPELINE_LLM_API_KEY"


def key_refused(settings: Settings, slot: int, status: int, said: str) -> Verdict:
    """The key was refused: the endpoint's words (with any key shape removed) and the fix."""
    variable, shown = key_setting(settings, slot)
    words = redact(said, settings).rstrip(". ")
    if not settings.llm_api_key and not settings.llm_api_keys:
        message = (
            f"the endpoint refused the request without an API key (PIPELINE_LLM_API_KEY is not set): "
            f"HTTP {status}: {words}; set PIPELINE_LLM_API_KEY to a key this endpoint accepts"
        )
    else:
        message = (
            f"the endpoint refused the API key ({shown}): HTTP {status}: {words}; "
            f"set {variable} to a key this endpoint accepts"
        )
    return Verdict("authentication", message, exits.REFUSED)


def called_models(settings: Settings) -> dict[str, str]:
    """Every model the settings call, with the setting that names it."""
    wanted = {settings.llm_model: "PIPELINE_LLM_MODEL"}
    if settings.llm_models:
        for name, _ in settings.extract_models():
            wanted.setdefault(name, "PIPELINE_LLM_MODELS")
    if settings.llm_fallback_model:
        wanted.setdefault(settings.llm_fallback_model, "PIPELINE_LLM_FALLBACK_MODEL")
    if settings.escalate_model and not settings.escalate_base_url:  # on this endpoint
        wanted.setdefault(settings.escalate_model, "PIPELINE_ESCALATE_MODEL")
    return wanted


def models_missing(wanted: dict[str, str], listed: list[str]) -> Verdict | None:
    """The first called model the endpoint does not list, with the models it does list."""
    for model, setting in wanted.items():
        if model not in listed:
            shown = ", ".join(listed[:LISTED_SHOWN])
            more = f" and {len(listed) - LISTED_SHOWN} more" if len(listed) > LISTED_SHOWN else ""
            return Verdict(
                "models",
                f"the endpoint does not list the model {model} ({setting}); it lists: {shown}{more}; "
                f"set {setting} to one of them",
                exits.REFUSED,
            )
    return None


def model_refused(model: str, said: str) -> Verdict:
    return Verdict(
        "models",
        f"the endpoint does not have the model {model} (PIPELINE_LLM_MODEL): {said.rstrip('. ')}; "
        "set PIPELINE_LLM_MODEL to a model it serves",
        exits.REFUSED,
    )


def modes_verdict(modes: list[ModeResult], model: str, configured: str) -> Verdict | None:
    """None when the mode the pipeline will ask in works: under `auto` any, else the configured one."""
    working = [m.mode for m in modes if m.works]
    if not working:
        details = "; ".join(f"{m.mode}: {m.detail}" for m in modes)
        return Verdict(
            "structured_output",
            f"no structured-output mode works with {model} ({details}): extraction cannot run "
            "against this endpoint; use a model that answers JSON",
            exits.REFUSED,
        )
    if configured != "auto" and configured not in working:
        return Verdict(
            "structured_output",
            f"PIPELINE_LLM_STRUCTURED_OUTPUT={configured} does not work with {model} (these do: "
            f"{', '.join(working)}); set it to auto or {working[0]}",
            exits.REFUSED,
        )
    return None


def will_use(working_mode: str, settings: Settings) -> str:
    mode = working_mode if settings.llm_structured_output == "auto" else settings.llm_structured_output
    how = "finds it" if settings.llm_structured_output == "auto" else "configured"
    return f"the pipeline will use: {mode} (PIPELINE_LLM_STRUCTURED_OUTPUT={settings.llm_structured_output} {how})"
