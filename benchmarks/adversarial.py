"""The adversarial corpus, area by area: how many attacks were tried, contained and not contained.

Usage: python benchmarks/adversarial.py [AREA ...]   (default: every area; writes benchmarks/results/adversarial.json)

The same cases run under pytest (tests/test_adversarial.py); this prints the table the README shows and the
attacks that got through, with what went wrong.
"""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import machine, save

from tests.adversarial import AREAS, load_areas


def main(argv: list[str]) -> int:
    names = tuple(argv) or AREAS
    rows, failures = [], []
    for area, (title, cases) in load_areas(names).items():
        contained, start = 0, time.perf_counter()
        for case in cases:
            with tempfile.TemporaryDirectory(prefix="unirl-adversarial-") as tmp:
                try:
                    case.check(Path(tmp))
                    contained += 1
                except Exception as exc:  # an attack that got through, or a harness error: both are reported
                    failures.append({"area": area, "case": case.name, "error": "".join(
                        traceback.format_exception_only(type(exc), exc)).strip()})
        rows.append({"area": area, "title": title, "tried": len(cases), "contained": contained,
                     "failed": len(cases) - contained, "seconds": round(time.perf_counter() - start, 1)})
    print(f"{'area':<40} {'tried':>6} {'contained':>10} {'failed':>7} {'seconds':>8}")
    for r in rows:
        print(f"{r['title']:<40} {r['tried']:>6} {r['contained']:>10} {r['failed']:>7} {r['seconds']:>8}")
    for f in failures:
        print(f"NOT CONTAINED [{f['area']}] {f['case']}: {f['error']}")
    save("adversarial", {"machine": machine(), "areas": rows, "failures": failures})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
