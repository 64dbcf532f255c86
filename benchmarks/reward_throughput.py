"""Reward throughput and memory: unirl's executor vs a sequential loop vs verl's own reward path.

    python benchmarks/reward_throughput.py [N=10000]

Scores N math completions (boxed / #### / fraction answers, half right) with a CPU-bound scorer,
math_answer(verifier=math_verify) (~3 ms a sample: sympy parsing), in one run:
- sequential: a plain loop in this process;
- executor: unirl's RewardExecutor with 2 worker processes, fed in rollout-sized batches of 256;
- ceiling: a bare ProcessPoolExecutor(2).map over all N at once (no timeouts, no policy, no batches): what
  two processes get out of this machine (on a shared VM, two busy processes may not get two whole cores);
- verl: verl 0.9.1's RewardLoopWorker.compute_score_batch in verl's own venv, once with a hand-written
  verl compute_score (benchmarks/verl_native_math_reward.py) and once with unirl's verl adapter;
- overhead: a trivial reward (bare_number) through the executor vs the plain loop, per sample;
- memory: resident memory of this process plus its workers after 1k and after N samples.
Writes benchmarks/results/reward_throughput.json.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import save  # noqa: E402
from unirl.rewards.contract import Sample  # noqa: E402
from unirl.rewards.executor import RewardExecutor  # noqa: E402
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec  # noqa: E402

BATCH = 256
MATH = RewardEntry("math_answer", "unirl.plugins.builtin_rewards.math_answer:math_answer",
                   kwargs={"verifier": "math_verify"},
                   components=("has_answer",))
TRIVIAL = RewardEntry("bare_number", "unirl.plugins.builtin_rewards.formats:bare_number")


def make_samples(n: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 9999), rng.randint(1, 9999)
        answer = a + b if rng.random() < 0.5 else a + b + rng.randint(1, 99)
        form = i % 3
        completion = (f"Adding {a} and {b} step by step gives \\boxed{{{answer}}}." if form == 0 else
                      f"First {a}, then {b}. The sum is {answer}.\n#### {answer}" if form == 1 else
                      f"Half of twice the sum: $\\frac{{{2 * answer}}}{{2}}$ so \\boxed{{\\frac{{{2 * answer}}}{{2}}}}")
        out.append(Sample(prompt=f"What is {a}+{b}?", completion=completion, reference=str(a + b), data_source="math"))
    return out


WARMUP = make_samples(64, seed=99)


def tree_rss_mib() -> float:
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total / 2**20


def sequential(samples: list[Sample], entry: RewardEntry) -> tuple[float, list[float]]:
    from unirl.rewards.spec import load_reward

    fn = load_reward(entry)
    start = time.perf_counter()
    scores = [fn(s, **entry.kwargs).score for s in samples]
    return time.perf_counter() - start, scores


def executor(samples: list[Sample], entry: RewardEntry, memory_marks: tuple[int, ...] = ()) -> dict:
    spec = RewardRuntimeSpec((entry,), RewardPolicy(workers=2, timeout_s=60))
    marks: dict[str, float] = {}
    peak = [0.0]
    done = threading.Event()

    def sample_memory() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], tree_rss_mib())

    watcher = threading.Thread(target=sample_memory, daemon=True)
    watcher.start()
    with RewardExecutor(spec) as ex:
        ex.score(WARMUP)  # both workers started and warm (math-verify builds its parsers on first use)
        start = time.perf_counter()
        scores: list[float] = []
        for i in range(0, len(samples), BATCH):
            scores += [s.scores[entry.name] for s in ex.score(samples[i:i + BATCH])]
            for mark in memory_marks:
                if i < mark <= i + BATCH:
                    marks[f"rss_mib_after_{mark}"] = round(tree_rss_mib(), 1)
                    marks[f"peak_rss_mib_up_to_{mark}"] = round(max(peak[0], tree_rss_mib()), 1)
        elapsed = time.perf_counter() - start
    done.set()
    return {"seconds": elapsed, "scores": scores, **marks}


def _score_chunk(chunk: list[Sample]) -> list[float]:
    from unirl.rewards.spec import load_reward

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    fn = load_reward(MATH)
    return [fn(s, **MATH.kwargs).score for s in chunk]


def process_pool_ceiling(samples: list[Sample]) -> tuple[float, list[float]]:
    from concurrent.futures import ProcessPoolExecutor

    chunks = [samples[i:i + 64] for i in range(0, len(samples), 64)]
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_score_chunk, [WARMUP[:32], WARMUP[32:]]))  # the same warm-up as the executor's
        start = time.perf_counter()
        scores = [x for chunk in pool.map(_score_chunk, chunks) for x in chunk]
        return time.perf_counter() - start, scores


def verl_path(samples: list[Sample], reward_file: Path, reward_kwargs: dict | None = None) -> dict:
    python = REPO / ".venvs" / "verl" / "bin" / "python"
    if not python.exists():
        return {"skipped": f"{python} missing: run scripts/backend_venv.sh verl"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl"
        path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in samples))
        out = Path(tmp) / "out.json"
        cmd = [str(python), str(REPO / "tests/backends/verl_harness.py"), "--reward-file", str(reward_file),
               "--samples", str(path), "--out", str(out), "--mode", "batch", "--timing"]
        if reward_kwargs:
            cmd += ["--reward-kwargs", json.dumps(reward_kwargs)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            return {"error": result.stderr[-2000:]}
        data = json.loads(out.read_text())
    return {"seconds": data["scoring_seconds"], "scores": [r["score"] for r in data["results"]]}


def main() -> None:
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    samples = make_samples(n)
    results: dict = {"n": n, "scorer": "math_answer(verifier=math_verify)", "batch": BATCH}

    seq_s, seq_scores = sequential(samples, MATH)
    results["sequential_s"] = round(seq_s, 2)
    print(f"sequential loop:   {seq_s:7.2f} s  ({n / seq_s:7.0f} samples/s)", flush=True)

    ex = executor(samples, MATH, memory_marks=(1000, n))
    assert ex.pop("scores") == seq_scores, "executor and loop disagree"
    results["executor_s"] = round(ex.pop("seconds"), 2)
    results.update(ex)
    print(f"unirl executor:    {results['executor_s']:7.2f} s  ({n / results['executor_s']:7.0f} samples/s), "
          f"{seq_s / results['executor_s']:.2f}x the loop", flush=True)

    ceiling_s, ceiling_scores = process_pool_ceiling(samples)
    assert ceiling_scores == seq_scores
    results["process_pool_ceiling_s"] = round(ceiling_s, 2)
    print(f"process-pool ceil: {ceiling_s:7.2f} s  ({n / ceiling_s:7.0f} samples/s), "
          f"{seq_s / ceiling_s:.2f}x the loop", flush=True)

    native = verl_path(samples, REPO / "benchmarks" / "verl_native_math_reward.py")
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = RewardRuntimeSpec((MATH,), RewardPolicy(workers=2, timeout_s=60, on_error="fallback")).write(
            Path(tmp) / "spec.json")
        adapted = verl_path(samples, REPO / "unirl" / "adapters" / "verl.py", {"unirl_spec": str(spec_path)})
    for name, res in (("verl_native", native), ("verl_unirl_adapter", adapted)):
        if "seconds" in res:
            assert res.pop("scores") == seq_scores, f"{name} disagrees with the loop"
            results[f"{name}_s"] = round(res["seconds"], 2)
            print(f"{name:18s} {res['seconds']:7.2f} s  ({n / res['seconds']:7.0f} samples/s)", flush=True)
        else:
            results[name] = res
            print(f"{name}: {res}", flush=True)

    trivial_seq, trivial_scores = sequential(samples, TRIVIAL)
    trivial = executor(samples, TRIVIAL)
    assert trivial.pop("scores") == trivial_scores
    per_sample_us = (trivial["seconds"] - trivial_seq) / n * 1e6
    results.update(trivial_loop_s=round(trivial_seq, 3), trivial_executor_s=round(trivial["seconds"], 3),
                   executor_overhead_us_per_sample=round(per_sample_us, 1))
    print(f"trivial reward: loop {trivial_seq:.3f} s, executor {trivial['seconds']:.3f} s -> "
          f"{per_sample_us:.1f} us overhead per sample", flush=True)
    print(f"memory (this process + workers): after 1k {results.get('rss_mib_after_1000')} MiB, after {n} "
          f"{results.get(f'rss_mib_after_{n}')} MiB; peak {results.get(f'peak_rss_mib_up_to_{n}')} MiB", flush=True)
    results["speedup_vs_loop"] = round(seq_s / results["executor_s"], 2)
    results["ceiling_speedup_vs_loop"] = round(seq_s / ceiling_s, 2)
    if "verl_native_s" in results:
        results["speedup_vs_verl_native"] = round(results["verl_native_s"] / results["executor_s"], 2)
    results["cpu_count"] = os.cpu_count()
    save("reward_throughput", results)


if __name__ == "__main__":
    main()
