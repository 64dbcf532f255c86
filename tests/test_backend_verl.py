"""The verl adapter proven through verl 0.9.1's own reward path, in verl's own venv.

tests/backends/verl_harness.py composes verl's shipped config with the overrides unirl emits
(``reward.custom_reward_function.path`` = unirl/adapters/verl.py, ``reward_kwargs.unirl_spec``), hand-builds
the DataProto verl's agent loop produces, and scores it with ``load_reward_manager(...).run_single`` or a
``RewardLoopWorker`` batch, then runs verl's own batch assembly of the extra keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import unirl.adapters.verl
from tests.support.helpers import run_harness
from tests.support.parity import PARITY_SAMPLES, expected_rows, parity_spec, same
from unirl.rewards.spec import RewardPolicy, RewardRuntimeSpec

pytestmark = [pytest.mark.verl, pytest.mark.slow]


def verl_samples(path: Path) -> Path:
    """What unirl's verl exporter writes: the prompt travels in extra_info, since compute_score gets no prompt."""
    rows = []
    for s in PARITY_SAMPLES:
        row = s.to_dict()
        row["metadata"] = {unirl.adapters.verl.PROMPT_KEY: s.prompt, "row": len(rows)}
        rows.append(json.dumps(row, ensure_ascii=False))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def score_through_verl(tmp_path: Path, spec: RewardRuntimeSpec, *extra: str,
                       reward_path: str = unirl.adapters.verl.__file__) -> tuple[int, dict, str]:
    spec_path = spec.write(tmp_path / "reward_spec.json")
    out = tmp_path / "out.json"
    result = run_harness("verl", "--reward-file", reward_path, "--samples",
                         str(verl_samples(tmp_path / "samples.jsonl")), "--out", str(out),
                         "--reward-kwargs", json.dumps({"unirl_spec": str(spec_path)}), *extra)
    return result.returncode, json.loads(out.read_text()) if out.exists() else {}, result.stderr


@pytest.mark.parametrize(("how", "reward_path"), [
    (("--mode", "single"), unirl.adapters.verl.__file__),
    (("--mode", "batch"), unirl.adapters.verl.__file__),
    (("--mode", "batch", "--layout", "stream"), unirl.adapters.verl.__file__),
    # verl also imports a module by name (verl/utils/import_utils.py:170-172), which keeps it in sys.modules
    (("--mode", "batch"), "pkg://unirl.adapters.verl"),
], ids=["run_single", "worker_batch", "streamed", "by_module_name"])
def test_verl_reward_manager_scores_like_every_adapter(tmp_path: Path, how: tuple[str, ...], reward_path: str) -> None:
    code, out, stderr = score_through_verl(tmp_path, parity_spec(tmp_path / "trajectories.jsonl"), *how,
                                           reward_path=reward_path)
    assert code == 0, stderr[-3000:]
    expected = expected_rows(parity_spec())
    for i, (result, want) in enumerate(zip(out["results"], expected, strict=True)):
        assert result["score"] == pytest.approx(want["score"])
        assert same(result["extra"], want), f"sample {i}: {result['extra']} != {want}"
    # verl's own assembly of reward_extra_info (one array per key, keys from the first sample) succeeded
    assert out["assembly"]["ok"], out["assembly"]
    assert out["assembly"]["reward_extra_keys"] == list(expected[0])
    trajectories = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    by_row = {t["completion"]: t for t in trajectories}
    assert by_row["8"]["prompt"] == PARITY_SAMPLES[1].prompt  # the prompt came back out of extra_info
    assert by_row["seven"]["error_kinds"] == {"numeric_closeness": "exception"}


def test_abort_policy_fails_verl_with_the_reward_error(tmp_path: Path) -> None:
    spec = RewardRuntimeSpec(parity_spec().rewards, RewardPolicy(on_error="abort", workers=1))
    code, out, stderr = score_through_verl(tmp_path, spec, "--mode", "single")
    assert code == 1
    assert "reward_policy.on_error=abort" in json.dumps(out) + stderr
    assert "needs a numeric reference" in json.dumps(out) + stderr
