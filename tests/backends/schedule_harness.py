"""The learning rate of every optimizer update, as the backend's own scheduler code sets it (run in its venv).

    .venvs/verl/bin/python tests/backends/schedule_harness.py verl '{"optim": {...}, "updates_per_step": U,
        "steps": N}'
    .venvs/openrlhf/bin/python tests/backends/schedule_harness.py openrlhf '{"flags": {...}}'

Prints one JSON line: ``{"lr": [ratio of the peak lr at update 0, 1, ...]}`` (the optimizer's lr is 1.0).

verl 0.9.1: the plan's ``actor_rollout_ref.actor.optim.*`` values become verl's own ``FSDPOptimizerConfig``
(verl/workers/config/optimizer.py:88-125), ``total_training_steps`` is injected as verl's trainer does
(verl/trainer/ppo/ray_trainer.py:435-447), and the scheduler is built by ``FSDPEngine._build_lr_scheduler`` itself
(verl/workers/engine/fsdp/transformer_impl.py:503-531). The scheduler is stepped once per training step, after the
step's last mini-batch (``update_lr_scheduler=batch_idx == total_num_iterations - 1``,
verl/workers/engine_workers.py:287-308; ``lr_scheduler_step``, transformer_impl.py:836-842).

OpenRLHF 0.11.2: ``scheduler_steps`` is PPOTrainer's ``max_steps`` (openrlhf/trainer/ppo_trainer.py:72-78), and the
scheduler is transformers' ``get_scheduler`` called exactly as openrlhf/utils/deepspeed/deepspeed.py:367-383 calls
it (that method also initialises DeepSpeed on GPUs, so the call is repeated here, with transformers from OpenRLHF's
venv); DeepSpeed steps it once per optimizer update.
"""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace
from typing import Any


def verl_rates(payload: dict[str, Any]) -> list[float]:
    import torch
    from verl.workers.config.optimizer import FSDPOptimizerConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    optim = {k: v for k, v in payload["optim"].items() if k in FSDPOptimizerConfig.__dataclass_fields__}
    config = FSDPOptimizerConfig(**{**optim, "lr": 1.0, "total_training_steps": payload["steps"]})
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    engine = SimpleNamespace(optimizer_config=config, rank=1)  # rank 1: no print
    scheduler = FSDPEngine._build_lr_scheduler(engine, optimizer)  # type: ignore[arg-type]
    rates = []
    for _ in range(payload["steps"]):
        for _ in range(payload["updates_per_step"]):
            rates.append(optimizer.param_groups[0]["lr"])
        scheduler.step()  # once per training step (engine_workers.py:308)
    return rates


def openrlhf_rates(payload: dict[str, Any]) -> list[float]:
    import torch
    from transformers.optimization import get_scheduler

    f = payload["flags"]
    # PPOTrainer's max_steps (ppo_trainer.py:72-78): rows x samples // train batch x episodes x epochs
    scheduler_steps = (f["data.max_samples"] * f["rollout.n_samples_per_prompt"] // f["train.batch_size"]
                       * f["train.num_episodes"] * f["train.max_epochs"])
    name = f["actor.lr_scheduler"]
    kwargs = {"min_lr_rate": f["actor.min_lr_ratio"]} if name in {"cosine_with_min_lr",
                                                                   "cosine_warmup_with_min_lr"} else {}
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=math.ceil(scheduler_steps * f["actor.lr_warmup_ratio"]),
                              num_training_steps=scheduler_steps, scheduler_specific_kwargs=kwargs)
    rates = []
    for _ in range(scheduler_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        scheduler.step()
    return rates


def main() -> None:
    backend, payload = sys.argv[1], json.loads(sys.argv[2])
    rates = verl_rates(payload) if backend == "verl" else openrlhf_rates(payload)
    print(json.dumps({"lr": rates}))


if __name__ == "__main__":
    main()
