"""TRL's prompt order, made resumable: a run resumed in its second epoch draws the prompts the uninterrupted run drew.

TRL 1.16's ``RepeatSampler`` (trl/trainer/utils.py) shuffles with a generator seeded once, in its constructor, and
draws a new permutation at every pass over the data: the uninterrupted run's epoch k is the (k+1)-th permutation.
A resumed run builds a fresh sampler, and transformers 5 no longer replays the finished epochs (it calls the
sampler's ``set_epoch`` instead, trainer.py ``_run_epoch``, which RepeatSampler does not have), so a run resumed in
epoch k >= 1 trained on epoch 0's order again: the default recipe resumed from checkpoint-300 (epoch 1 at 256 steps
an epoch) diverged from step 301, while checkpoints 100 and 200 (epoch 0) resumed exactly.

The trainer subclass here wraps TRL's own sampler (``_get_train_sampler``, the Trainer's method for choosing one)
in one that has ``set_epoch``: it reseeds the generator and replays the permutations of the epochs before, so epoch
k draws the same order however the run got there, and an uninterrupted run's order is TRL's, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def epoch_replay_sampler(inner: Any) -> Any:
    """``inner`` (a TRL ``RepeatSampler``) as a torch ``Sampler`` with ``set_epoch(k)``: its shuffle generator as it
    stood before the k-th pass."""
    from torch.utils.data import Sampler

    class EpochReplaySampler(Sampler[int]):
        def __iter__(self) -> Iterator[int]:
            return iter(inner)

        def __len__(self) -> int:
            return len(inner)

        def set_epoch(self, epoch: int) -> None:
            replay_epochs(inner, epoch)

    return EpochReplaySampler()


def replay_epochs(inner: Any, epoch: int) -> None:
    """Put ``inner``'s generator where it stood before its ``epoch``-th pass (0-based), as RepeatSampler.__iter__
    draws one ``torch.randperm(num_samples)`` a pass."""
    import torch

    if not getattr(inner, "shuffle", False) or getattr(inner, "seed", None) is None:
        return  # no shuffle (the same order every epoch) or an unseeded one (not reproducible anyway)
    inner.generator.manual_seed(inner.seed)
    for _ in range(epoch):
        torch.randperm(inner.num_samples, generator=inner.generator)


def with_resumable_order(trainer_class: type[Any]) -> type[Any]:
    """``trainer_class`` (GRPOTrainer, RLOOTrainer) whose training sampler resumes at the right epoch."""

    class ResumableOrder(trainer_class):  # type: ignore[misc]
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
            return epoch_replay_sampler(super()._get_train_sampler(*args, **kwargs))

    ResumableOrder.__name__ = ResumableOrder.__qualname__ = trainer_class.__name__
    return ResumableOrder
