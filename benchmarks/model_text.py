"""How long unirl's parsers of model text take on the worst inputs a policy can write, up to the context length.

    python benchmarks/model_text.py        (writes benchmarks/results/model_text.json)

Every parser of tests/adversarial/model_text.py on every hostile family there, at 1k, 4k, 16k, 64k and 128k
characters (128k is about 32k tokens); per parser, the family whose 128k input took longest, with its time at each
size (the best of 3). Beside it, the tool-call pattern unirl used before (``<tool_call>\\s*(.*?)\\s*</tool_call>``,
DOTALL) on its own worst family, run in a child process and given up on after 20 s: what "super-linear" meant.
"""

from __future__ import annotations

import multiprocessing
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import machine, save

from tests.adversarial.model_text import CASES as _  # noqa: F401  (the parsers' module, loaded)
from tests.adversarial.model_text import FAMILIES, _time

SIZES = (1024, 4096, 16_384, 65_536, 131_072)
OLD_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
GIVE_UP_S = 20.0


def parsers() -> dict[str, object]:
    from tests.adversarial import model_text as m

    return {"parse_tool_call": m.parse_tool_call, "math_answer": m.math_answer,
            "numeric_closeness": m.numeric_closeness, "code_tests fences": m.code_fences,
            "format (think/answer)": m.think_answer_format, "bare_number": m.bare_number,
            "lookup step": m.episode("lookup"), "python step": m.episode("python")}


def _old_search(n: int) -> None:
    OLD_TOOL_CALL.search("<tool_call>" + " " * n)


def old_pattern() -> list[dict[str, object]]:
    rows = []
    for n in (500, 1000, 2000, 3000):
        child = multiprocessing.Process(target=_old_search, args=(n,))
        start = time.perf_counter()
        child.start()
        child.join(GIVE_UP_S)
        took = time.perf_counter() - start
        if child.is_alive():
            child.kill()
            child.join()
            rows.append({"chars": n, "seconds": None, "note": f"gave up after {GIVE_UP_S:g} s"})
            break
        rows.append({"chars": n, "seconds": round(took, 3)})
    return rows


def main() -> int:
    rows = []
    for name, parse in parsers().items():
        worst_family, worst = "", [0.0] * len(SIZES)
        for family, make in FAMILIES.items():
            times = [_time(parse, make(n)) for n in SIZES]  # type: ignore[arg-type]
            if times[-1] > worst[-1]:
                worst_family, worst = family, times
        rows.append({"parser": name, "worst_family": worst_family,
                     "seconds": dict(zip(map(str, SIZES), (round(t, 5) for t in worst), strict=True)),
                     "growth_16k_to_128k": round(worst[-1] / max(worst[2], 1e-6), 1)})
        print(f"{name:<24} worst: {worst_family:<32} " + "  ".join(f"{n // 1024:>3}k {t * 1000:8.2f} ms"
                                                                  for n, t in zip(SIZES, worst, strict=True)))
    before = old_pattern()
    print("the tool-call pattern before, '<tool_call>' + N spaces: "
          + ", ".join(f"{r['chars']}: {r['seconds']} s" if r["seconds"] is not None else f"{r['chars']}: {r['note']}"
                      for r in before))
    save("model_text", {"machine": machine(), "sizes_chars": list(SIZES), "parsers": rows,
                        "tool_call_pattern_before": before})
    return 0


if __name__ == "__main__":
    sys.exit(main())
