"""What unirl prints: run summaries, plans, and the plugin/framework/reward listings."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from unirl.backend.plan import LaunchPlan
from unirl.console import console
from unirl.record.layout import METRICS, read_jsonl

SPARK = "▁▂▃▄▅▆▇█"


def reward_curve(run_dir: Path, buckets: int = 10) -> list[float]:
    """Mean total reward over ``buckets`` equal slices of the run's steps."""
    rewards = [m["reward/total/mean"] for m in read_jsonl(run_dir / METRICS) if m.get("reward/total/mean") is not None]
    if not rewards:
        return []
    size = max(1, len(rewards) // buckets)
    return [sum(chunk) / len(chunk) for chunk in (rewards[i:i + size] for i in range(0, len(rewards), size))][:buckets]


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in values)


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    out = console()
    wall = summary.get("wall_time_s")
    out.print(f"unirl: {summary.get('framework', '?')} run {summary.get('state')}"
              + (f" in {wall:.1f} s" if wall is not None else "")
              + (f" (training {summary['train_time_s']:.1f} s)" if summary.get("train_time_s") else ""), style="bold")
    if "accuracy_after" in summary:
        before = summary.get("accuracy_before")
        shown = "n/a" if before is None else f"{before:.3f}"
        out.print(f"  held-out accuracy ({summary.get('eval_n')} prompts, greedy): {shown} -> "
                      f"{summary['accuracy_after']:.3f}  ({summary.get('distinct_completions')} distinct answers)")
    kept = summary.get("kept_best")
    if kept:
        again = "fresh episodes" if kept.get("fresh_seeds") else "the same held-out prompts that chose them"
        chosen = kept.get("accuracy_when_chosen")
        out.print(f"  kept the weights of step {kept.get('step')} (eval.keep_best: {chosen:.3f} when chosen; the "
                  f"accuracy above is on {again}), saved to {run_dir / 'best'}")
    stopped = summary.get("stopped_early")
    if stopped:
        out.print(f"  stopped early at step {stopped.get('step')} of {summary.get('steps_expected')}: "
                  f"{stopped.get('reason')}")
    curve = reward_curve(run_dir)
    if curve:
        out.print(f"  reward by tenth of training: {' '.join(f'{v:.2f}' for v in curve)}  {sparkline(curve)}")
    if summary.get("reward_errors"):
        by_kind = ", ".join(f"{k} {v}" for k, v in sorted((summary.get("reward_errors_by_kind") or {}).items()))
        out.print(f"  reward errors: {summary['reward_errors']} of {summary.get('reward_calls')} calls"
                  + (f" ({by_kind})" if by_kind else ""), style="yellow")
        print_first_reward_failure(summary.get("first_reward_error") or first_reward_failure(run_dir), out)
    out.print(f"  run directory: {run_dir}")


def first_reward_failure(run_dir: Path) -> dict[str, str] | None:
    """The first failed reward call in the run's trajectory log (native backends record failures only there)."""
    from unirl.record.trajectory_log import existing

    path = existing(run_dir)
    if path is None:
        return None
    for record in read_jsonl(path):
        for name, message in (record.get("errors") or {}).items():
            return {"reward": name, "kind": (record.get("error_kinds") or {}).get(name, "?"), "message": message}
    return None


def print_first_reward_failure(failure: dict[str, str] | None, out: Any = None) -> None:
    """The first failure's reward, kind and the tail of its traceback: what to fix, without opening a 20 MB log."""
    if not failure:
        return
    out = out or console(stderr=True)
    lines = str(failure.get("message", "")).strip().splitlines()
    out.print(f"  first failure: reward {failure.get('reward')!r} ({failure.get('kind')}):", style="yellow")
    for line in lines[-8:]:
        out.print(f"    {line}")


# Native-config entries already shown as the command line or the mapping table.
SHOWN_ABOVE = ("trainer_config", "overrides", "flags", "args")


def print_plan(plan: LaunchPlan, validated: bool) -> None:
    from rich.table import Table

    out = console()
    version = plan.framework_version or f"not installed here; translated for {plan.target_version or '?'}"
    from rich.text import Text

    title = Text.assemble((plan.framework, "bold"), f" ({version})")
    if validated:
        title.append("  validated against the backend's own schema", style="green")
    out.print(title)
    env = plan.environment
    where = {"in_process": "in unirl's process", "interpreter": f"interpreter {env.python}",
             "image": f"{env.container_runtime} image {env.image} ({env.python})"}[env.kind]
    out.print(f"runs in: {where}; expects {env.nodes} node(s) x {env.gpus_per_node} GPU(s)")
    for auto in plan.auto:  # what this backend made of the fields left at auto: before the command they shape
        out.print(f"auto: {auto.text()}", markup=False, highlight=False)
    out.print("command: " + " ".join(plan.command), markup=False, soft_wrap=True)
    table = Table("recipe field", "native key", "value", "note", show_lines=False)
    resolved = {a.field for a in plan.auto}
    for row in plan.mapping:
        note = f"(auto) {row.note}" if row.recipe_field in resolved else row.note
        table.add_row(row.recipe_field, row.native_key, json.dumps(row.value, default=str), note)
    out.print(table)
    for key, value in plan.native_config.items():
        if key not in SHOWN_ABOVE:  # the rest of the native config (TRL's reward functions, model, data)
            out.print(f"{key}: {json.dumps(value, default=str)}")
    for key, value in sorted(plan.env.items()):
        out.print(f"env: {key}={value}")
    for export in plan.data:
        rows = f"{export.rows} rows" if export.rows is not None else "every row"
        out.print(f"data: {export.split} <- {export.source} as {export.format} ({rows}) -> {export.path}")
    for path, content in sorted(plan.files.items()):
        shown = content if content.startswith("<") else f"{len(content.splitlines())} lines"
        out.print(f"file: {path}: {shown}")
    if plan.environment.light_core:
        out.print(f"staged on the backend's PYTHONPATH: {', '.join(plan.environment.light_core)}")
    for note in plan.notes:
        out.print(f"note: {note}")


def print_plugins(host: Any, as_json: bool) -> None:
    infos = host.plugins()
    if as_json:
        print(json.dumps([asdict(i) for i in infos] + [{"name": b, "blocked": True} for b in host.blocked()], indent=2))
        return
    from rich.table import Table

    table = Table("plugin", "package", "version", "hooks")
    for info in infos:
        table.add_row(info.name, info.distribution, info.version, ", ".join(info.hooks))
    for name in host.blocked():
        table.add_row(name, "(blocked)", "", "")
    console().print(table)


def gpu_cell(row: dict[str, Any]) -> str:
    """The frameworks table's GPU column: whether the backend needs one, and its CPU mode where it has one."""
    if not row["needs_gpu"]:
        return "optional (runs on CPU)"
    return "needs one, or resources.device=cpu (its CPU mode)" if row.get("cpu_mode") else "needs one"


def print_frameworks(host: Any, as_json: bool) -> None:
    """The capability matrix, from each plugin's own declaration, and what is installed where unirl looks."""
    rows = []
    engines = [host.rollout_engines.get(name) for name in host.rollout_engines.names()]
    for entry in host.frameworks:
        fw = host.frameworks.get(entry.name)
        # the registry's episode loops for this backend: which engine runs environments here, and what is lost
        environments = [{"engine": e.name, "loop": e.episodes[fw.name], "loses": e.episodes_lose.get(fw.name, "")}
                        for e in engines if fw.name in e.episodes]
        rows.append({"name": fw.name, "installed": fw.installed_version(), "plugin": entry.source,
                     "description": fw.description, **asdict(fw.capabilities), "environments": environments})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("framework", "installed (tested)", "placement", "sync / async", "training backends", "rollout",
                  "multi-node", "algorithms", "custom reward", "environments (engine: what is lost)", "GPU",
                  show_lines=True)
    for r in rows:
        tested = f" ({r['tested_version']})" if r["tested_version"] else ""
        table.add_row(r["name"], f"{r['installed'] or 'no'}{tested}", "\n".join(r["placement"]), "\n".join(r["modes"]),
                      "\n".join(r["training_backends"]), ", ".join(r["rollout_engines"]), r["multi_node"],
                      f"{', '.join(r['native_algorithms'])}\n(unirl maps: {', '.join(r['algorithms'])})",
                      r["custom_reward"],
                      "\n".join(f"{e['engine']}: {e['loses'] or 'nothing'}" for e in r["environments"]) or "none",
                      gpu_cell(r))
    console().print(table)
    console().print("installed: looked up in framework.python's interpreter, else $UNIRL_<NAME>_PYTHON, else "
                    "unirl's own",
                    markup=False)


def print_rewards(host: Any, as_json: bool) -> None:
    rows = []
    for entry in host.rewards:
        fn = host.rewards.get(entry.name)
        dist, version = host.distributions.get(entry.source, ("local", "-"))
        rows.append({"name": entry.name, "plugin": entry.source, "distribution": dist, "version": version,
                     "module": fn.module, "kind": fn.kind, "components": list(fn.components),
                     "description": fn.description})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("reward", "source (plugin, package version)", "module", "kind", "components", "description")
    for r in rows:
        table.add_row(r["name"], f"{r['plugin']} ({r['distribution']} {r['version']})", r["module"], r["kind"],
                      ", ".join(r["components"]), r["description"])
    console().print(table)


def print_environments(host: Any, as_json: bool) -> None:
    rows = []
    for entry in host.environments:
        spec = host.environments.get(entry.name)
        dist, version = host.distributions.get(entry.source, ("local", "-"))
        rows.append({"name": entry.name, "plugin": entry.source, "distribution": dist, "version": version,
                     "class": spec.ref, "max_turns": spec.cls.max_turns, "tools": sorted(spec.tools),
                     "metrics": list(spec.metrics), "description": spec.description})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("environment", "source (plugin, package version)", "class", "max turns", "tools", "metrics",
                  "description")
    for r in rows:
        table.add_row(r["name"], f"{r['plugin']} ({r['distribution']} {r['version']})", r["class"],
                      str(r["max_turns"]), ", ".join(r["tools"]), ", ".join(r["metrics"]), r["description"])
    console().print(table)
