"""A recipe's parity certificate across backends: build the frozen batch once, run each backend's harness on it in
that backend's interpreter, compare with the reference (:mod:`unirl.backend.parity.certificate`).

Used by ``unirl parity`` and by a run's record (``parity.json``, written at launch where the backend's code is
importable). The host is passed in (its registries), as :mod:`unirl.backend.diff` takes it.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from unirl.backend.parity.batch import FrozenBatch, build
from unirl.backend.parity.certificate import ParityHarness, Row, certify, refused_rows
from unirl.backend.parity.reference import Semantics, quantities
from unirl.errors import RecipeInvalid, UnirlError
from unirl.record.layout import PARITY

if TYPE_CHECKING:
    from unirl.recipe.schema import Recipe
    from unirl.rewards.spec import RewardRuntimeSpec

PARITY_FILE = PARITY


@dataclass
class Certificate:
    algorithm: str
    rows: list[Row] = field(default_factory=list)
    not_certified: list[dict[str, str]] = field(default_factory=list)
    """Backends that cannot be certified here, each with why."""
    versions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    batch: dict[str, Any] = field(default_factory=dict)

    @property
    def mismatched(self) -> bool:
        return any(r.verdict == "mismatch" for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "rows": [r.to_dict() for r in self.rows],
                "not_certified": self.not_certified, "versions": self.versions, "seconds": self.seconds,
                "notes": self.notes, "batch": self.batch}


def for_framework(recipe: Recipe, name: str, options: dict[str, Any]) -> Recipe:
    """The recipe as ``name`` would run it: its own framework options (and native overrides) when the recipe names
    that backend, else the backend's defaults (native overrides belong to one backend)."""
    if recipe.framework.get("name") == name:
        return recipe
    return replace(recipe, framework={**options, "name": name})


def harness_of(framework: Any) -> ParityHarness | None:
    found = getattr(framework, "parity", None)
    return found if isinstance(found, ParityHarness) else None


def certificate(host: Any, recipe: Recipe, rewards: RewardRuntimeSpec, frameworks: list[str],
                pythons: dict[str, str] | None = None, batch: FrozenBatch | None = None) -> Certificate:
    """The recipe's certificate on ``frameworks`` (``pythons``: an interpreter per backend, else its
    ``framework.python``, else this one)."""
    from unirl.backend.environment import python_option, run_check
    from unirl.backend.native import CORE_PACKAGES

    start = time.monotonic()
    batch = batch or build(recipe, rewards)
    semantics = Semantics.of(recipe)
    reference = quantities(batch.tensors(), semantics)
    result = Certificate(recipe.algorithm.name, batch={"completions": len(batch.rewards), "groups": len(set(
        batch.group)), "tokens": len(batch.mask[0]), "seed": batch.seed, "notes": batch.notes})
    result.seconds["batch"] = round(time.monotonic() - start, 2)
    for name in frameworks:
        start = time.monotonic()
        framework = host.frameworks.get(name)
        harness = harness_of(framework)
        if harness is None or harness.module is None:
            result.not_certified.append({"framework": name, "why": (harness.why_not if harness else "") or
                                         f"the {name} plugin declares no parity harness"})
            continue
        recipe_for = for_framework(recipe, name, framework.options)
        python = (pythons or {}).get(name) or python_option(name, recipe_for.framework) or sys.executable
        version = framework.installed_version(python)
        if version is None:
            result.not_certified.append({"framework": name, "why": f"{name} is not installed in {python} "
                                         f"(set framework.python, or --python {name}=PATH)"})
            continue
        result.versions[name] = version
        try:
            plan = framework.plan(recipe_for)
        except (RecipeInvalid, UnirlError) as exc:
            result.rows += refused_rows(name, recipe.algorithm.name, " ".join(str(exc).split())[:400])
            continue
        payload = {"plan": plan.to_dict(), "batch": batch.to_dict(), "advantages": reference["advantages"]}
        if python == sys.executable:  # the backend lives here (TRL): no second interpreter, no second import of it
            from unirl.backend.parity.harness import answer as answer_of

            answer = answer_of(importlib.import_module(harness.module).compute, payload)
        else:
            answer = run_check(python, harness.module, payload, list(CORE_PACKAGES))
        if "not_certified" in answer:
            result.not_certified.append({"framework": name, "why": str(answer["not_certified"])})
            continue
        result.notes[name] = list(answer.get("notes", []))
        result.rows += certify(name, recipe.algorithm.name, batch, semantics, answer, harness.designs(recipe_for))
        result.seconds[name] = round(time.monotonic() - start, 2)
    return result


RECORD_SEED = 0
"""The run record's certificate uses one batch seed whatever the run's: it checks the loss code, not a run, and the
same recipe then shares one cached certificate across seeds."""


def cache_key(recipe: Recipe, rewards: RewardRuntimeSpec, framework: str, version: str) -> str:
    """What a certificate depends on: the backend and its version, the recipe's update semantics and its native
    overrides, the batch's shape and data, and the rewards."""
    import hashlib
    import json
    from dataclasses import asdict

    a = recipe.algorithm
    parts = {"format": 1, "framework": framework, "version": version, "semantics": asdict(Semantics.of(recipe)),
             "algorithm": a.name, "framework_options": recipe.framework, "data": recipe.data.train,
             "shape": [a.prompts_per_step, a.samples_per_prompt, a.max_new_tokens, a.mini_batches_per_step,
                       a.epochs_per_batch], "rewards": [asdict(e) for e in rewards.rewards]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cache_dir() -> Any:
    import os
    from pathlib import Path

    root = os.environ.get("UNIRL_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                            os.path.expanduser("~/.cache"), "unirl")
    return Path(root) / "parity"


def recipe_for_record(recipe: Recipe, framework: str, options: dict[str, Any]) -> Recipe:
    return for_framework(recipe, framework, options)


def _cache_file(host: Any, recipe: Recipe, rewards: RewardRuntimeSpec, framework: str) -> Any:
    from unirl.backend.environment import python_option

    version = host.frameworks.get(framework).installed_version(python_option(framework, recipe.framework))
    return cache_dir() / f"{cache_key(recipe, rewards, framework, str(version))}.json"


def cached_certificate(host: Any, recipe: Recipe, rewards: RewardRuntimeSpec, framework: str) -> dict[str, Any] | None:
    """The certificate already computed for this recipe and backend version, or None."""
    import json

    try:
        cached = _cache_file(host, recipe, rewards, framework)
        found: dict[str, Any] = json.loads(cached.read_text())
    except (OSError, ValueError):
        return None
    return {**found, "cached": True}


def record_certificate(host: Any, recipe: Recipe, rewards: RewardRuntimeSpec, framework: str) -> dict[str, Any]:
    """The run record's certificate for the run's own backend (``parity.json``), from the cache when this recipe
    and backend version were certified before. Never raises: a failure is the record's ``error``."""
    import json

    try:
        found = cached_certificate(host, recipe, rewards, framework)
        if found is not None:
            return found
        cached = _cache_file(host, recipe, rewards, framework)
        seeded = replace(recipe, seed=RECORD_SEED)
        result = certificate(host, seeded, rewards, [framework]).to_dict()
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(cached)
        return result
    except Exception as exc:  # the certificate is a record, not a gate: the run goes on, and says why it has none
        return {"error": f"{type(exc).__name__}: {exc}"}
