"""`pipeline doctor` against simulators that take different structured-output shapes."""

from __future__ import annotations

import json

from pipeline_dev.sim import SimConfig, SimServer
from tests.conftest import run_cli


def _doctor(base_url: str, *args: str) -> tuple[int, str]:
    env = {
        "PIPELINE_LLM_BASE_URL": base_url,
        "PIPELINE_LLM_MODEL": "sim-1",
        "PIPELINE_LLM_API_KEY": "sk-doctor-0123456789",
    }
    result = run_cli("doctor", *args, env=env, timeout_s=60)
    assert "sk-doctor-0123456789" not in result.stdout + result.stderr
    return result.returncode, result.stdout


def test_doctor_reports_the_mode_the_pipeline_will_use_and_the_providers_limits() -> None:
    config = SimConfig(p50_s=0, p95_s=0, rpm=600, tpm=100_000, rejected_shapes=("json_schema",))
    with SimServer(config) as sim:
        code, out = _doctor(sim.base_url)
        assert code == 0, out
        assert "the pipeline will use: json_object_schema" in out
        assert "x-ratelimit headers: yes (requests 600" in out
        assert "this model listed: yes" in out and "Batch API: answers" in out  # the simulator serves it
        code, out = _doctor(sim.base_url, "--json")
    found = json.loads(out)
    assert code == 0 and found["working_mode"] == "json_object_schema"
    assert [m["works"] for m in found["modes"]] == [False, True, True, True]
    assert found["rate_limit_headers"]["limit_tokens"] == 100_000


def test_doctor_exits_non_zero_when_no_mode_works() -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0, served_models=("another-model",))) as sim:
        code, out = _doctor(sim.base_url)
        assert code == 1 and "no structured-output mode works" in out
        code, out = _doctor(sim.base_url, "--json")
    assert code == 1
    assert all("does not exist" in m["detail"] for m in json.loads(out)["modes"])
