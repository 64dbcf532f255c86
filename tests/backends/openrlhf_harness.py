"""Drive unirl samples through OpenRLHF's own single-turn reward code (run under .venvs/openrlhf/bin/python).

Built by ``scripts/backend_venv.sh openrlhf``. unirl's tests run this script in that venv as a subprocess, so a
reward adapter is proven by OpenRLHF 0.11.2 itself, not by a re-implementation of its contract:

    .venvs/openrlhf/bin/python tests/backends/openrlhf_harness.py \
        (--reward-file /abs/reward.py | --remote-url http://127.0.0.1:PORT/path) \
        --samples samples.jsonl --out out.json [--eos-text '</s>'] [--apply-chat-template] [--timing]

Per sample (one JSON line: ``{"prompt", "completion", "reference", "data_source", "metadata", ...}``):

1. ``openrlhf.utils.agent.SingleTurnAgentExecutor(remote_rm_url)``: OpenRLHF loads the ``.py`` file itself
   (``spec_from_file_location("reward_func", path)``) or keeps the URL list.
2. ``executor.execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)``: OpenRLHF's own
   rollout step. It tokenizes the prompt (``add_special_tokens=False``), asks ``llm_engine.generate`` for a
   continuation, builds ``query = tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)``, calls
   ``reward_func([query], [prompt], [label])`` in a thread (or POSTs ``{"query", "prompts", "labels"}``), and reads
   ``rewards``/``scores``/``extra_logs``, swallowing any failure into ``reward=None``. The only stand-in is the
   engine (``_ScriptedEngine``): instead of vLLM sampling it "generates" the sample's completion followed by the
   EOS token, returned in the shape of ``RolloutRayActor.generate`` (a vLLM ``RequestOutput``).
3. ``SamplesGenerator._process_response_into_experience(response, max_len=...)``: OpenRLHF turns the response dict
   into an ``Experience``; the numbers written to ``--out`` are read back from that Experience's tensors
   (``rewards``, ``scores``, ``info[<extra_log key>]``).

The tokenizer is a byte-level BPE built locally with ``tokenizers`` (no hub): ``<s>``, ``</s>`` (EOS),
``<pad>``, ``<|im_start|>``, ``<|im_end|>`` as special tokens and a ChatML chat template. Byte-level means
``decode(encode(text)) == text`` for any text, so the query is exactly ``prompt + completion + eos_text``.

Output: ``{"results": [{"reward", "score", "extra_logs", "reward_shape", "score_shape", "log", "error"}],
"seconds", "openrlhf_version"}``. ``reward``/``score`` are floats or null (null = OpenRLHF recorded no reward,
i.e. it swallowed a failure; the swallowed message is in ``log``); ``error`` is set when OpenRLHF's own code
raised outside its try/except (in training that aborts the rollout). Non-finite floats become null.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import importlib.metadata
import json
import logging
import math
import sys
import time
import types
from pathlib import Path
from typing import Any

# --- GPU-only import stubs ---------------------------------------------------------------------------------------
# SamplesGenerator (samples_generator.py:7-10) imports vLLM at module level although the response processing used
# here never touches it; unirl's shared import stubs (unirl/plugins/openrlhf/import_stubs.py, which cites each
# import) stand in where vLLM or flash-attn is absent, and raise if ever called.
_STUBBED: list[str] = []


def _install_vllm_import_stubs() -> None:
    from unirl.plugins.openrlhf import import_stubs

    if not _STUBBED:
        _STUBBED.extend(import_stubs.install() or ["none"])


# --- tokenizer ---------------------------------------------------------------------------------------------------
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "The answer is \\boxed{42}. Let me think step by step.",
    "def add(a, b):\n    return a + b\n",
    "Question: what is 2 + 2? Answer: 4",
    "unicode: héllo wörld ✓ 数学 αβγ 🙂",
]


def build_tokenizer(eos_text: str):
    """A byte-level BPE tokenizer made locally (no hub), wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    extra = [eos_text] if eos_text and eos_text not in SPECIAL_TOKENS else []
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token=eos_text or "</s>", pad_token="<pad>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>", *extra],
        chat_template=CHATML_TEMPLATE, clean_up_tokenization_spaces=False,
    )


# --- the engine stand-in -----------------------------------------------------------------------------------------
class _ScriptedEngine:
    """Stands in for OpenRLHF's RolloutRayActor (vllm_engine.py ``generate``): returns a RequestOutput-shaped
    object whose ``outputs[0]`` holds the scripted completion's token ids (plus EOS), like vLLM does when a
    sequence stops on EOS (``finish_reason="stop"``; ``"length"`` when there is no EOS)."""

    def __init__(self, response_ids: list[int], finish_reason: str):
        self.response_ids = response_ids
        self.finish_reason = finish_reason
        self.calls: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.calls.append(list(prompt_token_ids))
        out = types.SimpleNamespace(token_ids=list(self.response_ids), finish_reason=self.finish_reason,
                                    logprobs=None)
        return types.SimpleNamespace(outputs=[out], prompt_token_ids=list(prompt_token_ids))


# --- JSON helpers ------------------------------------------------------------------------------------------------
def _scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _tensor_to_json(t) -> Any:
    if t is None:
        return None
    values = t.detach().cpu().flatten().tolist()
    if len(values) == 1:
        return _scalar(values[0])
    return [_scalar(v) for v in values]


def _as_float(t) -> float | None:
    """The one number an Experience holds for a sample; None when absent, non-finite or not one element."""
    if t is None or t.numel() != 1:
        return None
    value = float(t.detach().cpu().flatten()[0].item())
    return value if math.isfinite(value) else None


# --- log capture (OpenRLHF logs, and swallows, reward failures at INFO) -----------------------------------------
_current_log: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("_current_log", default=None)


class _PerSampleLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        sink = _current_log.get()
        if sink is not None:
            sink.append(record.getMessage())


# --- main --------------------------------------------------------------------------------------------------------
def _load_samples(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or "prompt" not in row or "completion" not in row:
            raise SystemExit(f"{path}:{n}: a sample needs at least 'prompt' and 'completion'")
        rows.append(row)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--reward-file", type=Path, help="a .py file defining reward_func(queries, prompts, labels)")
    src.add_argument("--remote-url", help="HTTP reward endpoint(s); comma-separated like --reward.remote_url")
    p.add_argument("--samples", type=Path, required=True, help="unirl samples, one JSON object per line")
    p.add_argument("--out", type=Path, required=True, help="where to write the results JSON")
    p.add_argument("--eos-text", default="</s>",
                   help="EOS token text appended to every completion (default: </s>, the tokenizer's EOS); "
                        "'' appends nothing (a truncated generation)")
    p.add_argument("--apply-chat-template", action="store_true",
                   help="render each prompt with OpenRLHF's preprocess_data + the tokenizer's ChatML template, "
                        "as --data.apply_chat_template does (prompt_messages are used when a sample has them)")
    p.add_argument("--concurrency", type=int, default=1,
                   help="samples in flight at once (OpenRLHF runs n_samples_per_prompt executes concurrently)")
    p.add_argument("--timing", action="store_true", help="report the seconds spent scoring all samples")
    return p.parse_args(argv)


async def _score_all(args, executor, tokenizer, samples, SamplesGenerator) -> list[dict]:
    generator = SamplesGenerator.__new__(SamplesGenerator)  # the method reads no state; __init__ needs Ray/vLLM
    eos_ids = tokenizer(args.eos_text, add_special_tokens=False)["input_ids"] if args.eos_text else []
    sem = asyncio.Semaphore(max(1, args.concurrency))
    render = None
    if args.apply_chat_template:
        from openrlhf.datasets.prompts_dataset import preprocess_data

        render = preprocess_data

    async def one(row: dict) -> dict:
        log: list[str] = []
        _current_log.set(log)
        result: dict[str, Any] = {"reward": None, "score": None, "extra_logs": {}, "reward_shape": None,
                                  "score_shape": None, "log": log, "error": None}
        try:
            label = row.get("reference")
            prompt = row["prompt"]
            if render is not None:
                data = {"input": row.get("prompt_messages") or prompt, "label": label}
                prompt, label = render(data, input_key="input", label_key="label",
                                       apply_chat_template=tokenizer.apply_chat_template)
            truncated = bool(row.get("truncated"))
            response_ids = tokenizer(row["completion"], add_special_tokens=False)["input_ids"]
            if not truncated:
                response_ids = response_ids + eos_ids
            engine = _ScriptedEngine(response_ids, "length" if truncated or not eos_ids else "stop")
            sampling_params = types.SimpleNamespace(max_tokens=None, logprobs=None)  # what execute() reads
            max_length = 1 << 30  # no prompt truncation: the samples decide the lengths
            async with sem:
                response = await executor.execute(prompt=prompt, label=label, sampling_params=sampling_params,
                                                  max_length=max_length, hf_tokenizer=tokenizer,
                                                  llm_engine=engine)
            exp = generator._process_response_into_experience(response, max_len=len(response["observation_tokens"]))
            result["reward"] = _as_float(exp.rewards)
            result["score"] = _as_float(exp.scores)
            result["reward_shape"] = list(exp.rewards.shape) if exp.rewards is not None else None
            result["score_shape"] = list(exp.scores.shape) if exp.scores is not None else None
            result["extra_logs"] = {k: _tensor_to_json(exp.info[k]) for k in (response.get("extra_logs") or {})}
        except Exception as e:  # OpenRLHF's own code raised outside its try/except
            result["error"] = f"{type(e).__name__}: {e}"
        return result

    return list(await asyncio.gather(*(one(row) for row in samples)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    samples = _load_samples(args.samples)
    if args.reward_file is not None:
        endpoint: str | list[str] = str(args.reward_file.resolve())
    else:
        endpoint = [u.strip() for u in args.remote_url.split(",") if u.strip()]  # train_ppo_ray.py splits on ','

    _install_vllm_import_stubs()
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    handler = _PerSampleLog(level=logging.INFO)
    agent_logger = logging.getLogger("openrlhf.utils.agent")
    agent_logger.addHandler(handler)
    agent_logger.setLevel(logging.INFO)

    tokenizer = build_tokenizer(args.eos_text)
    executor = SingleTurnAgentExecutor(endpoint)

    start = time.perf_counter()
    results = asyncio.run(_score_all(args, executor, tokenizer, samples, SamplesGenerator))
    seconds = time.perf_counter() - start

    out = {
        "results": results,
        "seconds": seconds if args.timing else None,
        "openrlhf_version": importlib.metadata.version("openrlhf"),
        "vllm_stubbed": "vllm" in _STUBBED,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
