"""unirl's environments as slime's (and vime's) custom generate function.

slime imports ``--custom-generate-function-path`` as a dotted path and awaits ``fn(args, sample, sampling_params,
evaluation=...)`` for every sample instead of its own ``generate`` (slime/rollout/sglang_rollout.py:238-258
@624b824a; vime/rollout/vllm_rollout.py ``generate_and_rm`` @052693a8, the same dispatch). The function owns the
whole episode and fills the ``Sample`` slime trains on (slime/utils/types.py:93-150): ``tokens`` (prompt then
response ids), ``response_length``, ``response``, ``loss_mask`` (1 under the model's tokens, 0 under observations),
``rollout_log_probs`` (0.0 under observations), ``status`` (TRUNCATED when the episode ran out of budget) and
``reward``. Setting ``reward`` makes slime skip ``--custom-rm-path`` for the sample (sglang_rollout.py:283: "Some
custom generate paths may have already filled the reward"), so the reward is the episode's whole score: its return
plus the recipe's rewards on the transcript, as the dict ``--reward-key score`` reads.

Each turn goes to the rollout engine slime already runs, over HTTP, token ids in and out:

- slime: SGLang's ``/generate`` on ``args.sglang_router_ip:port`` with ``input_ids``, ``sampling_params`` and
  ``return_logprob``, reading ``meta_info.output_token_logprobs`` (``[logprob, token_id, ...]`` per token) and
  ``meta_info.finish_reason`` (sglang_rollout.py:152-220);
- vime: the vLLM router's ``/inference/v1/generate`` on ``args.vllm_router_ip:port`` with ``token_ids`` and vLLM
  sampling parameters (``max_tokens``, ``logprobs: 1``), reading ``choices[0].token_ids``,
  ``choices[0].logprobs.content[].logprob`` and ``choices[0].finish_reason`` (vllm_rollout.py ``generate``,
  ``_build_inference_sampling_params``).

The environment's spec comes from ``$UNIRL_ENVIRONMENT_SPEC`` (the plan's environment, passed to train.py's Ray
processes as ``UNIRL_REWARD_SPEC`` is). The tokenizer is the checkpoint's (``args.hf_checkpoint``), as slime's
``GenerateState`` loads it. What slime loses: per-turn rewards reach the advantage as their sum.
"""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.request
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from unirl.adapters.episodes import episodes_from_env
from unirl.environments.tokens import ChatRendering, Generated, drive_episode, eos_ids_of
from unirl.rewards.contract import Sample as UnirlSample

HTTP_TIMEOUT_S = 600.0  # one turn of a rollout engine; a hung engine fails the episode instead of the run hanging

# One pooled asyncio HTTP client per event loop (aiohttp: SGLang's and vLLM's servers are built on it and it comes with
# both), so that every episode's turns are in flight at once on kept-alive connections. A thread per request (urllib in
# asyncio.to_thread) caps the turns in flight at the default executor's size (32 on a GPU node) and costs a connection
# each; httpx's pool was slower still at hundreds of requests in flight: measured in benchmarks/slime_turns.py. Not
# slime's own http_utils.post: it waits without a deadline (httpx.Timeout(None), up to 60 retries a second apart) and
# has a client only once slime's rollout called init_http_client, which vime does not.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _client() -> Any:
    """The running loop's pooled session, or None where aiohttp is not installed."""
    try:
        import aiohttp
    except ImportError:
        return None
    loop = asyncio.get_running_loop()
    session = _clients.get(loop)
    if session is None or session.closed:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                        timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S))
        _clients[loop] = session
    return session


async def close_client() -> None:
    """Close the running loop's session (slime's loop lives as long as its process; a short-lived loop closes it)."""
    session = _clients.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


def _answer(url: str, answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ValueError(f"{url} answered {type(answer).__name__}, not a JSON object")
    return answer


def _post_blocking(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        return _answer(url, json.loads(response.read()))


async def _post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    """POST a JSON payload to the rollout engine and return its JSON object (an error status raises)."""
    client = _client()
    if client is None:
        return await asyncio.to_thread(_post_blocking, url, payload)
    async with client.post(url, json=payload) as response:
        response.raise_for_status()
        return _answer(url, await response.json(content_type=None))


async def sglang_turn(args: Any, context: list[int], left: int, sampling_params: Mapping[str, Any]) -> Generated:
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    payload = {"input_ids": context, "sampling_params": {**sampling_params, "max_new_tokens": left},
               "return_logprob": True}
    meta = (await _post(url, payload)).get("meta_info") or {}
    pairs = meta.get("output_token_logprobs") or []
    return Generated([int(p[1]) for p in pairs], [float(p[0]) for p in pairs])


async def vllm_router_turn(args: Any, context: list[int], left: int,
                           sampling_params: Mapping[str, Any]) -> Generated:
    url = f"http://{args.vllm_router_ip}:{args.vllm_router_port}/inference/v1/generate"
    params: dict[str, Any] = {"max_tokens": left, "temperature": sampling_params.get("temperature", 1.0),
                              "top_p": sampling_params.get("top_p", 1.0), "logprobs": 1}
    for key in ("top_k", "stop", "stop_token_ids", "seed"):
        if sampling_params.get(key) not in (None, [], ""):
            params[key] = sampling_params[key]
    choice = (await _post(url, {"model": args.hf_checkpoint, "token_ids": context,
                                "sampling_params": params}))["choices"][0]
    tokens = [int(t) for t in choice.get("token_ids") or []]
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = [float(item.get("logprob", 0.0)) for item in content] if len(content) == len(tokens) else None
    return Generated(tokens, logprobs)


Turn = Callable[[Any, list[int], int, Mapping[str, Any]], Any]


@functools.cache
def _tokenizer(checkpoint: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)


async def run_episode(backend: str, turn: Turn, args: Any, sample: Any, sampling_params: dict[str, Any]) -> Any:
    episodes = episodes_from_env(backend)
    tok = _tokenizer(str(args.hf_checkpoint))
    rendering = ChatRendering(tok, chat_template=episodes.settings.chat_template)
    eos_ids = eos_ids_of(tok)
    metadata = dict(getattr(sample, "metadata", None) or {})
    label = getattr(sample, "label", None)
    reference = None if label is None or label == "" else str(label)
    runner = episodes.runner(sample.prompt, reference, {k: v for k, v in metadata.items()
                                                        if k not in ("split", "index")})
    # slime's budget for the response (--rollout-max-response-len) and the episode's own, whichever is smaller
    budget = min(int(sampling_params.get("max_new_tokens") or episodes.settings.max_new_tokens),
                 episodes.settings.max_new_tokens)
    params = {k: v for k, v in sampling_params.items() if k != "max_new_tokens"}

    async def generate(context: list[int], left: int) -> Generated:
        found: Generated = await turn(args, context, left, params)
        return found

    item = await drive_episode(runner, rendering, generate, budget=budget, eos_ids=eos_ids)
    episode = item.episode
    assert episode is not None
    transcript = tok.decode(item.completion_ids, skip_special_tokens=True)
    ends = bool(item.completion_ids) and item.completion_ids[-1] in eos_ids
    prompt = sample.prompt if isinstance(sample.prompt, str) else "".join(
        str(m.get("content", "")) for m in sample.prompt)
    scored = UnirlSample(prompt=prompt, completion=transcript, reference=reference,
                         data_source=str(metadata.get("data_source", "")), metadata=metadata,
                         truncated=not ends, completion_tokens=sum(item.env_mask))
    score = await asyncio.to_thread(episodes.score, item, scored, metadata)
    completion = item.completion_ids or [next(iter(eos_ids))]
    sample.tokens = [*item.prompt_ids, *completion]
    sample.response_length = len(completion)
    sample.response = transcript
    sample.loss_mask = item.env_mask or [0]
    sample.rollout_log_probs = item.logprobs if item.logprobs else [0.0] * len(completion)
    status = type(sample).Status
    sample.status = status.TRUNCATED if episode.termination == "truncated" else status.COMPLETED
    metrics = episode.metrics()
    sample.reward = {"score": score, "environment": float(episode.return_), "env/failed": float(episode.failed),
                     **{f"env/{k}": float(metrics.get(k, 0.0)) for k in ("turns", "truncated", *episodes.spec.metrics)}}
    return sample


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's ``--custom-generate-function-path unirl.adapters.slime_environment.generate`` (SGLang)."""
    return await run_episode("slime", sglang_turn, args, sample, sampling_params)


async def vime_generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """vime's ``--custom-generate-function-path unirl.adapters.slime_environment.vime_generate`` (vLLM router)."""
    return await run_episode("vime", vllm_router_turn, args, sample, sampling_params)
