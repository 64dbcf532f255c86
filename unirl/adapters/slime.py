"""slime's custom reward contract (vime shares it), fed by the run's reward specification.

slime imports ``--custom-rm-path`` as a DOTTED path (``load_function`` splits on the last dot), so the
flag is ``--custom-rm-path unirl.adapters.slime.reward`` (``unirl.adapters.vime.reward`` for vime), and
awaits ``reward(args, sample)``; with ``--group-rm`` it awaits ``batched_reward(args, samples)``. Each
returns a dict with fixed keys; the plan passes ``--reward-key score`` so slime trains on the total and
keeps the components on the sample. The spec path comes from ``$UNIRL_REWARD_SPEC`` (set through the
Ray job's runtime environment). Scoring runs in a thread, so slime's event loop keeps generating.

``sample.metadata`` is the row's ``--metadata-key`` column (slime/utils/data.py:237, 270-274 @624b824), copied onto
each of the prompt's samples (slime/rollout/data_source.py:107-118) and held-out samples alike (the eval dataset is
read by the same Dataset and copied per sample,
sglang_rollout.py:527-540, 569-576); unirl's slime exporter writes ``split`` and ``index`` there
(unirl/backend/export.py ``slime_row``), so each record says its step or that it is held out
(:func:`unirl.adapters.common.row_tags`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from unirl.adapters.common import native_row, runtime_for
from unirl.rewards.contract import Sample

TRUNCATED_STATUS = "truncated"  # slime.utils.types.Sample.Status.TRUNCATED.value


def sample_from_slime(native: Any) -> Sample:
    """slime's ``Sample`` (prompt str or chat messages, response, label, metadata, status) as a unirl sample."""
    prompt = native.prompt
    messages: tuple[dict[str, str], ...] = ()
    if isinstance(prompt, list):
        messages = tuple(dict(m) for m in prompt)
        prompt = "".join(str(m.get("content", "")) for m in prompt)
    status = getattr(native, "status", None)
    status_value = getattr(status, "value", status)
    length = getattr(native, "response_length", None)
    label = getattr(native, "label", None)
    return Sample(prompt=str(prompt or ""), completion=str(native.response or ""),
                  reference=None if label is None else str(label), data_source=str(_source(native)),
                  metadata=dict(getattr(native, "metadata", None) or {}), prompt_messages=messages,
                  truncated=str(status_value).lower() == TRUNCATED_STATUS,
                  completion_tokens=int(length) if length else None)


def _metadata(native: Any) -> dict[str, Any]:
    metadata = getattr(native, "metadata", None)
    return metadata if isinstance(metadata, dict) else {}


def _source(native: Any) -> str:
    metadata = getattr(native, "metadata", None) or {}
    return metadata.get("data_source", "") if isinstance(metadata, dict) else ""


RewardFn = Callable[..., Awaitable[Any]]


def adapters_for(backend: str) -> tuple[RewardFn, RewardFn]:
    async def reward(args: Any, sample: Any, **_: Any) -> dict[str, float] | list[dict[str, float]]:
        """Score one rollout sample; raises only when the recipe's error policy aborts the run.

        slime also passes a LIST here, without ``--group-rm``, when a custom generate function returned several
        samples (slime/rollout/sglang_rollout.py:270-279 @624b824): then one row per sample comes back.
        """
        if isinstance(sample, list):
            rows: list[dict[str, float]] = await batched_reward(args, sample)
            return rows
        row: dict[str, float] = (await batched_reward(args, [sample]))[0]
        return row

    async def batched_reward(args: Any, samples: list[Any], **_: Any) -> list[dict[str, float]]:
        """Score a group of samples (``--group-rm``) in one executor call."""
        runtime = runtime_for(backend)
        unirl_samples = [sample_from_slime(s) for s in samples]
        origins = [_metadata(s) for s in samples]
        scored = await asyncio.to_thread(runtime.score, unirl_samples, origins)
        return [native_row(s) for s in scored]

    return reward, batched_reward


reward, batched_reward = adapters_for("slime")
