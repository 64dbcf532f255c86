"""vime's custom reward contract: slime's, loaded from ``--custom-rm-path unirl.adapters.vime.reward``.

vime's rm_hub awaits the same ``async_rm(args, sample)`` and loads the path with the same dotted
``load_function`` as slime; only the backend name in the trajectory log and policy checks differs.
"""

from __future__ import annotations

from unirl.adapters.slime import adapters_for, sample_from_slime

reward, batched_reward = adapters_for("vime")

__all__ = ["batched_reward", "reward", "sample_from_slime"]
