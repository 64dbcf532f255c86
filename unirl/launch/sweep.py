"""A Hydra multirun directory as a whole: every member's outcome, and ``unirl compare`` over them.

Members are the numbered sub-directories Hydra makes (each has ``.hydra/``). A member that left no
``outcome.json`` died without reporting (a killed worker, a lost Slurm job): it is listed as failed, never dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unirl.record.layout import EVAL, METRICS, SUMMARY, read_jsonl

OUTCOME = "outcome.json"


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


def member_row(member: Path) -> dict[str, Any]:
    outcome = json.loads((member / OUTCOME).read_text()) if (member / OUTCOME).exists() else {}
    summary = json.loads((member / SUMMARY).read_text()) if (member / SUMMARY).exists() else {}
    metrics = read_jsonl(member / METRICS)
    rewards = [m["reward/total/mean"] for m in metrics if m.get("reward/total/mean") is not None]
    evals = [e for e in read_jsonl(member / EVAL) if e.get("kind", "summary") == "summary" and "accuracy" in e]
    framework = summary.get("framework") or outcome.get("framework")
    if framework is None and (member / ".hydra" / "config.yaml").exists():
        from omegaconf import OmegaConf

        composed: Any = OmegaConf.load(member / ".hydra" / "config.yaml")  # a mapping: Hydra wrote it
        framework = composed.get("framework", {}).get("name")
    state = outcome.get("state") or ("failed" if not summary else summary.get("state", "?"))
    return {
        "member": member.name, "run_dir": str(member), "framework": framework, "overrides": overrides_of(member),
        "state": state, "error": outcome.get("error", "" if outcome else "no outcome recorded: the member's "
                                                                           "process died before reporting"),
        "final_reward": rewards[-1] if rewards else None,
        "accuracy": summary.get("accuracy_after", evals[-1]["accuracy"] if evals else None),
        "wall_time_s": summary.get("wall_time_s"), "steps": len(rewards), "reward_curve": rewards,
    }


def compare(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = [member_row(m) for m in members(sweep_dir)]
    if not rows:
        raise FileNotFoundError(f"{sweep_dir} holds no Hydra multirun members (numbered folders with .hydra/)")
    return rows


def plot_curves(rows: list[dict[str, Any]], out: Path, smooth: int = 20) -> Path | None:
    curves = [r for r in rows if r["reward_curve"]]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for row in curves:
        values = row["reward_curve"]
        window = max(1, min(smooth, len(values) // 5 or 1))
        smoothed = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
                    for i in range(len(values))]
        label = f"{row['member']}: {row['framework']} {' '.join(row['overrides'])}"[:80]
        ax.plot(range(1, len(values) + 1), smoothed, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(f"mean total reward (moving average of {smooth})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def print_compare(rows: list[dict[str, Any]], png: Path | None) -> None:
    from rich.table import Table

    from unirl.console import console

    shared = set.intersection(*(set(r["overrides"]) for r in rows)) if rows else set()
    table = Table("member", "framework", "overrides (those that differ)", "final reward", "held-out accuracy", "wall s",
                  "state")
    for r in rows:
        table.add_row(r["member"], str(r["framework"]), " ".join(o for o in r["overrides"] if o not in shared),
                      "-" if r["final_reward"] is None else f"{r['final_reward']:.3f}",
                      "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}",
                      "-" if r["wall_time_s"] is None else f"{r['wall_time_s']:.1f}", r["state"])
    out = console()
    out.print(table)
    if shared:
        out.print(f"every member: {' '.join(sorted(shared))}")
    for r in rows:
        if r["state"] != "completed":
            out.print(f"member {r['member']} {r['state']}: {r['error'] or 'see ' + r['run_dir']}")
    if png:
        out.print(f"reward curves: {png}")
