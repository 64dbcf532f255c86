"""Drive a unirl run directory's environment through verl 0.9.1's own agent-loop layer (run under
.venvs/verl/bin/python; the run's staged core first on PYTHONPATH).

    .venvs/verl/bin/python tests/backends/verl_agent_harness.py --run-dir RUN --policy solve --out out.json

1. verl's shipped ``ppo_trainer`` config composed with Hydra and the plan's own overrides (the command line unirl
   would launch ``verl.trainer.main_ppo`` with), so ``agent_loop_config_path`` and ``default_agent_loop`` are
   unirl's.
2. verl's ``RLHFDataset`` reads the train file unirl exported, with the builtin model's tokenizer, and verl's
   ``collate_fn`` makes the batch (``DataProto.from_single_dict``), repeated ``rollout.n`` times as the trainer does.
3. verl's ``AgentLoopWorker(config, llm_client)`` loads the agent-loop YAML, and ``generate_sequences(batch)``
   instantiates unirl's loop per trajectory with Hydra, awaits ``run``, and pads and assembles the output batch
   (``prompts``, ``responses``, ``response_mask``, ``rm_scores``). The only stand-in is ``llm_client``: a scripted
   policy with the ``generate(request_id, *, prompt_ids, sampling_params, **kw) -> TokenOutput`` contract of verl's
   LLMServerClient (verl/workers/rollout/llm_server.py:99-120), honouring ``max_tokens``.

The policies are tests/backends/scripted_policy.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from openrlhf_harness import build_tokenizer  # a ChatML tokenizer built locally; that module imports nothing else
from scripted_policy import POLICIES, scripted_turn


class ScriptedServer:
    def __init__(self, tokenizer: Any, policy: str) -> None:
        self.tok = tokenizer
        self.policy = policy
        self.calls: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append({"request_id": request_id, "max_tokens": sampling_params.get("max_tokens"),
                           "context_tokens": len(prompt_ids)})
        ids = scripted_turn(self.tok, self.policy, list(prompt_ids), sampling_params.get("max_tokens"))
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--policy", choices=POLICIES, default="solve")
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    run = args.run_dir
    plan = json.loads((run / "plan.json").read_text())
    command = plan["command"]
    overrides = [o for o in command[command.index("verl.trainer.main_ppo") + 1:]]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)

    # The builtin model's character tokenizer has no chat template and no newline, which verl's Qwen2 Continuous
    # Token builder needs (verl/utils/tokenizer/continuous_token.py:558); a scripted policy needs no weights, so
    # the model directory gets a byte-level ChatML tokenizer (EOS <|im_end|>, as Qwen's) beside its Qwen2 config.
    build_tokenizer("<|im_end|>").save_pretrained(run / "model")
    tok = hf_tokenizer(str(run / "model"))
    dataset = RLHFDataset(data_files=[str(run / "data" / "train.parquet")], tokenizer=tok, config=cfg.data,
                          processor=None)
    items = [dataset[i] for i in range(args.rows)]
    batch = DataProto.from_single_dict(collate_fn(items))
    n = int(cfg.actor_rollout_ref.rollout.n)
    batch = batch.repeat(repeat_times=n, interleave=True)
    batch.meta_info = {"global_steps": 1, "validate": False}
    server = ScriptedServer(tok, args.policy)
    worker = AgentLoopWorker(cfg, llm_client=server)
    output = asyncio.run(worker.generate_sequences(batch))

    responses, mask = output.batch["responses"], output.batch["response_mask"]
    scores = output.batch["rm_scores"].sum(dim=-1)
    results = []
    for i in range(len(output)):
        ids = [int(t) for t, m in zip(responses[i].tolist(), output.batch["attention_mask"][i, -responses.shape[1]:]
                                     .tolist(), strict=True) if m]
        results.append({"score": float(scores[i]), "model_tokens": int(mask[i].sum()), "response_tokens": len(ids),
                        "text": tok.decode(ids, skip_special_tokens=False),
                        "rollout_log_probs": (output.batch["rollout_log_probs"][i][: len(ids)].tolist()
                                              if "rollout_log_probs" in output.batch else None),
                        "unirl_env_return": float(output.non_tensor_batch["unirl_env_return"][i]),
                        "unirl_env_turns": float(output.non_tensor_batch["unirl_env_turns"][i])})
    out = {"results": results, "calls": server.calls, "n": n, "response_length": int(responses.shape[1]),
           "overrides": [shlex.quote(o) for o in overrides]}
    args.out.write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
