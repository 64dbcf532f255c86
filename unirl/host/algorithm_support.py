"""Which algorithm presets each backend maps, and why it refuses the others.

Computed, never written down: each preset (``algorithm=NAME``) is planned through each backend's own plugin (its
capability declaration and its mapping table), on a reference recipe with KL on and GPUs, so that every field a preset
sets is exercised. ``unirl algorithms`` prints it and the README's table is this output, checked by a test, so the
table cannot drift from the code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.recipe.schema import ALGORITHMS

if TYPE_CHECKING:
    from unirl.host.manager import Host

REFERENCE_OVERRIDES = ("resources.gpus_per_node=8", "algorithm.max_new_tokens=64")
"""The embedded recipe made a GPU run with real completion lengths (DAPO's overlong buffer is then 12 tokens)."""
KL_ON = "algorithm.kl_coef=0.001"
"""Each preset is planned with a KL term first (so its KL placement and estimator are exercised), then without."""


@dataclass(frozen=True)
class Support:
    """One preset on one backend: the refusals of the preset's fields with a KL term, and without one."""

    framework: str
    algorithm: str
    refusals: tuple[FieldError, ...] = field(default=())
    """With ``algorithm.kl_coef`` > 0 (empty: the preset is mapped as it stands)."""
    refusals_without_kl: tuple[FieldError, ...] = field(default=())

    @property
    def mapped(self) -> bool:
        return not self.refusals

    @property
    def mapped_without_kl(self) -> bool:
        return not self.refusals_without_kl

    @property
    def cell(self) -> str:
        """The table's word for it: yes, without KL, or no."""
        return "yes" if self.mapped else "without KL" if self.mapped_without_kl else "no"


LORA = "lora"
"""The table's last row: LoRA (``model.lora.rank=8`` on the default preset), mapped or refused per backend."""
LORA_OVERRIDES = ("model.lora.rank=8", "model.lora.alpha=16")


def algorithm_problems(problems: list[FieldError], section: str = "algorithm.") -> tuple[FieldError, ...]:
    """The problems that concern the row (a reference recipe's other fields are the same for every preset: the
    ``algorithm.`` fields, or ``model.lora.`` for the LoRA row); ``algorithm.name`` only when no field says why
    (the plugin's list of presets is the summary of its rows)."""
    found = tuple(p for p in problems if p.field.startswith(section))
    fields = tuple(p for p in found if p.field != "algorithm.name")
    return fields or found


def support(host: Host, framework: str, algorithm: str) -> Support:
    with_kl = _refusals(host, [f"framework={framework}", f"algorithm={algorithm}", *REFERENCE_OVERRIDES, KL_ON])
    if not with_kl:
        return Support(framework, algorithm)
    without = _refusals(host, [f"framework={framework}", f"algorithm={algorithm}", *REFERENCE_OVERRIDES])
    return Support(framework, algorithm, with_kl, without)


def lora_support(host: Host, framework: str) -> Support:
    """LoRA on one backend (KL on, as the presets are planned: the reference policy is then the adapter-less model)."""
    refusals = _refusals(host, [f"framework={framework}", *REFERENCE_OVERRIDES, KL_ON, *LORA_OVERRIDES],
                         section="model.lora.")
    return Support(framework, LORA, refusals, refusals)


def _refusals(host: Host, overrides: list[str], section: str = "algorithm.") -> tuple[FieldError, ...]:
    from unirl.host.planning import compose, plan_recipe
    from unirl.recipe.compose import to_recipe

    unirl_log = logging.getLogger("unirl")
    level = unirl_log.level
    unirl_log.setLevel(logging.WARNING)  # the preset over the embedded recipe's values is the point, not news
    try:
        plan_recipe(host, to_recipe(compose(host, overrides)))
    except RecipeInvalid as exc:
        return algorithm_problems(exc.problems, section)
    except FieldError as exc:
        return algorithm_problems([exc], section)
    except UnirlError as exc:
        raise UnirlError(f"{' '.join(overrides)}: {exc}") from exc
    finally:
        unirl_log.setLevel(level)
    return ()


def support_table(host: Host) -> list[Support]:
    """Every preset on every registered backend, presets in :data:`ALGORITHMS` order, then LoRA."""
    frameworks = host.frameworks.names()
    return [*(support(host, framework, algorithm) for algorithm in ALGORITHMS for framework in frameworks),
            *(lora_support(host, framework) for framework in frameworks)]


def markdown(rows: list[Support], frameworks: list[str]) -> str:
    """The support table and, under it, each refusal's reason, numbered: yes (mapped as the preset stands), without
    KL (mapped with algorithm.kl_coef=0; the reasons are the KL refusals), no (the reasons without KL)."""
    reasons: list[str] = []
    lines = ["| algorithm | " + " | ".join(frameworks) + " |", "|---|" + "---|" * len(frameworks)]
    for algorithm in (*ALGORITHMS, LORA):
        cells = []
        for framework in frameworks:
            [row] = [r for r in rows if r.framework == framework and r.algorithm == algorithm]
            if row.mapped:
                cells.append("yes")
                continue
            marks = []
            for problem in row.refusals if row.mapped_without_kl else row.refusals_without_kl:
                reasons.append(f"{framework}, {algorithm}: {problem}")
                marks.append(f"[{len(reasons)}]")
            cells.append(f"{row.cell} " + "".join(marks))
        label = f"LoRA (`{LORA_OVERRIDES[0]}`)" if algorithm == LORA else f"`{algorithm}`"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"{i}. {reason}" for i, reason in enumerate(reasons, 1)]
    return "\n".join(lines)
