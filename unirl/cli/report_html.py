"""``unirl report RUN_DIR|MULTIRUN_DIR [-o FILE]``: one self-contained HTML file of a run or a sweep.

Self-contained: the pictures are data: URIs, the style is inline, there is one inline script (the page's own, pinned
by its hash in the Content-Security-Policy) and nothing is fetched from anywhere. The page is built by
:mod:`unirl.record.report`; a sweep's members are read by :mod:`unirl.launch.sweep`, as ``unirl compare`` reads them.
"""

from __future__ import annotations

import os
from pathlib import Path

from unirl.cli.args import EXIT_OK, verb_parser
from unirl.errors import UnirlError

REPORT = "report.html"


def cmd_report(args: list[str]) -> int:
    parser = verb_parser("report", "One self-contained HTML file (no external URLs) of a run: curves, summary, "
                                   "manifest, sampled trajectories with their scores; or of a sweep: its members "
                                   "side by side, one table per configuration.")
    parser.add_argument("target", metavar="RUN_DIR|MULTIRUN_DIR", type=Path)
    parser.add_argument("-o", "--output", metavar="FILE", type=Path,
                        help=f"where to write the page (default: {REPORT} in the directory)")
    ns = parser.parse_intermixed_args(args)
    from unirl.record.report import check_run_dir, hydra_members

    target: Path = ns.target
    if target.is_dir() and hydra_members(target):
        text = sweep_page(target)
    else:
        text = run_page(check_run_dir(target, "report"))
    out: Path = ns.output or target / REPORT
    if out.is_dir():
        raise UnirlError(f"-o {out}: a directory; name the file to write (e.g. {out / REPORT})")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UnirlError(f"cannot write {out}: {exc.strerror or exc}") from None
    from unirl.console import console

    console().print(f"report: {out} ({len(text.encode()) / 1024:.0f} KiB, self-contained)")
    return EXIT_OK


def run_page(run_dir: Path) -> str:
    from unirl.record.plot import render
    from unirl.record.report import run_report

    return run_report(run_dir, render(run_dir))


def sweep_page(sweep_dir: Path) -> str:
    import tempfile

    from unirl.launch.sweep import SMOOTHING, compare, configurations, plot_curves
    from unirl.record.report import multirun_report

    rows = compare(sweep_dir)
    with tempfile.TemporaryDirectory() as scratch:  # the sweep's own compare.png is `unirl compare`'s to write
        png = plot_curves(rows, Path(scratch) / "curves.png")
        curves = png.read_bytes() if png else None
    return multirun_report(sweep_dir, rows, configurations(rows), SMOOTHING, curves)
