"""slime's rollout ``Sample`` as a custom reward receives it, written from upstream for tests (slime is not on
the package index). Mirrors THUDM/slime at 624b824a898ab0ec1fcb4d373004c7f3852bf515, slime/utils/types.py:93-149
(fields, order, defaults) and the nested Status enum at :130-138; vime's vime/utils/types.py (@2b83ea2) has the
same fields. Fields that only carry tensors for training (multimodal inputs, routed experts, spec/prefix-cache
info) are left out: a reward never reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None

    def get_reward_value(self, args: Any) -> Any:
        """slime/utils/types.py:246-247: how slime reads the training reward (``--reward-key``)."""
        return self.reward if not args.reward_key else self.reward[args.reward_key]
