"""Score unirl samples through verl's own reward manager (verl 0.9.1), on the CPU, without Ray.

Runs under the verl venv (`scripts/backend_venv.sh verl` builds `.venvs/verl`), never the main venv:

    .venvs/verl/bin/python tests/backends/verl_harness.py \\
        --reward-file my_reward.py [--reward-name compute_score] \\
        --samples samples.jsonl --out out.json \\
        [--reward-kwargs '{"scale": 2.0}'] [--mode single|batch] [--layout padded|stream] [--no-eos] [--timing]

What it does, in verl's own terms:
- composes verl's shipped `ppo_trainer` config with Hydra and the overrides a unirl plugin would emit
  (`reward.custom_reward_function.path/.name`, `+reward.custom_reward_function.reward_kwargs.<k>=<v>`);
- builds a byte-level tokenizer locally (any unicode round-trips), saves it, and points
  `actor_rollout_ref.model.path` at it, so verl loads it exactly as its reward worker does;
- hand-builds the `DataProto` that verl's agent loop hands to the reward loop:
  `--layout padded` (default): the post-rollout batch (`AgentLoopWorker._postprocess`): left-padded prompts,
      right-padded responses ending with EOS, attention mask, `data_source`, `reward_model`
      (`{"style": "rule", "ground_truth": reference}`), `extra_info` (= metadata), `raw_prompt`, `__num_turns__`;
  `--layout stream`: the per-trajectory batch that `AgentLoopWorker._compute_score` streams to a reward worker
      during training with a rule reward (unpadded; `tool_extra_fields` carries raw_prompt/turn_scores/tool_rewards,
      which the naive manager merges into `extra_info`);
- scores it: `--mode single`: `load_reward_manager(cfg, tok)` then `run_single(data[i:i+1])` per sample;
  `--mode batch`: one `RewardLoopWorker(cfg).compute_score_batch(data)` call (stream layout: one
  `asyncio.gather` of `RewardLoopWorker.compute_score` over the per-trajectory batches, as the agent loop does);
- then applies verl's batch assembly to the outputs (`assemble_rm_scores` and the per-key
  `np.array([info[key] ...])` of `RewardLoopManager.compute_rm_score` / `AgentLoopWorker._postprocess`),
  which is where an inconsistent `reward_extra_info` key schema breaks.

Output JSON: {"results": [{"score": float, "extra": {...reward_extra_info...}}, ...] (sample order),
"scoring_seconds": float|null, "verl_version": str, ...diagnostics}. NaN/inf are written as the JSON
extensions NaN/Infinity (Python's json reads them). On a reward error the file holds {"error": {...}} and the
exit status is 1. Exit 2: bad arguments or samples; 3: verl environment missing; 4: harness self-check failed.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

PROG = "verl_harness"
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3; byte b has id len(SPECIAL_TOKENS) + b
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class HarnessError(Exception):
    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Score unirl samples through verl's reward manager.")
    p.add_argument("--reward-file", required=True, help="python file defining the reward function (or pkg://mod)")
    p.add_argument("--reward-name", default="compute_score", help="function name in the file (default compute_score)")
    p.add_argument("--samples", required=True, help="unirl canonical samples, one JSON object per line")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    p.add_argument(
        "--reward-kwargs", default=None, help="JSON object, passed as reward.custom_reward_function.reward_kwargs"
    )
    p.add_argument("--mode", choices=["single", "batch"], default="single")
    p.add_argument("--layout", choices=["padded", "stream"], default="padded")
    p.add_argument("--no-eos", action="store_true", help="responses end without EOS (as if cut at max length)")
    p.add_argument("--timing", action="store_true", help="record wall seconds of the scoring phase")
    return p.parse_args(argv)


def load_samples(path: str) -> list[dict]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise HarnessError(f"cannot read --samples {path}: {e}") from e
    samples = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise HarnessError(f"{path}:{lineno}: not JSON: {e}") from e
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise HarnessError(f"{where}: a sample must be a JSON object")
        prompt = row.get("prompt")
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        elif isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
            messages = prompt
        else:
            raise HarnessError(f"{where}: 'prompt' must be a string (or a list of chat messages)")
        if not isinstance(row.get("completion"), str):
            raise HarnessError(f"{where}: 'completion' must be a string")
        if row.get("reference") is not None and not isinstance(row["reference"], str):
            raise HarnessError(f"{where}: 'reference' must be a string or null")
        if not isinstance(row.get("data_source"), str):
            raise HarnessError(f"{where}: 'data_source' must be a string")
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise HarnessError(f"{where}: 'metadata' must be an object")
        samples.append(
            {
                "messages": messages,
                "completion": row["completion"],
                "reference": row.get("reference"),
                "data_source": row["data_source"],
                "metadata": metadata,
            }
        )
    if not samples:
        raise HarnessError(f"{path}: no samples")
    return samples


def parse_reward_kwargs(raw: str | None) -> dict:
    if raw is None:
        return {}
    try:
        kw = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HarnessError(f"--reward-kwargs is not JSON: {e}") from e
    if not isinstance(kw, dict):
        raise HarnessError("--reward-kwargs must be a JSON object")
    for k in kw:
        if not _KEY_RE.match(k):
            raise HarnessError(f"--reward-kwargs key {k!r} is not a plain identifier (Hydra override key)")
    return kw


# --------------------------------------------------------------------------------------------- hydra overrides


def _hydra_str(s: str) -> str:
    # Hydra quoted strings: only backslashes that precede a quote (or the closing quote) are escapes;
    # `${` would start an interpolation, so escape it too.
    out = s.replace("${", "\\${")
    out = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", out)
    out = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, out)
    return "'" + out + "'"


def hydra_literal(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _hydra_str(v)
    if isinstance(v, list):
        return "[" + ",".join(hydra_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        for k in v:
            if not _KEY_RE.match(str(k)):
                raise HarnessError(f"--reward-kwargs nested key {k!r} is not a plain identifier")
        return "{" + ",".join(f"{k}:{hydra_literal(x)}" for k, x in v.items()) + "}"
    raise HarnessError(f"--reward-kwargs value of type {type(v).__name__} is not supported")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# --------------------------------------------------------------------------------------------- tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-char map (the one tokenizers' ByteLevel pre-tokenizer/decoder use)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def build_tokenizer(directory: str) -> None:
    """A byte-level tokenizer (no merges): one token per UTF-8 byte, so every string round-trips."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for b, ch in _bytes_to_unicode().items():
        vocab[ch] = len(SPECIAL_TOKENS) + b
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(directory)


def byte_ids(text: str) -> list[int]:
    # Token ids straight from the UTF-8 bytes: a literal "</s>" in a completion stays text, as it would when a
    # model generated it byte by byte, instead of being matched as the EOS special token by tokenizer.encode.
    off = len(SPECIAL_TOKENS)
    return [off + b for b in text.encode("utf-8")]


# --------------------------------------------------------------------------------------------- DataProto


def _object_array(values: list) -> Any:
    import numpy as np

    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # element by element: a list value must not become a 2-D array
        arr[i] = v
    return arr


def encode_samples(samples: list[dict], tok: Any, eos: bool) -> list[tuple[list[int], list[int]]]:
    """(prompt_ids, response_ids) per sample, as the single-turn agent loop produces them."""
    out = []
    for s in samples:
        prompt_text = tok.apply_chat_template(s["messages"], tokenize=False, add_generation_prompt=True)
        response = byte_ids(s["completion"]) + ([EOS_ID] if eos else [])
        out.append((byte_ids(prompt_text), response))
    return out


def _row_fields(s: dict, index: int) -> dict:
    """The dataset row's non-tensor fields (RLHFDataset): what reaches the agent loop as kwargs."""
    return {
        "data_source": s["data_source"],
        "reward_model": {"style": "rule", "ground_truth": s["reference"]},
        "extra_info": copy.deepcopy(s["metadata"]),
        "raw_prompt": s["messages"],
        "index": index,
    }


def build_padded(samples: list[dict], encoded: list[tuple[list[int], list[int]]]) -> Any:
    """The post-rollout batch of AgentLoopWorker._postprocess (verl/experimental/agent_loop/agent_loop.py)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    n = len(samples)
    plen = max(len(p) for p, _ in encoded)
    rlen = max(1, max(len(r) for _, r in encoded))
    prompts = torch.full((n, plen), PAD_ID, dtype=torch.long)
    responses = torch.full((n, rlen), PAD_ID, dtype=torch.long)
    pmask = torch.zeros((n, plen), dtype=torch.long)
    rmask = torch.zeros((n, rlen), dtype=torch.long)
    for i, (p, r) in enumerate(encoded):
        if p:
            prompts[i, plen - len(p) :] = torch.tensor(p)
            pmask[i, plen - len(p) :] = 1
        if r:
            responses[i, : len(r)] = torch.tensor(r)
            rmask[i, : len(r)] = 1
    attention_mask = torch.cat([pmask, rmask], dim=1)
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": rmask.clone(),
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),
        },
        batch_size=n,
    )
    rows = [_row_fields(s, i) for i, s in enumerate(samples)]
    non_tensor = {
        "data_source": _object_array([r["data_source"] for r in rows]),
        "reward_model": _object_array([r["reward_model"] for r in rows]),
        "extra_info": _object_array([r["extra_info"] for r in rows]),
        "raw_prompt": _object_array([r["raw_prompt"] for r in rows]),
        "index": np.arange(n),
        "__num_turns__": np.full(n, 2, dtype=np.int32),  # single-turn agent loop: user + assistant
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def build_stream(samples: list[dict], encoded: list[tuple[list[int], list[int]]]) -> list[Any]:
    """One batch per trajectory, as AgentLoopWorker._compute_score builds it (agent_loop.py, `_compute_score`)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    out = []
    for i, (s, (p, r)) in enumerate(zip(samples, encoded, strict=True)):
        input_ids = torch.tensor(p + r, dtype=torch.long)
        batch = TensorDict(
            {
                "prompts": torch.tensor(p, dtype=torch.long).unsqueeze(0),
                "responses": torch.tensor(r, dtype=torch.long).unsqueeze(0),
                "attention_mask": torch.ones_like(input_ids).unsqueeze(0),
                "input_ids": input_ids.unsqueeze(0),
                "position_ids": torch.arange(len(input_ids)).unsqueeze(0),
            },
            batch_size=1,
        )
        kwargs = _row_fields(s, i)
        extra_fields = {"raw_prompt": kwargs["raw_prompt"], "turn_scores": [], "tool_rewards": []}
        non_tensor = {
            **{k: np.array([v]) for k, v in kwargs.items()},  # verl: np.array([v] * n): data_source becomes np.str_
            "__num_turns__": np.array([2]),
            "tool_extra_fields": np.array([extra_fields], dtype=object),
            "prompt_len": np.array([len(p)]),
            "response_len": np.array([len(r)]),
        }
        out.append(DataProto(batch=batch, non_tensor_batch=non_tensor))
    return out


def decode_check(items: list[Any], tok: Any, samples: list[dict]) -> None:
    """Decode each response exactly as NaiveRewardManager.run_single does and compare with the completion."""
    for i, data in enumerate(items):
        item = data[-1:][0]
        response_ids = item.batch["responses"]
        valid = item.batch["attention_mask"][-response_ids.shape[-1] :].sum()
        text = tok.decode(response_ids[:valid], skip_special_tokens=True)
        if text != samples[i]["completion"]:
            raise HarnessError(
                f"self-check: sample {i}: verl would decode {text[:80]!r}... but the completion is "
                f"{samples[i]['completion'][:80]!r}...",
                code=4,
            )


# --------------------------------------------------------------------------------------------- output


def jsonable(x: Any) -> Any:
    import numpy as np

    if x is None or isinstance(x, bool):
        return x
    if isinstance(x, str):
        return str(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, np.ndarray):
        return [jsonable(v) for v in x.tolist()]
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set | frozenset):
        return [jsonable(v) for v in x]
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return jsonable(x.tolist())
    except ImportError:
        pass
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(x, DictConfig | ListConfig):
            return jsonable(OmegaConf.to_container(x, resolve=True))
    except ImportError:
        pass
    return repr(x)


def score_value(x: Any) -> Any:
    """A real number becomes a float; anything else (None, bool, str, ...) is kept, JSON-safe, for tests to see."""
    import numpy as np

    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    return jsonable(x)


def assemble_check(layout: str, items: list[Any], outputs: list[dict]) -> dict:
    """What verl does next with the per-sample outputs: the rm_scores tensor and one np.array per extra key."""
    import numpy as np
    import torch

    report: dict[str, Any] = {"ok": True, "error": None, "reward_extra_keys": None, "extra_dtypes": None}
    try:
        scores = [o["reward_score"] for o in outputs]
        if layout == "padded":
            from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

            rm = RewardManagerBase.assemble_rm_scores(items[0], scores)  # RewardLoopManager.compute_rm_score
        else:
            # AgentLoopWorker._postprocess: rm_scores only if every score is not None.
            if not all(s is not None for s in scores):
                raise ValueError("a score is None: AgentLoopWorker._postprocess leaves out batch['rm_scores']")
            rm = torch.tensor(scores, dtype=torch.float32)
        sums = rm.sum(-1).tolist() if rm.dim() > 1 else rm.tolist()
        report["rm_scores_sum"] = jsonable(sums)
        infos = [o.get("reward_extra_info", {}) for o in outputs]
        keys = list(infos[0].keys())
        report["reward_extra_keys"] = keys
        arrays = {key: np.array([info[key] for info in infos]) for key in keys}
        report["extra_dtypes"] = {
            k: str(a.dtype) + ("" if a.ndim == 1 else f"{list(a.shape)}") for k, a in arrays.items()
        }
    except Exception as e:
        report["ok"] = False
        report["error"] = f"{type(e).__name__}: {e}"
    return report


def write_json(path: str, payload: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, ensure_ascii=False)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    samples = load_samples(args.samples)
    reward_kwargs = parse_reward_kwargs(args.reward_kwargs)
    reward_file = args.reward_file
    if not reward_file.startswith("pkg://"):
        reward_file = str(Path(reward_file.removeprefix("file://")).resolve())
        if not Path(reward_file).is_file():
            raise HarnessError(f"--reward-file not found: {args.reward_file}")

    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import verl
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import OmegaConf
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
        from verl.trainer.ppo.reward import load_reward_manager
        from verl.utils import hf_tokenizer
    except ImportError as e:
        raise HarnessError(
            f"cannot import verl's reward path ({e}); run under .venvs/verl/bin/python "
            "(build it with scripts/backend_venv.sh verl)",
            code=3,
        ) from e
    t_import = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="unirl-verl-harness-") as tmp:
        tok_dir = os.path.join(tmp, "tokenizer")
        build_tokenizer(tok_dir)

        config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
        overrides = [
            f"actor_rollout_ref.model.path={_hydra_str(tok_dir)}",
            "actor_rollout_ref.rollout.name=vllm",  # mandatory (???) in rollout.yaml; nothing is launched
            f"reward.custom_reward_function.path={_hydra_str(reward_file)}",
            f"reward.custom_reward_function.name={_hydra_str(args.reward_name)}",
        ]
        overrides += [
            f"+reward.custom_reward_function.reward_kwargs.{k}={hydra_literal(v)}" for k, v in reward_kwargs.items()
        ]
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=config_dir, version_base=None):
                cfg = compose(config_name="ppo_trainer", overrides=overrides)
        except Exception as e:
            raise HarnessError(f"verl config did not compose: {type(e).__name__}: {e}") from e
        if reward_kwargs:
            got = OmegaConf.to_container(cfg.reward.custom_reward_function.reward_kwargs, resolve=True)
            if not _same(got, reward_kwargs):
                raise HarnessError(f"self-check: reward_kwargs came through Hydra as {got!r}, not {reward_kwargs!r}", 4)
        t_compose = time.perf_counter()

        tok = hf_tokenizer(tok_dir, trust_remote_code=True)  # as RewardLoopWorker._init_reward_fn loads it
        encoded = encode_samples(samples, tok, eos=not args.no_eos)
        items = [build_padded(samples, encoded)] if args.layout == "padded" else build_stream(samples, encoded)
        if args.layout == "padded":
            decode_check([items[0][i : i + 1] for i in range(len(samples))], tok, samples)
        else:
            decode_check(items, tok, samples)
        t_build = time.perf_counter()

        try:
            if args.mode == "single":
                manager = load_reward_manager(cfg, tok)
                loop = manager.loop
                t_setup = time.perf_counter()
                if args.layout == "padded":  # the caller's slicing is part of the scoring cost, as in batch mode
                    n = len(samples)
                    outputs = [loop.run_until_complete(manager.run_single(items[0][i : i + 1])) for i in range(n)]
                else:
                    outputs = [loop.run_until_complete(manager.run_single(d)) for d in items]
            else:
                worker = RewardLoopWorker(cfg)
                loop = worker.loop
                t_setup = time.perf_counter()
                if args.layout == "padded":
                    outputs = loop.run_until_complete(worker.compute_score_batch(items[0]))
                else:
                    import asyncio

                    async def _gather():
                        return await asyncio.gather(*(worker.compute_score(d) for d in items))

                    outputs = loop.run_until_complete(_gather())
            t_score = time.perf_counter()
        except Exception as e:
            raise RewardError(e) from e

    results = [
        {"score": score_value(o.get("reward_score")), "extra": jsonable(o.get("reward_extra_info", {}))}
        for o in outputs
    ]
    assembly = assemble_check(args.layout, items, outputs)
    if not assembly["ok"]:
        print(f"{PROG}: warning: verl's batch assembly would fail: {assembly['error']}", file=sys.stderr)
    payload: dict[str, Any] = {
        "results": results,
        "scoring_seconds": (t_score - t_setup) if args.timing else None,
        "verl_version": getattr(verl, "__version__", "unknown"),
        "mode": args.mode,
        "layout": args.layout,
        "eos": not args.no_eos,
        "assembly": assembly,
    }
    if args.timing:
        payload["phase_seconds"] = {
            "load_and_import": t_import - t0,
            "compose": t_compose - t_import,
            "build_data": t_build - t_compose,
            "manager_setup": t_setup - t_build,
            "scoring": t_score - t_setup,
        }
    return payload


class RewardError(Exception):
    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        payload = run(args)
    except HarnessError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.code
    except RewardError as e:
        cause = e.cause
        tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
        print(f"{PROG}: the reward failed inside verl's reward manager (loading or scoring):\n{tb}", file=sys.stderr)
        write_json(args.out, {"error": {"type": type(cause).__name__, "message": str(cause), "traceback": tb}})
        return 1
    write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
