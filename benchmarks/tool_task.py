"""The agentic task of `unirl recipe=grpo_tool` (the builtin lookup environment), learned through TRL on this CPU.

Usage: python benchmarks/tool_task.py [learning|loop|all] [SEEDS...]   (default: all, seeds 0 1 2)

learning: two `unirl -m seed=...` sweeps read back with `unirl compare`: the recipe as shipped, and the control with
  the tool removed (environment.kwargs.tool=false: every lookup answers "?"). Held-out accuracy on fresh episodes
  before and after, the first evaluated step at 0.8, steps and wall time per run. Chance is 0.1.
loop: what the episode loop costs against plain generation: 128 episodes of the (untrained) tiny model through
  unirl's loop (generation batched per turn, a fresh environment per episode, every environment call under its
  deadline, observations tokenized and appended) against one plain `generate` call of the same batch and token
  budget; the median of 5 repeats each, in one process, with the turns the loop ran.
Writes results/tool_task.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from _common import TARGET_ACCURACY, machine, save, sweep_and_compare, sweep_member

ARMS: dict[str, tuple[str, ...]] = {"with the tool": (), "tool removed (control)": ("environment.kwargs.tool=false",)}


def learning(seeds: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm, overrides in ARMS.items():
        command = ["unirl", "-m", "recipe=grpo_tool", "logging.progress=false", *overrides,
                   f"seed={','.join(map(str, seeds))}"]
        with sweep_and_compare(command) as sweep:
            members = sorted((sweep_member(p) for p in sweep.multirun.rglob("summary.json")),
                             key=lambda m: int(m["overrides"]["seed"]))
        after = [m["accuracy_after"] for m in members if m["accuracy_after"] is not None]
        out[arm] = {"command": command, "exit_code": sweep.process.returncode, "members": members,
                    "accuracy_after": after,
                    "reached_0.8": sum(1 for a in after if a >= TARGET_ACCURACY),
                    "wall_s": [m["wall_s"] for m in members]}
        print(arm, json.dumps({k: v for k, v in out[arm].items() if k not in ("members", "command")}))
    return out


def loop(repeats: int = 5, episodes: int = 128, budget: int = 12) -> dict[str, Any]:
    import torch

    from unirl.adapters.trl_environment import TrlEpisodes
    from unirl.data.builtin.tiny_model import build
    from unirl.host.manager import get_host

    torch.set_num_threads(1)
    model, tok = build("tiny-arith", 0)
    runner = TrlEpisodes(get_host().environments.get("lookup"), {}, tok=tok, rows_by_prompt={}, chat_template=False,
                         max_new_tokens=budget, temperature=1.0, top_p=1.0, timeout_s=30, max_turns=None, run_seed=0,
                         eos_ids={tok.eos_token_id}, suppress=None)
    prompts = [f"{i % 10}?" for i in range(episodes)]
    loop_times, plain_times, turns = [], [], []
    for r in range(repeats):
        torch.manual_seed(r)
        start = time.perf_counter()
        items = runner.run(model, prompts, list(range(r * episodes, (r + 1) * episodes)), greedy=False)
        loop_times.append(time.perf_counter() - start)
        turns.append(sum(len(i.episode.turns) for i in items if i.episode is not None))
        enc = tok(prompts, return_tensors="pt", padding=True)
        torch.manual_seed(r)
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(**enc, max_new_tokens=budget, do_sample=True, pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id)
        plain_times.append(time.perf_counter() - start)
    return {"episodes": episodes, "budget_tokens": budget, "loop_s_median": round(statistics.median(loop_times), 3),
            "plain_generate_s_median": round(statistics.median(plain_times), 3),
            "turns_per_repeat": turns,
            "loop_ms_per_turn": round(1000 * statistics.median(loop_times) / statistics.median(turns), 3),
            "ratio_loop_to_plain": round(statistics.median(loop_times) / statistics.median(plain_times), 2)}


def main() -> None:
    args = sys.argv[1:]
    which = args[0] if args and not args[0].isdigit() else "all"
    seeds = [int(a) for a in args if a.isdigit()] or [0, 1, 2]
    started = machine()
    result: dict[str, Any] = {}
    if which in ("loop", "all"):
        result["loop"] = loop()
        print("loop", json.dumps(result["loop"]))
    if which in ("learning", "all"):
        result["learning"] = learning(seeds)
    save("tool_task" if which == "all" else f"tool_task_{which}", result, started=started)


if __name__ == "__main__":
    main()
