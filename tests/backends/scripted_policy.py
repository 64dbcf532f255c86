"""The scripted policy the environment harnesses use in place of vLLM, over the builtin lookup task: what a model
would generate for a context (token ids), under the engine's ``max_tokens``. Imports nothing but the tokenizer.

``solve`` looks the value up ("=") and then answers the digit of the observation ``*v``; ``guess`` answers "0" at
once; ``ramble`` never ends its turn (no end-of-sequence token), so the engine's token limit cuts it.
"""

from __future__ import annotations

from typing import Any

POLICIES = ("solve", "guess", "ramble")


def scripted_turn(tok: Any, policy: str, context_ids: list[int], max_tokens: int | None) -> list[int]:
    if policy == "ramble":
        ids = list(tok("+" * 64, add_special_tokens=False)["input_ids"])
    else:
        context = tok.decode(context_ids, skip_special_tokens=True)
        seen = context.rfind("*")
        text = "0" if policy == "guess" else "=" if seen < 0 else context[seen + 1]
        ids = [*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]
    return ids[:max_tokens] if max_tokens else ids
