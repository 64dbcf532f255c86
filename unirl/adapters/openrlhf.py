"""OpenRLHF's custom reward contract, fed by the run's reward specification.

OpenRLHF (0.11.x) loads a ``.py`` given as ``--reward.remote_url`` inside each vLLM engine actor
(``spec_from_file_location("reward_func", path)``) and calls ``reward_func(queries, prompts, labels)``
with lists of length one, from several threads at once. ``queries[0]`` is the decoded prompt plus
response INCLUDING special-token text (``decode(prompt_ids + response_ids, skip_special_tokens=False)``),
so the adapter splits the prompt off and strips the end-of-sequence text, which also tells whether the
generation ended on its own. It returns ``rewards``, ``scores`` and ``extra_logs`` (fixed keys).

OpenRLHF swallows an exception from ``reward_func`` into ``reward=None`` and crashes much later with an
unrelated error, so this function never raises: a reward failure is scored by the recipe's policy
(``fallback``) and counted in ``unirl/reward_errors``; when the policy aborts, or the adapter itself
cannot work (no spec, a query it cannot split), it logs why (stderr) and ends the process, which fails the run
at the engine actor with that message instead of training on made-up numbers.

The file OpenRLHF loads is generated per run (see :func:`write_reward_file`); it only points here.
"""

from __future__ import annotations

import logging
import os
import traceback
from pathlib import Path
from typing import Any, NoReturn

from unirl.adapters.common import end_runtimes, native_row, runtime_for
from unirl.rewards.contract import Sample
from unirl.rewards.row_origin import untag_row

log = logging.getLogger(__name__)

# End-of-sequence texts of common chat models, stripped from the end of a decoded query. The plan may set
# $UNIRL_END_TEXTS (one per line) to the model's own special tokens.
DEFAULT_END_TEXTS = ("</s>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<eos>", "<|end|>",
                     "<end_of_turn>", "<pad>")
END_TEXTS_ENV = "UNIRL_END_TEXTS"
ABORT_EXIT_CODE = 70


def end_texts() -> tuple[str, ...]:
    configured = os.environ.get(END_TEXTS_ENV)
    return tuple(t for t in configured.split("\n") if t) if configured else DEFAULT_END_TEXTS


def split_query(query: str, prompt: str, ends: tuple[str, ...]) -> tuple[str, bool]:
    """The completion inside OpenRLHF's decoded query, and whether generation stopped on an end token."""
    if query.startswith(prompt):
        completion = query[len(prompt):]
    else:
        at = query.find(prompt)  # e.g. a BOS text the prompt string does not carry
        if at < 0 or not prompt:
            raise ValueError(f"cannot find the prompt ({prompt[:80]!r}...) in OpenRLHF's query ({query[:80]!r}...)")
        completion = query[at + len(prompt):]
    ended = False
    stripped = True
    while stripped:  # EOS, possibly followed by padding
        stripped = False
        for end in ends:
            if end and completion.endswith(end):
                completion = completion[: -len(end)]
                ended = stripped = True
    return completion, not ended


def score_queries(queries: list[str], prompts: list[str], labels: list[Any]) -> dict[str, Any]:
    """Score OpenRLHF's (query, prompt, label) lists; raises on adapter problems and policy aborts.

    A label unirl exported carries its row's place (unirl/rewards/row_origin.py): held-out rows are recorded as
    eval, train rows by index but without a step, since OpenRLHF draws its prompt loader shuffled, with no switch
    (``prepare_datasets`` passes ``shuffle=True``, openrlhf/trainer/ppo_trainer.py:42-49 @ 0.11.2)."""
    runtime = runtime_for("openrlhf")
    ends = end_texts()
    samples = []
    origins = []
    for query, prompt, label in zip(queries, prompts, labels, strict=True):
        completion, truncated = split_query(str(query), str(prompt), ends)
        label, origin, metadata = untag_row(label)
        reference = None if label is None or label == "" else str(label)
        samples.append(Sample(prompt=str(prompt), completion=completion, reference=reference, truncated=truncated,
                              metadata=metadata))
        origins.append(origin)
    rows = [native_row(s) for s in runtime.score(samples, origins, in_order=False)]
    totals = [row["score"] for row in rows]
    extra_logs = {key: [row[key] for row in rows] for key in rows[0] if key != "score"}
    return {"rewards": totals, "scores": totals, "extra_logs": extra_logs}


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **_: Any) -> dict[str, Any]:
    """OpenRLHF's entry point; never raises (see the module docstring)."""
    try:
        answer = score_queries(queries, prompts, labels)
        if len(queries) == 1:
            # OpenRLHF calls with one sample. Plain numbers make shape-(1,) tensors, as its own examples do; lists
            # make (1, 1), which crashes its batch concat beside a sample that returned numbers.
            return {key: value[0] if isinstance(value, list) else {k: v[0] for k, v in value.items()}
                    for key, value in answer.items()}
        return answer
    except BaseException as exc:  # anything raised here OpenRLHF would swallow
        _abort(exc)


def _abort(exc: BaseException) -> NoReturn:
    message = "".join(traceback.format_exception(exc)).strip()
    log.critical("the OpenRLHF reward adapter stops this process: %s\n%s", exc, message)
    try:  # os._exit runs no exit handlers: report the end first
        end_runtimes("failed", f"{type(exc).__name__}: {exc}")
    finally:
        os._exit(ABORT_EXIT_CODE)


REWARD_FILE = '''"""Generated by unirl for one run: the reward_func OpenRLHF loads (unirl.adapters.openrlhf)."""
import os

os.environ.setdefault("UNIRL_REWARD_SPEC", {spec!r})
from unirl.adapters.openrlhf import reward_func  # noqa: E402,F401
'''


def write_reward_file(path: Path, spec_path: Path) -> Path:
    """The ``--reward.remote_url`` file for a run: sets the spec path and re-exports ``reward_func``."""
    path.write_text(REWARD_FILE.format(spec=str(spec_path)), encoding="utf-8")
    return path


AGENT_FILE = '''"""Generated by unirl for one run: the AgentExecutor OpenRLHF loads (unirl.adapters.openrlhf_agent)."""
import os
os.environ.setdefault({env!r}, {spec!r})
from unirl.adapters.openrlhf_agent import AgentExecutor  # noqa: E402,F401
'''


def write_agent_file(path: Path, spec_path: Path) -> Path:
    """The ``--train.agent_func_path`` file for a run with an environment: sets the environment spec's path and
    re-exports unirl's ``AgentExecutor`` (a module that imports OpenRLHF, so only its engine actors import it)."""
    from unirl.adapters.episodes import ENVIRONMENT_SPEC_ENV

    path.write_text(AGENT_FILE.format(env=ENVIRONMENT_SPEC_ENV, spec=str(spec_path)), encoding="utf-8")
    return path
