"""Hand-written namespaces or bubblewrap? Both sandboxes measured side by side, and the adversarial corpus run on both.

* ``handwritten``: ``unirl/sandbox.py`` as of commit 2c5d24a (its own supervisor and init, shipped as Python source
  to a second interpreter per run), loaded from git into a temporary module;
* ``bubblewrap``: today's ``unirl.rewards.sandbox.core`` (bwrap 0.8 + a libseccomp filter + a cgroup per run).

For each: executions per second of ``print(1)`` serially and with one thread per core (the two interleaved in
rounds, so a change in the machine's load hits both alike), time to kill three runaways, and the corpus areas
``sandbox_programs`` (against each sandbox) and ``grader_tricks`` (against each one's ``code_tests``: the earlier
grader on the earlier sandbox, today's on today's). The decision, with its numbers, goes to
``benchmarks/results/sandbox_choice.json``.

Usage: python benchmarks/sandbox_choice.py [RUNS]   (default 100 per round and mode)
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import save
from sandbox import RUNAWAYS, bare_python_per_second, executions_per_second, time_to_kill

import unirl
from tests.adversarial import grader_tricks, sandbox_programs
from unirl.rewards.sandbox import core as bubblewrap

REPO = Path(__file__).resolve().parents[1]
BASELINE = "2c5d24a"


def load_handwritten(directory: Path) -> tuple[types.ModuleType, Any]:
    """The earlier sandbox and its code_tests, from git, as importable modules (readable by any uid)."""
    source = subprocess.run(["git", "show", f"{BASELINE}:unirl/sandbox.py"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout
    path = directory / "handwritten_sandbox.py"
    path.write_text(source)
    path.chmod(0o644)
    directory.chmod(0o755)
    spec = importlib.util.spec_from_file_location("handwritten_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules["handwritten_sandbox"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    grader_source = subprocess.run(["git", "show", f"{BASELINE}:plugins/unirl_rewards/code_exec.py"], cwd=REPO,
                                   capture_output=True, text=True, check=True).stdout
    # the grader at 2c5d24a imported the sandbox from its path then
    grader_source = grader_source.replace("from unirl.sandbox import", "from handwritten_sandbox import")
    grader = types.ModuleType("handwritten_code_exec")
    registered = unirl.reward
    unirl.reward = lambda *args, **kwargs: (lambda fn: fn)  # type: ignore[assignment]  # not into the registry
    try:
        exec(compile(grader_source, "handwritten_code_exec.py", "exec"), grader.__dict__)
    finally:
        unirl.reward = registered
    return module, grader.code_tests


def corpus(cases: list[Any]) -> dict[str, Any]:
    contained, failures = 0, []
    start = time.perf_counter()
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="unirl-choice-") as tmp:
            try:
                case.check(Path(tmp))
                contained += 1
            except BaseException as exc:  # an attack that got through, a harness error, or a skip: all reported
                failures.append({"case": case.name,
                                 "error": "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300]})
    return {"tried": len(cases), "contained": contained, "not_contained": len(cases) - contained,
            "seconds": round(time.perf_counter() - start, 1), "failures": failures}


def throughput(implementations: dict[str, Any], runs: int, rounds: int) -> dict[str, Any]:
    """Interleaved rounds: each round measures every implementation once per mode."""
    samples: dict[str, dict[str, list[float]]] = {name: {"serial": [], "parallel": [], "latency_ms": []}
                                                  for name in implementations}
    bare: list[float] = []
    for _ in range(rounds):
        for name, module in implementations.items():
            serial = executions_per_second(module, runs, 1)
            parallel = executions_per_second(module, runs, os.cpu_count() or 1)
            samples[name]["serial"].append(serial["per_second"])
            samples[name]["parallel"].append(parallel["per_second"])
            samples[name]["latency_ms"].append(serial["latency_ms_median"])
        bare.append(bare_python_per_second(max(10, runs // 2)))
    report: dict[str, Any] = {
        name: {"serial_per_second": statistics.median(s["serial"]),
               "parallel_per_second": statistics.median(s["parallel"]),
               "serial_latency_ms_median": statistics.median(s["latency_ms"]),
               "rounds": {"serial": s["serial"], "parallel": s["parallel"]}}
        for name, s in samples.items()}
    report["bare_python_subprocess_per_second"] = statistics.median(bare)
    return report


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with tempfile.TemporaryDirectory(prefix="unirl-handwritten-") as scratch:
        handwritten, handwritten_grader = load_handwritten(Path(scratch))
        implementations = {"handwritten": handwritten, "bubblewrap": bubblewrap}
        for module in implementations.values():
            module.run_sandboxed("print(1)")  # warm the page cache
        data: dict[str, Any] = {"baseline_commit": BASELINE, "bwrap": bubblewrap._bwrap()[2],
                                "throughput": throughput(implementations, runs, rounds=3)}
        data["time_to_kill"] = {name: {runaway: time_to_kill(module, program, max(10, runs // 5))
                                       for runaway, program in RUNAWAYS.items()}
                                for name, module in implementations.items()}
        graders = {"handwritten": lambda sample: handwritten_grader(sample, timeout_s=2.0),
                   "bubblewrap": grader_tricks._code_tests}
        data["corpus"] = {}
        for name, module in implementations.items():
            with sandbox_programs.using(module), grader_tricks.using(graders[name]):
                data["corpus"][name] = {"sandbox_programs": corpus(sandbox_programs.CASES),
                                        "grader_tricks": corpus(grader_tricks.CASES)}
    data["decision"] = decision(data)
    save("sandbox_choice", data)
    print(data["decision"])


def decision(data: dict[str, Any]) -> str:
    """The choice, from the numbers: containment first, then throughput, then time to kill."""
    t, k, c = data["throughput"], data["time_to_kill"], data["corpus"]
    names = ("bubblewrap", "handwritten")

    def held(name: str) -> int:
        return sum(area["contained"] for area in c[name].values())

    def kills(name: str) -> str:
        return ", ".join(f"{runaway} {k[name][runaway]['median_ms']:.1f} ms median ({k[name][runaway]['max_ms']:.1f} "
                         "max)" for runaway in RUNAWAYS)

    def contained(name: str) -> str:
        return ", ".join(f"{area} {c[name][area]['contained']}/{c[name][area]['tried']}" for area in c[name])

    chosen = max(names, key=lambda n: (held(n), t[n]["serial_per_second"]))
    other = names[1] if chosen == names[0] else names[0]
    speed = t[chosen]["serial_per_second"] / t[other]["serial_per_second"]
    return (
        f"{chosen}: it contains {held(chosen)} attacks of the corpus to {held(other)} and runs print(1) "
        f"{speed:.2f}x as often. Executions per second: bubblewrap {t['bubblewrap']['serial_per_second']:.1f} serial"
        f" / {t['bubblewrap']['parallel_per_second']:.1f} with {os.cpu_count()} threads, hand-written "
        f"{t['handwritten']['serial_per_second']:.1f} / {t['handwritten']['parallel_per_second']:.1f} (a bare "
        f"python -I -c subprocess: {t['bare_python_subprocess_per_second']:.1f}; bubblewrap starts one interpreter "
        "per run, the hand-written sandbox two). Time to kill: bubblewrap "
        f"{kills('bubblewrap')}; hand-written {kills('handwritten')}. Corpus contained: bubblewrap "
        f"{contained('bubblewrap')}; hand-written {contained('handwritten')}."
    )


if __name__ == "__main__":
    main()
