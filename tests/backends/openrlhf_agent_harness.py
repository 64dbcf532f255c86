"""Drive a unirl run directory's environment through OpenRLHF's own multi-turn agent code (run under
.venvs/openrlhf/bin/python, with the run's staged core on PYTHONPATH and nothing of unirl installed).

    .venvs/openrlhf/bin/python tests/backends/openrlhf_agent_harness.py --run-dir RUN --policy solve --out out.json

1. ``openrlhf.trainer.ray.vllm_engine._load_agent_executor(<run>/openrlhf_agent.py)``: OpenRLHF imports the agent file
   unirl wrote and constructs its ``AgentExecutor`` with no arguments, as every vLLM engine actor does
   (vllm_engine.py:19-30, 56-57).
2. For the rows of the train file unirl exported, all at once (as one asyncio task each, the way OpenRLHF gathers
   a prompt's samples), ``executor.execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)``:
   OpenRLHF's ``MultiTurnAgentExecutor`` loop (openrlhf/utils/agent.py:36-185) over
   unirl's ``AgentInstance``. The only stand-in is the engine: a scripted policy over the builtin model's tokenizer,
   returning vLLM ``RequestOutput``-shaped objects (token ids with the end-of-sequence token, ``finish_reason``,
   per-token logprobs in vLLM's ``{token_id: Logprob}`` shape).
3. ``SamplesGenerator._process_response_into_experience``: OpenRLHF turns each response into the ``Experience`` it
   trains on; the reward, score, action mask and ``info`` (extra_logs) are read back from its tensors.

The policies are tests/backends/scripted_policy.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import types
from pathlib import Path
from typing import Any

from openrlhf_harness import _install_vllm_import_stubs
from scripted_policy import POLICIES, scripted_turn


class ScriptedPolicy:
    def __init__(self, tokenizer: Any, policy: str) -> None:
        self.tok = tokenizer
        self.policy = policy
        self.calls: list[dict[str, Any]] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        self.calls.append({"context_tokens": len(prompt_token_ids), "max_tokens": sampling_params.max_tokens})
        ids = scripted_turn(self.tok, self.policy, list(prompt_token_ids), sampling_params.max_tokens)
        finish = "stop" if ids and ids[-1] == self.tok.eos_token_id else "length"
        logprobs = [{t: types.SimpleNamespace(logprob=-0.5)} for t in ids]
        out = types.SimpleNamespace(token_ids=ids, text=self.tok.decode(ids, skip_special_tokens=True),
                                    finish_reason=finish, logprobs=logprobs)
        return types.SimpleNamespace(outputs=[out], prompt_token_ids=list(prompt_token_ids))


async def run_rows(args: argparse.Namespace) -> dict[str, Any]:
    _install_vllm_import_stubs()
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor
    from transformers import AutoTokenizer

    run = args.run_dir
    plan = json.loads((run / "plan.json").read_text())
    flags = plan["native_config"]["flags"]
    executor = _load_agent_executor(str(run / "openrlhf_agent.py"))
    tok = AutoTokenizer.from_pretrained(run / "model")
    rows = [json.loads(line) for line in (run / "data" / "train.jsonl").read_text().splitlines()][: args.rows]
    generator = SamplesGenerator.__new__(SamplesGenerator)  # the method reads no state; __init__ needs Ray/vLLM
    max_len = int(flags["data.max_len"])
    engines = [ScriptedPolicy(tok, args.policy) for _ in rows]
    # concurrently, as RolloutRayActor.generate_responses gathers a prompt's samples (vllm_engine.py:194-206): each
    # execute is its own asyncio task, which is what keeps each sample's turns apart in unirl's agent
    responses = await asyncio.gather(*(
        executor.execute(prompt=row["input"], label=row["label"],
                         sampling_params=types.SimpleNamespace(max_tokens=None, logprobs=1),  # what execute() reads
                         max_length=max_len, hf_tokenizer=tok, llm_engine=engine)
        for row, engine in zip(rows, engines, strict=True)))
    results = []
    for engine, response in zip(engines, responses, strict=True):
        exp = generator._process_response_into_experience(response, max_len=max_len)
        prompt_tokens = response["action_ranges"][0][0] if response["action_ranges"] else None
        results.append({
            "reward": float(exp.rewards.flatten()[0]), "score": float(exp.scores.flatten()[0]),
            "action_tokens": int(exp.action_mask.sum()), "sequence_tokens": len(response["observation_tokens"]),
            "prompt_tokens": prompt_tokens, "action_ranges": response["action_ranges"],
            "text": tok.decode(response["observation_tokens"], skip_special_tokens=False),
            "truncated": bool(response["truncated"]), "calls": engine.calls,
            "logprobs": response["rollout_log_probs"],
            "info": {k: float(v.flatten()[0]) for k, v in exp.info.items() if k.startswith("env/")}})
    return {"results": results, "agent_file": str(run / "openrlhf_agent.py")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--policy", choices=POLICIES, default="solve")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    out = asyncio.run(run_rows(args))
    args.out.write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
