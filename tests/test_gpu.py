"""The TRL backend on CUDA in bf16. Runs only where a GPU is present (marker `gpu`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import read_jsonl, require_module, run_dirs

torch = require_module("torch", "pip install torch==2.13.0, then pip install -e '.[trl]'")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_embedded_default_trains_on_cuda_in_bf16(isolated: Path) -> None:
    out = run_cli("resources.device=cuda", "resources.gpus_per_node=1", "model.dtype=auto", "algorithm.steps=300",
                  "logging.progress=false", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    args = json.loads((run_dir / "native_config.json").read_text())["trainer_config"]
    assert args["use_cpu"] is False and args["bf16"] is True
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["host"]["cuda"] is True and manifest["host"]["gpus"]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert metrics[-1]["gpu/peak_mem_gib"] > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["accuracy_after"] > summary["accuracy_before"]
