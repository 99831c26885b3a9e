"""`pipeline doctor` against simulators that take different keys, models and structured-output
shapes, and against a port nothing listens on: it diagnoses in order and stops at the first
failure, with the exit code of pipeline/core/exits.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.core import exits
from pipeline.llm.doctor import ModeResult, host_of, models_missing, modes_verdict, shown_url
from pipeline.runtime import embedded
from pipeline_dev.sim import SimConfig, SimServer
from tests.conftest import run_cli, running_simulator

KEY = "sk-doctor-0123456789"


def _doctor(base_url: str, *args: str, model: str = "sim-1") -> tuple[int, str, str]:
    env = {"PIPELINE_LLM_BASE_URL": base_url, "PIPELINE_LLM_MODEL": model, "PIPELINE_LLM_API_KEY": KEY}
    result = run_cli("doctor", *args, env=env, timeout_s=60)
    assert KEY not in result.stdout + result.stderr and KEY[-4:] not in result.stdout + result.stderr
    return result.returncode, result.stdout, result.stderr


def _verdict(base_url: str, model: str = "sim-1") -> tuple[int, dict[str, Any]]:
    code, out, _ = _doctor(base_url, "--json", model=model)
    found = json.loads(out)
    assert found["verdict"]["exit_code"] == code
    return code, found


def test_doctor_reports_the_mode_the_pipeline_will_use_and_the_providers_limits() -> None:
    config = SimConfig(p50_s=0, p95_s=0, rpm=600, tpm=100_000, rejected_shapes=("json_schema",), api_key=KEY)
    with SimServer(config) as sim:
        code, out, _ = _doctor(sim.base_url)
        assert code == exits.OK, out
        assert "API key: accepted" in out and "this model listed: yes" in out
        assert "the pipeline will use: json_object_schema" in out
        assert "x-ratelimit headers: yes (requests 600" in out
        assert "Batch API: answers" in out  # the simulator serves it
        code, found = _verdict(sim.base_url)
    assert code == exits.OK and found["verdict"]["ok"] and found["working_mode"] == "json_object_schema"
    assert found["passed"] == ["reachability", "authentication", "models", "structured_output", "headers"]
    assert [m["works"] for m in found["modes"]] == [False, True, True, True]
    assert found["rate_limit_headers"]["limit_tokens"] == 100_000


def test_a_wrong_key_is_said_once_as_the_key_and_nothing_is_tried_after_it() -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0, api_key="sk-the-right-one-9876")) as sim:
        code, out, err = _doctor(sim.base_url)
        assert code == exits.REFUSED
        assert (
            "error: the endpoint refused the API key (PIPELINE_LLM_API_KEY): HTTP 401: Incorrect API key"
            in err
        )
        assert "set PIPELINE_LLM_API_KEY to a key this endpoint accepts" in err
        assert "structured" not in out + err and "HTTP 401" not in out and "API key: accepted" not in out
        code, found = _verdict(sim.base_url)
    assert code == exits.REFUSED and found["verdict"]["step"] == "authentication"
    assert found["passed"] == ["reachability"] and found["modes"] == []


def test_a_port_nothing_listens_on_is_unreachable() -> None:
    base_url = f"http://127.0.0.1:{embedded.free_port()}/v1"
    code, out, err = _doctor(base_url)
    assert code == exits.UNREACHABLE
    assert (
        f"cannot reach the LLM endpoint at {host_of(base_url)} (PIPELINE_LLM_BASE_URL): connection refused"
        in err
    )
    assert "API key" not in out
    code, found = _verdict(base_url)
    assert code == exits.UNREACHABLE and found["verdict"]["step"] == "reachability" and found["passed"] == []


def test_a_model_the_endpoint_does_not_list_is_named_with_those_it_lists() -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0, served_models=("another-model", "third-model"))) as sim:
        code, _, err = _doctor(sim.base_url)
        assert code == exits.REFUSED
        assert (
            "the endpoint does not list the model sim-1 (PIPELINE_LLM_MODEL); it lists: another-model, "
            "third-model; set PIPELINE_LLM_MODEL to one of them"
        ) in err
        code, found = _verdict(sim.base_url)
    assert found["verdict"]["step"] == "models" and found["modes"] == []


def test_doctor_exits_refused_when_no_mode_works() -> None:
    shapes = ("json_schema", "json_object_schema", "json_object", "prompt")
    with SimServer(SimConfig(p50_s=0, p95_s=0, rejected_shapes=shapes, rejected_status=400)) as sim:
        code, out, err = _doctor(sim.base_url)
        assert code == exits.REFUSED and "error: no structured-output mode works with sim-1" in err
        assert "one-line calls" in out  # the modes were tried: the key and the model passed
        code, found = _verdict(sim.base_url)
    assert found["verdict"]["step"] == "structured_output"
    assert all("HTTP 400" in m["detail"] for m in found["modes"])


def test_a_missing_model_names_the_first_and_cuts_a_long_list() -> None:
    listed = [f"model-{i}" for i in range(25)]
    verdict = models_missing({"model-3": "PIPELINE_LLM_MODEL", "gone": "PIPELINE_LLM_FALLBACK_MODEL"}, listed)
    assert verdict is not None and verdict.exit_code == exits.REFUSED
    assert "the model gone (PIPELINE_LLM_FALLBACK_MODEL)" in verdict.message
    assert "model-19 and 5 more; set PIPELINE_LLM_FALLBACK_MODEL" in verdict.message
    assert models_missing({"model-3": "PIPELINE_LLM_MODEL"}, listed) is None


def test_a_configured_mode_that_does_not_work_fails_though_another_does() -> None:
    modes = [ModeResult("json_schema", False, "HTTP 500"), ModeResult("json_object_schema", True, "works")]
    assert modes_verdict(modes, "m", "auto") is None
    verdict = modes_verdict(modes, "m", "json_schema")
    assert verdict is not None and "set it to auto or json_object_schema" in verdict.message
    assert host_of("https://user:secret@gw.example.com/v1") == "gw.example.com:443"
    assert shown_url("https://user:secret@gw.example.com:8443/v1") == "https://gw.example.com:8443/v1"


def test_the_readmes_dry_run_sim_then_doctor_passes_with_the_default_model(tmp_path: Path) -> None:
    # README, "Choose the model": `pipeline sim --port 8900 --rpm 600 &`, then `pipeline doctor`
    # with PIPELINE_LLM_MODEL=gpt-4o-mini (the default), before any request named that model.
    with running_simulator(tmp_path, "--rpm", "600") as url:
        env = {"PIPELINE_LLM_BASE_URL": url, "PIPELINE_LLM_MODEL": "gpt-4o-mini"}
        result = run_cli("doctor", env=env, timeout_s=60)
    assert result.returncode == exits.OK, result.stdout + result.stderr
    assert "this model listed: yes" in result.stdout
