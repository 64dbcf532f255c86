"""A Hydra multirun directory as a whole: every member's outcome, and ``unirl compare`` over them.

Members are the numbered sub-directories Hydra makes (each has ``.hydra/``). A member that left no
``outcome.json`` died without reporting (a killed worker, a lost Slurm job): it is listed as failed, never dropped.

A member's final reward is smoothed (:data:`SMOOTHING`): one step's mean reward over a few dozen completions is
noisy, and the last step alone ranks configurations by luck. Members whose overrides differ only in ``seed`` are one
configuration; :func:`configurations` aggregates their completed members (mean, sample standard deviation, range).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from unirl.record.layout import EVAL, METRICS, SUMMARY, read_jsonl

OUTCOME = "outcome.json"
COMPARE_PNG = "compare.png"
FINAL_FRACTION = 10
"""The final reward is the mean over the last 1/FINAL_FRACTION of a member's logged steps."""
SMOOTHING = "mean total reward over the last 10% of logged steps (at least 1)"
SEED_PREFIXES = ("seed=", "+seed=", "++seed=")


def members(sweep_dir: Path) -> list[Path]:
    found = [p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()] if sweep_dir.is_dir() else []
    return sorted(found, key=lambda p: (len(p.name), p.name))


def member_outcomes(sweep_dir: Path) -> list[dict[str, Any]]:
    out = []
    for member in members(sweep_dir):
        path = member / OUTCOME
        if path.exists():
            out.append(json.loads(path.read_text()))
        else:
            out.append({"state": "failed", "run_dir": str(member),
                        "error": "no outcome recorded: the member's process died before reporting (see its log)"})
    return out


def overrides_of(member: Path) -> list[str]:
    path = member / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.load(path) if not str(o).startswith("hydra.")]


def final_window(n: int) -> int:
    """How many last steps the final reward averages: 10% of ``n`` rounded up, at least 1 (0 for no steps)."""
    return -(-n // FINAL_FRACTION) if n else 0


def smoothed_final(values: list[float]) -> float | None:
    """The mean of the last :func:`final_window` values (:data:`SMOOTHING`); None for no values."""
    window = final_window(len(values))
    return sum(values[-window:]) / window if window else None


def is_seed(override: str) -> bool:
    return override.startswith(SEED_PREFIXES)


def member_row(member: Path) -> dict[str, Any]:
    outcome = json.loads((member / OUTCOME).read_text()) if (member / OUTCOME).exists() else {}
    summary = json.loads((member / SUMMARY).read_text()) if (member / SUMMARY).exists() else {}
    metrics = read_jsonl(member / METRICS)
    rewards = [m["reward/total/mean"] for m in metrics if m.get("reward/total/mean") is not None]
    evals = [e for e in read_jsonl(member / EVAL) if e.get("kind", "summary") == "summary" and "accuracy" in e]
    framework = summary.get("framework") or outcome.get("framework")
    composed: Any = None
    if (member / ".hydra" / "config.yaml").exists():
        from omegaconf import OmegaConf

        composed = OmegaConf.load(member / ".hydra" / "config.yaml")  # a mapping: Hydra wrote it
    if framework is None and composed is not None:
        framework = composed.get("framework", {}).get("name")
    overrides = overrides_of(member)
    seed = summary.get("seed", outcome.get("seed"))
    if seed is None:
        named = [o.split("=", 1)[1] for o in overrides if is_seed(o)]
        seed = named[-1] if named else (composed.get("seed") if composed is not None else None)
    state = outcome.get("state") or ("failed" if not summary else summary.get("state", "?"))
    return {
        "member": member.name, "run_dir": str(member), "framework": framework, "overrides": overrides,
        "configuration": [o for o in overrides if not is_seed(o)], "seed": seed,
        "state": state, "error": outcome.get("error", "" if outcome else "no outcome recorded: the member's "
                                                                           "process died before reporting"),
        "final_reward": smoothed_final(rewards), "final_reward_steps": final_window(len(rewards)),
        "last_reward": rewards[-1] if rewards else None,
        "accuracy": summary.get("accuracy_after", evals[-1]["accuracy"] if evals else None),
        "wall_time_s": summary.get("wall_time_s"), "steps": len(rewards), "reward_curve": rewards,
    }


def compare(sweep_dir: Path, *more: Path) -> list[dict[str, Any]]:
    """Every member of ``sweep_dir`` (and of ``more`` sweeps: e.g. one experiment swept once per backend, each in its
    own interpreter); with several sweeps a member is named ``<sweep>/<member>``."""
    rows = []
    for directory in (sweep_dir, *more):
        found = [member_row(m) for m in members(directory)]
        if not found:
            raise FileNotFoundError(f"{directory} holds no Hydra multirun members (numbered folders with .hydra/)")
        for row in found:
            if more:
                row["member"] = f"{directory.name}/{row['member']}"
        rows += found
    return rows


def spread(values: list[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (n-1; None below two values), min, max and n of ``values``."""
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "n": len(values)}


def configurations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The members grouped by configuration (their overrides, ``seed`` aside, and framework), in sweep order.

    ``final_reward``, ``accuracy`` and ``steps`` aggregate the *completed* members (:func:`spread`); ``states``
    counts every member's state, so a failed seed shows as such instead of silently thinning the mean.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["framework"], *sorted(row["configuration"])), []).append(row)
    shared = set.intersection(*(set(r["configuration"]) for r in rows)) if rows else set()
    out = []
    for group in groups.values():
        done = [r for r in group if r["state"] == "completed"]
        states: dict[str, int] = {}
        for r in group:
            states[r["state"]] = states.get(r["state"], 0) + 1
        out.append({
            "framework": group[0]["framework"], "configuration": group[0]["configuration"],
            "differs": [o for o in group[0]["configuration"] if o not in shared],
            "members": [r["member"] for r in group], "seeds": [r["seed"] for r in group], "states": states,
            "final_reward": spread([r["final_reward"] for r in done if r["final_reward"] is not None]),
            "accuracy": spread([r["accuracy"] for r in done if r["accuracy"] is not None]),
            "steps": spread([float(r["steps"]) for r in done]),
        })
    return out


def label_of(config: dict[str, Any]) -> str:
    return f"{config['framework']} {' '.join(config['differs'])}".strip()


def plot_curves(rows: list[dict[str, Any]], out: Path, smooth: int = 20) -> Path | None:
    """``compare.png``: each configuration's smoothed reward curve; several seeds as their mean with a ±1 sd band."""
    if not any(r["reward_curve"] for r in rows):
        return None
    try:  # the object API on the Agg canvas: no pyplot, no GUI backend probing
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # the light core has no matplotlib; the trl extra brings it
        return None
    by_member = {r["member"]: r for r in rows}
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    window = 1
    for index, config in enumerate(configurations(rows)):
        curves = [by_member[m]["reward_curve"] for m in config["members"] if by_member[m]["reward_curve"]]
        if not curves:
            continue
        length = min(len(c) for c in curves)
        window = max(window, max(1, min(smooth, length // 5 or 1)))
        smoothed = [_trailing_mean(c[:length], max(1, min(smooth, length // 5 or 1))) for c in curves]
        steps = range(1, length + 1)
        color = f"C{index % 10}"
        label = label_of(config)[:70] or "every member"
        if len(smoothed) == 1:
            ax.plot(steps, smoothed[0], color=color, label=f"{label} (member {config['members'][0]})")
            continue
        mean = [sum(values) / len(values) for values in zip(*smoothed, strict=True)]
        sd = [math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
              for values, m in zip(zip(*smoothed, strict=True), mean, strict=True)]
        ax.plot(steps, mean, color=color, label=f"{label} (mean of {len(smoothed)} seeds, band ±1 sd)")
        ax.fill_between(steps, [m - s for m, s in zip(mean, sd, strict=True)],
                        [m + s for m, s in zip(mean, sd, strict=True)], color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(f"mean total reward (moving average of up to {window})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def _trailing_mean(values: list[float], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _aggregate(stats: dict[str, Any]) -> str:
    if not stats["n"]:
        return "-"
    if stats["std"] is None:
        return f"{stats['mean']:.3f} (n=1)"
    return f"{stats['mean']:.3f} ± {stats['std']:.3f} (n={stats['n']}; {stats['min']:.3f}..{stats['max']:.3f})"


def print_compare(rows: list[dict[str, Any]], png: Path | None, sweep_dir: Path | None = None) -> None:
    """The members' table; then, when some configuration ran several seeds, one row per configuration."""
    from rich.table import Table

    from unirl.console import console

    shared = set.intersection(*(set(r["overrides"]) for r in rows)) if rows else set()
    table = Table("member", "framework", "overrides (those that differ)", "final reward *", "held-out accuracy",
                  "steps", "wall s", "state")
    for r in rows:
        table.add_row(r["member"], str(r["framework"]), " ".join(o for o in r["overrides"] if o not in shared),
                      _number(r["final_reward"]), _number(r["accuracy"]), str(r["steps"]),
                      "-" if r["wall_time_s"] is None else f"{r['wall_time_s']:.1f}", r["state"])
    out = console()
    out.print(table)
    configs = configurations(rows)
    if any(len(c["members"]) > 1 for c in configs):
        by_config = Table("configuration (seed aside)", "members", "seeds", "final reward * (mean ± sd)",
                          "held-out accuracy (mean ± sd)", "states")
        for c in configs:
            by_config.add_row(label_of(c) or "(every member)", " ".join(c["members"]),
                              " ".join(str(s) for s in c["seeds"]), _aggregate(c["final_reward"]),
                              _aggregate(c["accuracy"]), ", ".join(f"{k} {v}" for k, v in c["states"].items()))
        out.print(by_config)
        out.print("mean ± sd: over each configuration's completed members (sample standard deviation, n-1)")
    out.print(f"* final reward: {SMOOTHING}, not the last step alone")
    if shared:
        out.print(f"every member: {' '.join(sorted(shared))}")
    for r in rows:
        if r["state"] != "completed":
            out.print(f"member {r['member']} {r['state']}: {r['error'] or 'see ' + r['run_dir']}")
    if png:
        out.print(f"reward curves: {png}")
    if sweep_dir is not None:
        out.print(f"multirun directory: {sweep_dir}")
