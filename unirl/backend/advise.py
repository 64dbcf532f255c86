"""``unirl advise``: which backend fits a situation, with its reasons.

The advice is made of two things: each plugin's own answer to "would you plan this?" (a recipe built
from the situation goes through ``plan``, so a refusal carries the plugin's own message), and its
declared capabilities weighed against the situation's tier (single-GPU learning, single-node research,
multi-node production). Nothing here names a backend.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any

from unirl.errors import RecipeInvalid, UnirlError
from unirl.recipe.schema import Recipe, ResourcesConfig, RolloutConfig

# Full fine-tuning with Adam in mixed precision: bf16 weights and gradients, fp32 master weights and two
# fp32 moments = 2 + 2 + 4 + 4 + 4 bytes per parameter, before activations and the rollout engine's cache.
TRAIN_BYTES_PER_PARAM = 16
LARGE_MODEL_B = 30.0  # above this, tensor/pipeline parallelism (Megatron) beats pure sharding in practice


@dataclass
class Situation:
    gpus_per_node: int = 1
    nodes: int = 1
    model_size_b: float = 1.5
    gpu_memory_gb: float = 80.0
    need_async: bool = False
    engine: str | None = None

    @property
    def tier(self) -> str:
        if self.nodes > 1:
            return "multi-node production"
        if self.gpus_per_node <= 1:
            return "single-GPU learning"
        return "single-node research"

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class Verdict:
    framework: str
    score: int = 0
    reasons: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    installed: str | None = None


def parse_situation(args: list[str]) -> tuple[Situation, bool]:
    parser = argparse.ArgumentParser(prog="unirl advise", add_help=True)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per node (0 = CPU only)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--model-size", default="1.5B", help="parameters, e.g. 0.5B, 7B, 70B")
    parser.add_argument("--gpu-memory", type=float, default=80.0, help="GB per GPU")
    parser.add_argument("--async", dest="need_async", action="store_true", help="rollouts overlap training")
    parser.add_argument("--engine", choices=("vllm", "sglang", "hf"), default=None, help="rollout engine preference")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args(args)
    size = ns.model_size.strip().upper().rstrip("B")
    try:
        model_size = float(size)
    except ValueError:
        raise UnirlError(f"--model-size={ns.model_size!r}: a number of billions of parameters, e.g. 7B") from None
    if ns.gpus < 0 or ns.nodes < 1 or model_size <= 0:
        raise UnirlError("--gpus must be >= 0, --nodes >= 1, --model-size > 0")
    return Situation(ns.gpus, ns.nodes, model_size, ns.gpu_memory, ns.need_async, ns.engine), ns.json


SITUATION_MODEL = "builtin:qwen2.5-0.5b-shape"
"""The model a situation's recipe names: a real model's shape (its sequence length, its Megatron flags derivable from
its config) that needs no hub; the toy model's 128 positions would rule out backends that size sequences by it."""


def situation_recipe(situation: Situation) -> Recipe:
    """The situation as a recipe: its GPUs set, the rest of what backends differ on left at auto (each resolves it
    as a run would), the engine only when the situation names one."""
    recipe = Recipe()
    recipe = replace(recipe, resources=replace(ResourcesConfig(), nodes=situation.nodes,
                                               gpus_per_node=situation.gpus_per_node,
                                               device="cuda" if situation.gpus_per_node else "cpu"),
                     rollout=replace(RolloutConfig(), engine=situation.engine or RolloutConfig().engine),
                     model=replace(recipe.model, path=SITUATION_MODEL))
    # Batch sizes that split over any GPU count the situation names: one prompt per training GPU per step.
    gpus = max(1, situation.total_gpus)
    return replace(recipe, algorithm=replace(recipe.algorithm, prompts_per_step=gpus, samples_per_prompt=8))


def judge(host: Any, name: str, situation: Situation) -> Verdict:
    framework = host.frameworks.get(name)
    caps = framework.capabilities
    verdict = Verdict(name, installed=framework.installed_version())
    recipe = situation_recipe(situation)
    recipe = replace(recipe, framework={**framework.options, "name": name})
    try:
        framework.plan(recipe)
    except RecipeInvalid as exc:
        verdict.refused += [str(p) for p in exc.problems]
    except UnirlError as exc:
        verdict.refused.append(str(exc))
    if situation.need_async and not caps.async_rollouts:
        verdict.refused.append(f"no asynchronous mode (modes: {', '.join(caps.modes)})")
    elif situation.need_async:
        verdict.score += 2
        verdict.reasons.append(f"asynchronous rollouts ({'; '.join(caps.modes)})")
    tier = situation.tier
    if tier == "single-GPU learning" and caps.launcher == "in_process":
        verdict.score += 3
        verdict.reasons.append("runs in one process with no cluster to start; trains on a CPU or one GPU")
    if tier != "single-GPU learning" and caps.colocated_rollouts:
        verdict.score += 2
        verdict.reasons.append(f"colocated rollout and training on the same GPUs ({caps.placement[0]})")
    if tier == "multi-node production" and caps.ray_across_nodes:
        verdict.score += 2
        verdict.reasons.append(f"multi-node: {caps.multi_node}")
    memory_need = situation.model_size_b * TRAIN_BYTES_PER_PARAM
    memory_have = situation.total_gpus * situation.gpu_memory_gb
    if situation.model_size_b >= LARGE_MODEL_B and caps.model_parallel:
        verdict.score += 2
        verdict.reasons.append(f"{situation.model_size_b:g}B parameters: tensor/pipeline model parallelism "
                               f"({', '.join(caps.training_backends)})")
    if memory_need > situation.gpu_memory_gb and situation.total_gpus > 1 and caps.shards_training_state:
        verdict.score += 1
        verdict.reasons.append(f"shards the ~{memory_need:.0f} GB of training state over {situation.total_gpus} "
                               f"GPUs ({', '.join(caps.training_backends)})")
    if situation.engine and situation.engine in caps.rollout_engines:
        verdict.score += 1
        verdict.reasons.append(f"rollouts with {situation.engine}")
    if situation.total_gpus == 0:
        if caps.runs_on_cpu:
            verdict.reasons.append(f"CPU only: fine for tiny models; full fine-tuning of {situation.model_size_b:g}B "
                                   f"parameters needs about {memory_need:.3g} GB of RAM and is slow")
    elif memory_need > memory_have:
        verdict.refused.append(f"full fine-tuning of {situation.model_size_b:g}B parameters needs about "
                               f"{memory_need:.0f} GB ({TRAIN_BYTES_PER_PARAM} bytes/parameter) and the situation "
                               f"has {memory_have:.0f} GB of GPU memory")
    if verdict.installed:
        verdict.score += 1
        verdict.reasons.append(f"installed here ({verdict.installed})")
    return verdict


def advise(host: Any, situation: Situation) -> dict[str, Any]:
    verdicts = [judge(host, name, situation) for name in host.frameworks.names()]
    fits = sorted((v for v in verdicts if not v.refused), key=lambda v: (-v.score, v.framework))
    refused = [v for v in verdicts if v.refused]
    return {"situation": {**situation.__dict__, "tier": situation.tier},
            "recommended": fits[0].framework if fits else None,
            "ranking": [v.__dict__ for v in fits], "not_suitable": [v.__dict__ for v in refused]}


def print_advice(result: dict[str, Any]) -> None:
    from unirl.console import console

    out = console()
    s = result["situation"]
    out.print(f"situation: {s['nodes']} node(s) x {s['gpus_per_node']} GPU(s), {s['model_size_b']:g}B model"
              f"{', async' if s['need_async'] else ''}{', engine ' + s['engine'] if s['engine'] else ''}"
              f" -> {s['tier']}")
    if result["recommended"] is None:
        out.print("no installed plugin fits this situation")
    for rank, v in enumerate(result["ranking"], 1):
        out.print(f"{rank}. {v['framework']} (score {v['score']})")
        for reason in v["reasons"]:
            out.print(f"     + {reason}")
    for v in result["not_suitable"]:
        out.print(f"not {v['framework']}:")
        for reason in v["refused"]:
            out.print(f"     - {reason}")
