"""Generation throughput on this CPU: vLLM's CPU build against transformers' generate, on the model of the runs that
use vLLM here (``builtin:tiny-arith-h32``, seed 0), the same prompts (the embedded task's training prompts), one
thread each (OMP_NUM_THREADS=1), sampling at temperature 1 with a fixed number of new tokens (EOS ignored), so both
generate exactly PROMPTS x TOKENS tokens. Run in the vLLM venv (scripts/backend_venv.sh vllm):

    .venvs/vllm/bin/python benchmarks/engine_throughput.py [PROMPTS] [TOKENS] [REPEATS]

Each repeat alternates hf and vLLM and times generation alone (the engine's start-up is reported apart);
results/engine_throughput.json with the machine record.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import sys
import tempfile
import time
from pathlib import Path

from _common import machine, save, summary

MODEL = "tiny-arith-h32"


def main() -> None:
    prompts_n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    started = machine()
    import torch

    torch.set_num_threads(1)
    import vllm._custom_ops as ops
    from vllm import LLM, SamplingParams

    from unirl.data.builtin import arith, tiny_model

    ops._supports_onednn = False  # as in training runs (unirl/plugins/trl/vllm_engine.py)
    prompts = [r["prompt"] for r in arith.rows("train", {}, seed=0)][:prompts_n]
    with tempfile.TemporaryDirectory() as tmp:
        path = tiny_model.save(MODEL, seed=0, out_dir=Path(tmp) / "model")
        model, tok = tiny_model.build(MODEL, seed=0)
        model.eval()
        allowed = tiny_model.allowed_token_ids(f"builtin:{MODEL}")
        never = tiny_model.never_sampled(f"builtin:{MODEL}")
        start = time.perf_counter()
        llm = LLM(model=str(path), dtype="float32", max_model_len=128, gpu_memory_utilization=0.05,
                  enforce_eager=True, seed=0)
        startup = time.perf_counter() - start
        params = SamplingParams(temperature=1.0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True,
                                allowed_token_ids=allowed)
        encoded = tok(prompts, return_tensors="pt", padding=True)
        rows: list[dict[str, float]] = []
        for _ in range(repeats):
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(**encoded, do_sample=True, temperature=1.0, max_new_tokens=tokens,
                                     min_new_tokens=tokens, suppress_tokens=never,
                                     pad_token_id=tok.pad_token_id)
            hf_s = time.perf_counter() - start
            hf_tokens = (out.shape[1] - encoded["input_ids"].shape[1]) * len(prompts)
            start = time.perf_counter()
            generated = llm.generate(prompts, params, use_tqdm=False)
            vllm_s = time.perf_counter() - start
            vllm_tokens = sum(len(g.outputs[0].token_ids) for g in generated)
            rows.append({"hf_s": hf_s, "hf_tok_s": hf_tokens / hf_s, "vllm_s": vllm_s,
                         "vllm_tok_s": vllm_tokens / vllm_s, "ratio": (vllm_tokens / vllm_s) / (hf_tokens / hf_s)})
            print(rows[-1])
    save("engine_throughput", {
        "machine": started, "model": f"builtin:{MODEL}", "prompts": len(prompts), "new_tokens": tokens,
        "dtype": "float32", "threads": 1, "vllm_startup_s": startup, "repeats": rows,
        "hf_tok_s": summary([r["hf_tok_s"] for r in rows]), "vllm_tok_s": summary([r["vllm_tok_s"] for r in rows]),
    })


if __name__ == "__main__":
    main()
