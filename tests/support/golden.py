"""Golden files (tests/golden/): a generated text compared with its file, rewritten when ``UNIRL_UPDATE_GOLDEN=1``.

Regenerate after an intended change with ``UNIRL_UPDATE_GOLDEN=1 pytest tests/test_plugin_nemo_rl.py
tests/test_plugin_slime.py``, then review the diff of tests/golden/ before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = "UNIRL_UPDATE_GOLDEN"


def assert_golden(path: Path, text: str) -> None:
    """``text`` equals the golden file at ``path`` (UTF-8); with ``UNIRL_UPDATE_GOLDEN=1`` it is written there first."""
    if os.environ.get(UPDATE) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}: run with {UPDATE}=1 to write it"
    assert text == path.read_text(encoding="utf-8"), f"{path} differs from the plan: review, then rerun with {UPDATE}=1"
