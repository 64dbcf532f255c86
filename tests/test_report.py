"""`unirl report RUN_DIR|MULTIRUN_DIR [-o FILE]`: one self-contained HTML file (no external URLs: pictures as data:
URIs, inline style, no script but the page's own) of a run (curves, summary, manifest, sampled trajectories with
their scores) or of a sweep (a table per configuration); model output is escaped and cannot run as script.

The `browser` tests open the page in a real headless Chromium (Debian's package; scripts/system_packages.sh
installs it) with name resolution switched off, and read what it decoded and rendered back from its DOM and a
screenshot.
"""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import missing, require_module
from tests.test_compare import make_sweep
from tests.test_show import make_run

PAYLOAD = ("<script>document.body.setAttribute('data-pwned', 'script')</script>"
           "<img src=x onerror=\"document.body.setAttribute('data-pwned', 'img')\">\x1b[31m")


class Resources(HTMLParser):
    """Every URL-bearing attribute and every script element of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts = 0
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.scripts += tag == "script"
        for name, value in attrs:
            if name in ("src", "href", "action", "srcset", "poster", "data", "formaction") and value is not None:
                self.urls.append(value)
                if tag == "img" and name == "src":
                    self.images.append(value)


def resources(text: str) -> Resources:
    parser = Resources()
    parser.feed(text)
    return parser


def png_size(data_uri: str) -> tuple[int, int]:
    png = base64.b64decode(data_uri.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR: the first chunk (PNG spec, 11.2.2)
    return width, height


def report(*args: str) -> str:
    out = run_cli("report", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_run_report_is_one_self_contained_file_with_the_runs_record(isolated: Path) -> None:
    require_module("matplotlib", "pip install -e '.[trl]'")
    run_dir = make_run(isolated, hostile=PAYLOAD)
    printed = report(str(run_dir))
    page = (run_dir / "report.html").read_text()
    assert f"report: {run_dir / 'report.html'}" in printed
    found = resources(page)
    assert found.urls and all(u.startswith("data:image/png;base64,") for u in found.urls)  # nothing fetched
    assert not re.search(r"(?i)\b(?:https?|ftp|file):|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", page)
    assert found.scripts == 1  # the page's own; the payload's <script> is text
    assert "default-src 'none'" in page and "script-src 'sha256-" in page  # and could not run if it were not
    assert png_size(found.images[0]) == (1152, 468)  # the small-multiples curves (4 x 2 panels at 90 dpi)
    assert '<table id="summary">' in page and "accuracy_after" in page and '<table id="evals">' in page
    assert '<details id="manifest">' in page and "recipe=grpo_math" in page
    assert "step 1: 2 of 2 prompts, 6 of 6 completions" in page and "step 3: 2 of 2 prompts" in page
    assert "failed reward calls: 1 of 1" in page and "brevity (exception): ValueError: brevity blew up" in page
    assert "&lt;script&gt;document.body.setAttribute(&#x27;data-pwned&#x27;" in page
    assert "<img src=x" not in page and "\x1b" not in page and "\\x1b[31m" in page


def test_a_sweep_report_puts_each_configurations_members_side_by_side(isolated: Path) -> None:
    require_module("matplotlib", "pip install -e '.[trl]'")
    sweep = make_sweep(isolated, seeds=(0, 1), failed=("3",))
    out_file = isolated / "sweep.html"
    report(str(sweep), "-o", str(out_file))
    page = out_file.read_text()
    assert not (sweep / "report.html").exists() and not (sweep / "compare.png").exists()  # -o; compare's file alone
    assert all(u.startswith("data:image/png;base64,") for u in resources(page).urls)
    assert "sweep of 4 members, 2 configurations" in page
    assert page.count('<table class="configuration">') == 2 and page.count('<tr class="member">') == 4
    assert "Configuration 1: trl algorithm.lr=0.0001" in page and "Configuration 2: trl algorithm.lr=0.0003" in page
    assert "completed 1, failed 1" in page and "member 3 failed: <span class=\"error\">RuntimeError" in page
    assert "mean total reward over the last 10% of logged steps (at least 1)" in page


def test_curves_are_small_multiples_and_a_panel_without_data_says_so(isolated: Path) -> None:
    require_module("matplotlib", "pip install -e '.[trl]'")
    from unirl.record.plot import figure

    run_dir = make_run(isolated, plot=True)  # a completed run's end writes curves.png (unirl/record/recorder.py)
    with (run_dir / "curves.png").open("rb") as f:
        assert struct.unpack(">II", f.read(24)[16:24]) == (1152, 468)
    panels = {ax.get_title(): ax for ax in figure(run_dir).axes}
    assert list(panels) == ["reward by component", "held-out accuracy", "KL to the reference", "entropy",
                            "completion length", "clip ratio", "gradient norm", "learning rate"]
    legend = [t.get_text() for t in panels["reward by component"].get_legend().get_texts()]
    assert legend == ["math_answer", "brevity", "total (weighted)"]  # every reward/<name>/mean, then the total
    for title in ("entropy", "gradient norm", "held-out accuracy"):
        assert panels[title].axison and panels[title].lines  # drawn
    kl = panels["KL to the reference"]  # make_run logs no "kl", as TRL with algorithm.kl_coef=0
    assert not kl.axison and not kl.lines
    assert [t.get_text() for t in kl.texts] == ["not logged by this run (kl)\nnone with algorithm.kl_coef=0"]
    (run_dir / "eval.jsonl").unlink()
    accuracy = {ax.get_title(): ax for ax in figure(run_dir).axes}["held-out accuracy"]
    assert not accuracy.axison and "no held-out evaluation" in accuracy.texts[0].get_text()


@pytest.mark.parametrize("case", ["missing", "not_a_run", "output_is_a_directory"])
def test_what_cannot_be_reported_is_refused_clearly(isolated: Path, case: str) -> None:
    run_dir = make_run(isolated)
    (isolated / "empty").mkdir()
    args, message = {
        "missing": ([str(isolated / "nope")], "nope: no such directory"),
        "not_a_run": ([str(isolated / "empty")], "not a run directory"),
        "output_is_a_directory": ([str(run_dir), "-o", str(isolated)], "a directory; name the file to write"),
    }[case]
    out = run_cli("report", *args)
    assert out.returncode == 2 and message in out.stderr


def test_a_run_without_metrics_or_trajectories_says_so(isolated: Path) -> None:
    run_dir = isolated / "killed"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text('{"framework": "trl"}')
    report(str(run_dir))
    page = (run_dir / "report.html").read_text()
    assert "no summary: running, or killed before it ended" in page and "no trajectories recorded" in page


# --- in a real browser -------------------------------------------------------------------------------------------


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        missing("chromium is not installed: scripts/system_packages.sh installs Debian's chromium")
    return found


def browse(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Chromium, headless, on ``page``: no sandbox (root in containers), no GPU, and every host name unresolvable,
    so a page that needed the network would render broken here."""
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}", *flags, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=180)


def screenshot_pixels(page: Path, profile: Path, out: Path) -> object:
    shot = browse(page, profile, f"--screenshot={out}", "--window-size=1280,1600", "--hide-scrollbars")
    assert shot.returncode == 0 and out.exists(), shot.stderr[-2000:]
    image = require_module("PIL.Image", "pip install -e '.[trl]' (matplotlib brings Pillow)")
    return image.open(out).convert("L")  # type: ignore[attr-defined]


@pytest.mark.browser
def test_the_run_report_renders_in_a_real_browser_and_the_payload_stays_text(isolated: Path) -> None:
    require_module("matplotlib", "pip install -e '.[trl]'")
    chromium()
    run_dir = make_run(isolated, hostile=PAYLOAD)
    report(str(run_dir))
    page = run_dir / "report.html"
    dom = browse(page, isolated / "profile", "--dump-dom", "--virtual-time-budget=5000")
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body is not None and 'data-ready="yes"' in body.group(0)  # the page's own script ran
    # The curves decoded: the page's script wrote the width the browser decoded into the image element.
    assert re.search(r'<img class="curves" data-check="" alt="training curves" [^>]*data-natural-width="1152"',
                     dom.stdout)
    assert '<p class="missing">this picture could not be decoded' not in dom.stdout
    assert "data-pwned" not in body.group(0)  # neither the payload's <script> nor its onerror ran
    assert "&lt;script&gt;document.body.setAttribute" in dom.stdout  # it is text in the table
    rows = re.findall(r'<tr class="(ok|failed)">', dom.stdout)
    assert len(rows) == 6 + 6 + 1  # steps 1 and 3 (2 prompts x 3 completions), and step 2's one failed call
    assert rows.count("failed") == 1
    # Escaping alone holds: without the Content-Security-Policy the payload is still inert text.
    bare = isolated / "no-csp.html"
    bare.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text()))
    unguarded = browse(bare, isolated / "profile", "--dump-dom", "--virtual-time-budget=5000")
    unguarded_body = re.search(r"<body[^>]*>", unguarded.stdout)
    assert unguarded_body is not None and "data-pwned" not in unguarded_body.group(0)
    pixels = screenshot_pixels(page, isolated / "profile", isolated / "run.png")
    histogram = pixels.histogram()  # type: ignore[attr-defined]
    total = sum(histogram)
    assert histogram[255] < 0.97 * total  # not a blank page: text, tables and the curves are drawn
    assert sum(histogram[:128]) > 0.005 * total  # dark ink (text, axes), not a uniform tint
    from PIL import ImageStat

    assert ImageStat.Stat(pixels).var[0] > 100  # pixel variance of the grey levels


@pytest.mark.browser
def test_the_sweep_report_renders_its_tables_in_a_real_browser(isolated: Path) -> None:
    require_module("matplotlib", "pip install -e '.[trl]'")
    chromium()
    sweep = make_sweep(isolated, seeds=(0, 1))
    report(str(sweep))
    page = sweep / "report.html"
    dom = browse(page, isolated / "profile", "--dump-dom", "--virtual-time-budget=5000")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert re.search(r'data-natural-width="[1-9][0-9]*"', dom.stdout)
    assert dom.stdout.count('<tr class="member">') == 4 and dom.stdout.count('<tr class="aggregate">') == 2
    pixels = screenshot_pixels(page, isolated / "profile", isolated / "sweep.png")
    from PIL import ImageStat

    assert ImageStat.Stat(pixels).var[0] > 100
