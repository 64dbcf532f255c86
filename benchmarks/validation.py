"""What validating a plan against a backend's own schema costs, before any launch.

For verl and OpenRLHF (each in its own venv, scripts/backend_venv.sh): the wall time of
``unirl plan --validate`` from a cold process (what a user waits for), next to plain ``unirl plan``; and the cost per
plan when many plans share one backend interpreter (the fuzz test's batch). For NeMo RL and slime/vime (no package
to run), the key-schema check per plan.

    python benchmarks/validation.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine, save, summary, timed

REPO = Path(__file__).resolve().parents[1]
GPU = ["resources.gpus_per_node=8", "rollout.engine=vllm", "data.chat_template=true"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    unirl = [sys.executable, "-m", "unirl.cli.main"]
    env = {f"UNIRL_{b.upper()}_PYTHON": str(REPO / ".venvs" / b / "bin" / "python") for b in ("verl", "openrlhf")}
    results: dict[str, object] = {"machine": machine()}
    for backend in ("verl", "openrlhf"):
        plain = [timed([*unirl, "plan", f"+framework={backend}", *GPU], env=env)[0] for _ in range(args.repeats)]
        checked = [timed([*unirl, "plan", "--validate", f"+framework={backend}", *GPU], env=env)[0]
                   for _ in range(args.repeats)]
        results[backend] = {"plan_s": summary(plain), "plan_validate_s": summary(checked)}
        print(f"{backend}: plan {summary(plain)['median']:.2f} s, plan --validate {summary(checked)['median']:.2f} s")

    os.environ.update(env)
    from tests.test_translation_fuzz import accepted_plans
    from unirl.host.manager import get_host

    host = get_host()
    for backend in ("verl", "openrlhf", "nemo_rl", "slime", "vime"):
        framework = host.frameworks.get(backend)
        start = time.perf_counter()
        plans = accepted_plans(backend, 150)
        made = time.perf_counter() - start
        start = time.perf_counter()
        for plan in plans:
            framework.schema_problems(plan)
        schema = (time.perf_counter() - start) / max(1, len(plans))
        entry = {"draws": 150, "accepted": len(plans), "plan_and_schema_s_per_draw": made / 150,
                 "schema_check_ms_per_plan": schema * 1000}
        if framework.check_module:
            start = time.perf_counter()
            outcomes = framework.check_in_backend(plans)
            batch = time.perf_counter() - start
            entry.update(backend_check_batch_s=batch, backend_check_s_per_plan=batch / len(plans),
                         rejected_by_backend=sum(1 for o in outcomes if o["problems"]))
        results[f"batch_{backend}"] = entry
        print(backend, entry)
    save("validation", results)


if __name__ == "__main__":
    main()
