"""curves.png: training reward and held-out accuracy against steps (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

from unirl.record.layout import CURVES, EVAL, METRICS, read_jsonl


def plot_run(run_dir: Path) -> Path | None:
    try:  # the object API with the Agg canvas: no pyplot, no GUI backend probing (about a second saved)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # the light core has no matplotlib; the trl extra brings it
        return None

    metrics = [m for m in read_jsonl(run_dir / METRICS) if m.get("reward/total/mean") is not None]
    evals = [e for e in read_jsonl(run_dir / EVAL) if e.get("kind") == "summary"]
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if metrics:
        steps = [m["step"] for m in metrics]
        rewards = [m["reward/total/mean"] for m in metrics]
        window = max(1, len(rewards) // 50)
        smooth = [sum(rewards[max(0, i - window + 1):i + 1]) / len(rewards[max(0, i - window + 1):i + 1])
                  for i in range(len(rewards))]
        ax.plot(steps, rewards, color="tab:blue", alpha=0.25, linewidth=0.8)
        ax.plot(steps, smooth, color="tab:blue", label=f"train reward (mean of {window} steps)")
    if evals:
        ax.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "o-", color="tab:red",
                label="held-out accuracy")
    ax.set_xlabel("training step")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(f"{run_dir.parent.name} / {run_dir.name}")
    fig.tight_layout()
    out = run_dir / CURVES
    fig.savefig(out, dpi=100)
    return out
