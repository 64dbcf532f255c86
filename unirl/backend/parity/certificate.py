"""The parity certificate: each backend's own numbers on the frozen batch against unirl's reference semantics.

Per backend and quantity (``advantages``, ``loss``, ``grad`` = d loss / d log pi per token, ``kl_term``,
``clip_fraction``, ``dual_clip_fraction``) the largest absolute and relative difference from the reference, and a
verdict:

- ``equal``: within :data:`TOLERANCE` (relative to the reference's largest magnitude; float32 arithmetic);
- ``design``: a difference the backend makes by construction and unirl cannot change (an epsilon, an aggregation it
  always uses), which the backend's plugin names (:class:`Design`): the reference computed with that difference
  matches the backend, and the row says how large the difference is;
- ``mismatch``: anything else (a translation bug, or a behaviour unirl must refuse or document);
- ``refused``: the backend does not run the recipe (the plan's refusal, or its harness's).

A harness runs in the backend's own interpreter (``framework.python``), configured from unirl's plan for the recipe,
never from hand-picked arguments (:mod:`unirl.backend.parity.harness`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from unirl.backend.parity.reference import Semantics, quantities

if TYPE_CHECKING:
    from unirl.backend.parity.batch import FrozenBatch
    from unirl.recipe.schema import Recipe

TOLERANCE = 1e-5
ABSOLUTE_FLOOR = 1e-7
"""Below this a difference is equal whatever the reference's size (a gradient of zero advantages, say)."""
QUANTITIES = ("advantages", "loss", "grad", "kl_term", "clip_fraction", "dual_clip_fraction")
VERDICTS = ("equal", "design", "mismatch", "refused")


@dataclass(frozen=True)
class Design:
    """A difference a backend makes by construction: what it does (with its source), which quantities it moves, and
    the :class:`~unirl.backend.parity.reference.Semantics` fields that make the reference compute the same."""

    name: str
    description: str
    quantities: tuple[str, ...]
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParityHarness:
    """What a framework plugin declares for its certificate (its ``parity`` attribute): the harness module run as
    ``python -m`` in the backend's interpreter (None: the backend cannot be certified here, and ``why_not`` says
    why), and the design differences its code makes for a recipe."""

    module: str | None
    designs: Callable[[Recipe], list[Design]] = field(default=lambda recipe: [])
    why_not: str = ""


@dataclass
class Row:
    framework: str
    algorithm: str
    quantity: str
    max_abs_diff: float | None
    max_rel_diff: float | None
    verdict: str
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def difference(backend: Any, reference: Any, mask: list[list[float]]) -> tuple[float, float]:
    """(largest absolute difference, that over the reference's largest magnitude), over the valid tokens."""
    if isinstance(reference, list):
        pairs = [(b, r) for b_row, r_row, m_row in zip(backend, reference, mask, strict=True)
                 for b, r, m in zip(b_row, r_row, m_row, strict=True) if m]
    else:
        pairs = [(backend, reference)]
    if any(not math.isfinite(b) for b, _ in pairs):
        return math.inf, math.inf
    largest = max(abs(b - r) for b, r in pairs)
    scale = max(abs(r) for _, r in pairs)
    return largest, largest / scale if scale > 0 else (0.0 if largest == 0 else math.inf)


def close(abs_diff: float, rel_diff: float) -> bool:
    return abs_diff <= ABSOLUTE_FLOOR or rel_diff <= TOLERANCE


def certify(framework: str, algorithm: str, batch: FrozenBatch, semantics: Semantics, result: dict[str, Any],
            designs: list[Design]) -> list[Row]:
    """The rows of one backend's certificate from its harness ``result``."""
    if "refused" in result:
        return [Row(framework, algorithm, q, None, None, "refused", result["refused"]) for q in QUANTITIES[:3]]
    if "error" in result:
        tail = str(result["error"]).strip().splitlines()[-1] if result["error"] else ""
        return [Row(framework, algorithm, q, None, None, "mismatch",
                    f"the backend's own code failed on the batch: {tail}") for q in QUANTITIES[:3]]
    t = batch.tensors()
    pure = quantities(t, semantics)
    adjusted_semantics = semantics.changed(**{k: v for d in designs for k, v in d.changes.items()})
    # the loss is computed on the reference's advantages (the payload's), with the backend's constants
    adjusted = quantities(t, adjusted_semantics, adv_for_loss=pure["advantages"])
    rows = []
    for quantity in QUANTITIES:
        ours, theirs = pure[quantity], result.get(quantity)
        if ours is None and theirs is None:
            continue
        if theirs is None:
            continue  # the backend does not report it (TRL logs no dual-clip fraction): nothing to compare
        if ours is None:
            rows.append(Row(framework, algorithm, quantity, None, None, "mismatch",
                            f"the backend computes a {quantity} the recipe does not ask for"))
            continue
        abs_diff, rel_diff = difference(theirs, ours, batch.mask)
        if close(abs_diff, rel_diff):
            rows.append(Row(framework, algorithm, quantity, abs_diff, rel_diff, "equal"))
            continue
        named = [d for d in designs if quantity in d.quantities]
        if named:
            abs_adj, rel_adj = difference(theirs, adjusted[quantity], batch.mask)
            if close(abs_adj, rel_adj):
                rows.append(Row(framework, algorithm, quantity, abs_diff, rel_diff, "design",
                                "; ".join(f"{d.name}: {d.description}" for d in named)))
                continue
        rows.append(Row(framework, algorithm, quantity, abs_diff, rel_diff, "mismatch",
                        "the backend's number differs from the recipe's meaning (no known design difference "
                        "explains it)"))
    return rows


def refused_rows(framework: str, algorithm: str, reason: str) -> list[Row]:
    return [Row(framework, algorithm, q, None, None, "refused", reason) for q in QUANTITIES[:3]]
