"""``trajectories.jsonl``: which scored completions are kept, and how they are written (plain or gzip).

Every completion of every step is a lot: the embedded default's 3,000 steps x 128 completions made 384k lines and
111 MB. The recipe's ``logging`` group samples (every N-th step, K completions per prompt group) and may compress
(``trajectories.jsonl.gz``, one whole gzip member per append, so concatenated members stay one valid file and a
kill tears at most the last append). A completion with a failed reward call is always kept: it is what a user
opens the file for. Every reader in unirl goes through :mod:`unirl.jsonl`, which reads both forms.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLAIN = "trajectories.jsonl"
COMPRESSED = "trajectories.jsonl.gz"


@dataclass(frozen=True)
class TrajectorySampling:
    every_steps: int = 1
    """Keep the completions of every this-many-th step (step 1 and every multiple of it); 1 = every step."""
    per_group: int | None = None
    """Keep at most this many completions of each prompt's group per step; None = all of them."""
    compress: bool = False
    """Write ``trajectories.jsonl.gz`` instead of ``trajectories.jsonl``."""

    @classmethod
    def from_logging(cls, logging: dict[str, Any]) -> TrajectorySampling:
        """From a recipe's ``logging`` group (as a plan's plain dict)."""
        return cls(every_steps=int(logging.get("trajectories_every", 1) or 1),
                   per_group=logging.get("trajectories_per_group"),
                   compress=bool(logging.get("trajectories_compress", False)))

    def file_name(self) -> str:
        return COMPRESSED if self.compress else PLAIN

    def keeps_step(self, step: int | None) -> bool:
        return step is None or self.every_steps <= 1 or step == 1 or step % self.every_steps == 0

    def select(self, records: list[dict[str, Any]], step: int | None = None) -> list[dict[str, Any]]:
        """The records to write: those of a kept step, at most ``per_group`` per prompt, plus every failure."""
        keep_step = self.keeps_step(step)
        if keep_step and self.per_group is None:
            return records
        kept: list[dict[str, Any]] = []
        seen: dict[Any, int] = {}
        for record in records:
            if record.get("errors"):
                kept.append(record)
                continue
            if not keep_step:
                continue
            prompt = record.get("prompt")
            count = seen.get(prompt, 0)
            if self.per_group is None or count < self.per_group:
                kept.append(record)
            seen[prompt] = count + 1
        return kept


def encode(data: bytes, compress: bool) -> bytes:
    """JSON lines as written to disk: one gzip member per call when compressing (mtime 0: reproducible files)."""
    return gzip.compress(data, compresslevel=6, mtime=0) if compress else data


def existing(run_dir: Path) -> Path | None:
    """The run's trajectory log, whichever form it was written in."""
    for name in (PLAIN, COMPRESSED):
        if (run_dir / name).exists():
            return run_dir / name
    return None
