"""verl's custom reward contract, fed by the run's reward specification.

verl (0.9.x) loads this FILE through ``reward.custom_reward_function.path`` (name ``compute_score``) and
calls, by keyword, ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **kw)``
(verl/experimental/reward_loop/reward_manager/naive.py:34-99). The ``reward_kwargs`` verl merges into
every call carry ``unirl_spec``, the path of the run's spec, so nothing has to reach verl's Ray reward
workers through their environment. The returned dict always has the same keys (``score``, each reward,
each ``<reward>/<component>``, ``unirl/reward_errors``): verl takes the key list from the first sample
and KeyErrors or silently drops keys that differ (verl/experimental/reward_loop/reward_loop.py:365-369).
A failed call is NaN in its own key, counted in ``unirl/reward_errors``, and ``score`` follows the
recipe's policy (fallback or abort: verl needs a number for every sample).

``extra_info`` is the dataset row's own column: RLHFDataset keeps it on the row (verl/utils/dataset/rl_dataset.py:
386-411, 0.9.1), the reward manager reads it from the batch and adds its own keys (naive.py:43-52). unirl's verl
exporter writes ``split``, ``index`` and ``unirl_prompt`` there (unirl/backend/export.py ``verl_row``), so a row of
unirl's file says which step it trains in (:func:`unirl.adapters.common.row_tags`). Only a row carrying
``unirl_prompt`` is taken for one of unirl's: verl's own example preprocessors write ``split`` and ``index`` too
(examples/data_preprocess/gsm8k.py), with other meanings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unirl.adapters.common import native_row, runtime_for
from unirl.rewards.contract import Sample

# Keys verl's reward-loop manager adds to extra_info before the call (naive.py:44-52): not the user's data.
TRUNCATED_KEY = "unirl_truncated"
"""Set by unirl's single-turn loop (unirl/adapters/verl_single_turn.py): the completion was cut at the token limit."""
# What verl's reward manager adds to a row's extra_info (naive.py:44-50 @ 0.9.1: the agent loop's extra fields, among
# them raw_prompt, agent_loop.py:730), none of it the row's metadata.
VERL_ADDED_KEYS = frozenset({"num_turns", "rollout_reward_scores", "tool_extra_fields", "raw_prompt", TRUNCATED_KEY})
# Written by unirl's verl data exporter beside the user's metadata: verl passes no prompt to compute_score.
PROMPT_KEY = "unirl_prompt"


def sample_from_verl(data_source: str, solution_str: str, ground_truth: Any,
                     extra_info: Mapping[str, Any] | None) -> Sample:
    extra = dict(extra_info or {})
    prompt = extra.pop(PROMPT_KEY, "")
    metadata = {k: v for k, v in extra.items() if k not in VERL_ADDED_KEYS}
    return Sample(prompt=str(prompt), completion=solution_str,
                  reference=None if ground_truth is None else str(ground_truth),
                  data_source=str(data_source or ""), metadata=metadata, truncated=extra.get(TRUNCATED_KEY) is True)


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  unirl_spec: str | None = None, **_: Any) -> dict[str, float]:
    """Score one verl sample with every unirl reward of the run; raises only when the policy aborts the run."""
    runtime = runtime_for("verl", unirl_spec)
    # verl always passes the row's extra_info: one that is not unirl's row is counted as unidentified ({}).
    origin = extra_info if isinstance(extra_info, Mapping) and PROMPT_KEY in extra_info else {}
    scored = runtime.score([sample_from_verl(data_source, solution_str, ground_truth, extra_info)],
                           origins=[origin])[0]
    return native_row(scored)
