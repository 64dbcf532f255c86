"""What every backend's parity harness shares: it runs as ``python -m <harness>`` in the backend's own interpreter
(as its ``native_check`` does), reads ``{"plan", "batch", "advantages"}`` as JSON on stdin and prints one JSON line:
the numbers the backend's own code computed on the frozen batch.

``plan`` is unirl's plan for the recipe (the harness configures the backend's loss objects from it, as a run would);
``batch`` is the frozen batch (:mod:`unirl.backend.parity.batch`); ``advantages`` are the reference's, on which the
backend's loss is computed, so that its loss is compared on the same advantages as the reference's. A harness fills
what its backend computes (``advantages``, ``loss``, ``grad``, ``kl_term``, ``clip_fraction``,
``dual_clip_fraction``), says ``refused`` (with why) for a recipe its backend does not run, and lists in ``notes``
what it configured. Light: imports only torch and the light core, so it runs where the backend lives.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from unirl.backend.parity.batch import FrozenBatch
from unirl.backend.parity.reference import Tensors


class Refused(Exception):
    """The backend does not run this recipe's algorithm (the harness says why)."""


class NotCertified(Exception):
    """The backend runs the recipe, but its code cannot be run on the batch here (the harness says why)."""


def leaf(batch: FrozenBatch) -> Tensors:
    """The batch as float32 tensors, the current log-probabilities a leaf whose gradient the harness reads."""
    t = batch.tensors()
    return replace(t, logp=t.logp.clone().requires_grad_(True))


def gradient(t: Tensors) -> list[list[float]]:
    """d loss / d log pi per token, after the harness called ``loss.backward()`` (0 under padding)."""
    import torch

    grad = t.logp.grad if t.logp.grad is not None else torch.zeros_like(t.logp)
    result: list[list[float]] = (grad * t.mask).tolist()
    return result


def number(value: Any) -> float | None:
    """A scalar (tensor, float, or a metrics object that aggregates, as verl's ``Metric``) as a float, or None."""
    if value is None:
        return None
    if hasattr(value, "aggregate"):
        value = value.aggregate()
    return float(value.detach()) if hasattr(value, "detach") else float(value)


def main(compute: Callable[[dict[str, Any], FrozenBatch], dict[str, Any]]) -> None:
    """Read the payload from stdin, run ``compute(plan, batch)``, print its result (or why there is none)."""
    result = answer(compute, json.loads(sys.stdin.read()))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()


def answer(compute: Callable[[dict[str, Any], FrozenBatch], dict[str, Any]], payload: dict[str, Any]
           ) -> dict[str, Any]:
    """``compute``'s result on ``payload``, or why there is none (refused, not certified, the code's failure)."""
    batch = FrozenBatch.from_dict(payload["batch"])
    try:
        result = compute(payload, batch)
    except Refused as exc:
        result = {"refused": str(exc)}
    except NotCertified as exc:
        result = {"not_certified": str(exc)}
    except Exception:  # the backend's code failed on the batch: a result the certificate shows, not a crash
        result = {"error": traceback.format_exc()[-3000:]}
    return result
