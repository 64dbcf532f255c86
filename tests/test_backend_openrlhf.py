"""The OpenRLHF adapter proven through OpenRLHF 0.11.2's own reward loading and calling code.

tests/backends/openrlhf_harness.py runs in OpenRLHF's own venv (scripts/backend_venv.sh openrlhf): OpenRLHF's
SingleTurnAgentExecutor loads the generated reward file (or POSTs to unirl's HTTP server), and its
SamplesGenerator turns the answer into an Experience, whose tensors the harness reads back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.adversarial.reward_server import close_server
from tests.support.helpers import run_harness
from tests.support.parity import PARITY_SAMPLES, expected_rows, parity_spec, same, write_samples
from unirl.adapters.openrlhf import ABORT_EXIT_CODE, write_reward_file
from unirl.rewards.spec import RewardPolicy, RewardRuntimeSpec

pytestmark = [pytest.mark.openrlhf, pytest.mark.slow]
FLOAT32 = 1e-6  # OpenRLHF keeps rewards and extra logs in float32 tensors


def experience_rows(out: Path) -> list[dict[str, float]]:
    results = json.loads(out.read_text())["results"]
    for r in results:
        assert r["error"] is None and r["reward"] is not None, r  # OpenRLHF swallowed nothing
    return [{"score": r["reward"], **r["extra_logs"]} for r in results]


def assert_parity(rows: list[dict[str, float]]) -> None:
    for i, (row, want) in enumerate(zip(rows, expected_rows(parity_spec()), strict=True)):
        assert same(row, want, rel=FLOAT32), f"sample {i} ({PARITY_SAMPLES[i].completion[:40]!r}): {row} != {want}"


def test_reward_file_loaded_by_openrlhf_scores_like_every_adapter(tmp_path: Path) -> None:
    spec = parity_spec(tmp_path / "trajectories.jsonl")
    reward_file = write_reward_file(tmp_path / "openrlhf_reward.py", spec.write(tmp_path / "reward_spec.json"))
    out = tmp_path / "out.json"
    result = run_harness("openrlhf", "--reward-file", str(reward_file), "--samples",
                         str(write_samples(tmp_path / "samples.jsonl")), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = experience_rows(out)
    assert_parity(rows)
    trajectories = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [t["completion"] for t in trajectories] == [s.completion for s in PARITY_SAMPLES]  # split off exactly
    assert all(t["backend"] == "openrlhf" and not t["truncated"] for t in trajectories)


def test_http_reward_server_through_openrlhf(tmp_path: Path) -> None:
    from unirl.adapters import common
    from unirl.adapters.openrlhf_server import serve

    spec_path = parity_spec().write(tmp_path / "reward_spec.json")
    server = serve("127.0.0.1", 0)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(common.SPEC_ENV, str(spec_path))
            url = "http://{}:{}/get_reward".format(*server.server_address[:2])
            out = tmp_path / "out.json"
            result = run_harness("openrlhf", "--remote-url", url, "--samples",
                                 str(write_samples(tmp_path / "samples.jsonl")), "--out", str(out))
    finally:
        close_server(server)
        for runtime in common._RUNTIMES.values():
            runtime.executor.close()
        common._RUNTIMES.clear()
    assert result.returncode == 0, result.stderr[-3000:]
    assert_parity(experience_rows(out))


def test_abort_policy_stops_openrlhf_with_the_reason_instead_of_a_swallowed_none(tmp_path: Path) -> None:
    spec = RewardRuntimeSpec(parity_spec().rewards, RewardPolicy(on_error="abort", workers=1))
    reward_file = write_reward_file(tmp_path / "openrlhf_reward.py", spec.write(tmp_path / "reward_spec.json"))
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps(PARITY_SAMPLES[9].to_dict()) + "\n")  # numeric_closeness raises on "seven"
    result = run_harness("openrlhf", "--reward-file", str(reward_file), "--samples", str(samples),
                         "--out", str(tmp_path / "out.json"))
    assert result.returncode == ABORT_EXIT_CODE
    assert "reward_policy.on_error=abort" in result.stderr and "needs a numeric reference" in result.stderr
