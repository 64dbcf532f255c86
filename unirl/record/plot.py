"""curves.png: a run's training signals as small multiples (matplotlib's object API on the Agg canvas, headless).

One panel each: the mean reward by component (every ``reward/<name>/mean`` the run logged, and the weighted total),
held-out accuracy, KL, entropy, completion length, clip ratio, gradient norm and learning rate. Each series is drawn
raw (faint) and as a trailing moving average. A panel whose metric the run never logged says so in words instead of
drawing empty axes (TRL logs no KL when ``algorithm.kl_coef=0``; a run without held-out data has no accuracy).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirl.record.layout import CURVES, EVAL, METRICS, read_jsonl

REWARD_TOTAL = "reward/total/mean"
NOT_REWARD_NAMES = ("total", "errors")
"""``reward/<name>/mean`` keys that are not one reward's mean (``reward/errors`` counts failures per step)."""


@dataclass(frozen=True)
class Panel:
    title: str
    keys: tuple[str, ...]
    """Metric keys tried in order: the first one the run logged is drawn."""
    unit: str = ""
    absent: str = ""
    """Why a run may not have logged it, shown in the empty panel."""


PANELS = (
    # TRL 1.16 logs "kl" only when beta != 0 (trl/trainer/grpo_trainer.py:3267-3268, `if self.beta != 0.0`).
    Panel("KL to the reference", ("kl",), absent="none with algorithm.kl_coef=0"),
    Panel("entropy", ("entropy",), "nats per token"),
    Panel("completion length", ("completion_len/mean",), "tokens"),
    Panel("clip ratio", ("clip_ratio",), "fraction of tokens"),
    Panel("gradient norm", ("grad_norm",)),
    Panel("learning rate", ("lr",)),
)
COLUMNS = 4


def reward_keys(metrics: Sequence[dict[str, Any]]) -> list[str]:
    """Every ``reward/<name>/mean`` the run logged, in first-seen order, the total last."""
    found: dict[str, None] = {}
    for row in metrics:
        for key in row:
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "reward" and parts[2] == "mean" and parts[1] not in NOT_REWARD_NAMES:
                found.setdefault(key, None)
    return [*found, *([REWARD_TOTAL] if any(REWARD_TOTAL in row for row in metrics) else [])]


def series(metrics: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric; rows without it, or with a non-finite value, are skipped."""
    steps: list[float] = []
    values: list[float] = []
    for position, row in enumerate(metrics, 1):
        value = row.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value and abs(value) != float(
                "inf"):
            step = row.get("step")
            steps.append(float(step) if isinstance(step, int | float) else float(position))
            values.append(float(value))
    return steps, values


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The trailing mean of the last ``window`` values at each point (fewer at the start)."""
    out: list[float] = []
    running = 0.0
    for i, value in enumerate(values):
        running += value
        if i >= window:
            running -= values[i - window]
        out.append(running / min(i + 1, window))
    return out


def smoothing_window(n: int) -> int:
    """About 2% of the points, at least 1: a visible trend without hiding the last steps."""
    return max(1, n // 50)


def render(run_dir: Path, title: str | None = None) -> bytes | None:
    """curves.png's bytes for ``run_dir`` (None without matplotlib, which the light core does not install)."""
    fig = figure(run_dir, title)
    if fig is None:
        return None
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def figure(run_dir: Path, title: str | None = None) -> Any:
    """The small multiples as a matplotlib ``Figure`` on the Agg canvas; None without matplotlib."""
    try:  # the object API with the Agg canvas: no pyplot, no GUI backend probing (about a second saved)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # the light core has no matplotlib; the trl extra brings it
        return None

    metrics = read_jsonl(run_dir / METRICS)
    evals = [e for e in read_jsonl(run_dir / EVAL) if e.get("kind", "summary") == "summary" and "accuracy" in e]
    rows = -(-(2 + len(PANELS)) // COLUMNS)
    fig = Figure(figsize=(3.2 * COLUMNS, 2.6 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, COLUMNS, squeeze=False).ravel()
    _reward_panel(axes[0], metrics)
    _accuracy_panel(axes[1], evals)
    for ax, panel in zip(axes[2:], PANELS, strict=False):
        _metric_panel(ax, metrics, panel)
    for ax in axes[2 + len(PANELS):]:
        ax.set_axis_off()
    fig.suptitle(title or f"{run_dir.parent.name} / {run_dir.name}", fontsize=10)
    fig.subplots_adjust(left=0.06, right=0.985, bottom=0.08, top=0.88, wspace=0.32, hspace=0.55)
    return fig


def plot_run(run_dir: Path, out: Path | None = None) -> Path | None:
    """Write the run's curves (``run_dir/curves.png`` unless ``out``); None without matplotlib."""
    data = render(run_dir)
    if data is None:
        return None
    out = out or run_dir / CURVES
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)  # a reader (``unirl report`` on a live run) never sees half a picture
    return out


def _no_data(ax: Any, title: str, why: str) -> None:
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=8, color="0.45", wrap=True, transform=ax.transAxes)


def _style(ax: Any, title: str, unit: str = "") -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=7)
    if unit:
        ax.set_ylabel(unit, fontsize=7)
    ax.tick_params(labelsize=7)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useOffset=False)  # 1e-4, not 0 + 1e-4
    ax.grid(alpha=0.3)


def _draw(ax: Any, steps: list[float], values: list[float], label: str | None, color: Any) -> None:
    window = smoothing_window(len(values))
    if window > 1:
        ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.7)
    ax.plot(steps, moving_average(values, window), color=color, linewidth=1.3, label=label,
            marker="." if len(values) <= 30 else None, markersize=3)
    low, high = min(values), max(values)
    if high - low <= 1e-9 * max(1.0, abs(high)):  # constant (a fixed learning rate): matplotlib would zoom into
        pad = abs(high) * 0.5 or 1.0              # float noise around it
        ax.set_ylim(min(ax.get_ylim()[0], low - pad), max(ax.get_ylim()[1], high + pad))


def _reward_panel(ax: Any, metrics: Sequence[dict[str, Any]]) -> None:
    keys = reward_keys(metrics)
    drawn = False
    for index, key in enumerate(keys):
        steps, values = series(metrics, key)
        if not values:
            continue
        total = key == REWARD_TOTAL
        _draw(ax, steps, values, "total (weighted)" if total else key.split("/")[1],
              "black" if total else f"C{index % 10}")
        drawn = True
    if not drawn:
        _no_data(ax, "reward by component", "no reward logged (metrics.jsonl is empty or missing)")
        return
    n = max(len(series(metrics, k)[1]) for k in keys)
    window = smoothing_window(n)
    _style(ax, "reward by component" + (f" (moving avg {window})" if window > 1 else ""), "mean per step")
    ax.legend(fontsize=6, loc="best")


def _accuracy_panel(ax: Any, evals: Sequence[dict[str, Any]]) -> None:
    steps, values = series(evals, "accuracy")
    if not values:
        _no_data(ax, "held-out accuracy", "no held-out evaluation\n(data.eval unset or eval not run)")
        return
    ax.plot(steps, values, "o-", color="tab:red", markersize=3, linewidth=1.2)
    ax.set_ylim(-0.03, 1.03)
    _style(ax, "held-out accuracy", "fraction solved")


def _metric_panel(ax: Any, metrics: Sequence[dict[str, Any]], panel: Panel) -> None:
    for key in panel.keys:
        steps, values = series(metrics, key)
        if values:
            _draw(ax, steps, values, None, "tab:blue")
            _style(ax, panel.title, panel.unit)
            return
    _no_data(ax, panel.title, f"not logged by this run ({' / '.join(panel.keys)})"
             + (f"\n{panel.absent}" if panel.absent else ""))


class CurvesPlotter:
    """curves.png drawn by a child process started when the run starts: importing matplotlib (about a second) then
    happens beside training (TRL trains on one thread, so a second core is idle) instead of after it, and the end of
    the run waits only for the drawing. Where matplotlib is imported in this process already, or the child cannot
    start or fails, the curves are drawn here (:func:`plot_run`)."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self.child: Any = None
        if "matplotlib.figure" in sys.modules:
            return  # drawing here costs only the drawing
        try:
            self.child = subprocess.Popen([sys.executable, "-m", "unirl.record.plot"], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.child = None

    def draw(self, run_dir: Path, timeout_s: float = 120.0) -> Path | None:
        """Draw ``run_dir``'s curves (in the child when it is ready, else here); the path, or None without
        matplotlib."""
        import subprocess

        child, self.child = self.child, None
        if child is not None:
            try:
                child.communicate(f"{run_dir}\n", timeout=timeout_s)
                if child.returncode == 0 and (run_dir / CURVES).exists():
                    return run_dir / CURVES
            except (OSError, subprocess.TimeoutExpired):
                child.kill()
                child.wait()
        return plot_run(run_dir)

    def close(self) -> None:
        """No curves after all (the run failed): the child ends without drawing."""
        import subprocess

        child, self.child = self.child, None
        if child is not None:
            try:
                child.communicate("", timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                child.kill()
                child.wait()


def _child() -> int:
    """``python -m unirl.record.plot``: import matplotlib, then draw the run directory read from stdin (none: exit)."""
    import sys

    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        return 3
    line = sys.stdin.readline().strip()
    if not line:
        return 0
    return 0 if plot_run(Path(line)) is not None else 3


if __name__ == "__main__":
    raise SystemExit(_child())
