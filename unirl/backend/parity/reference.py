"""What the algorithm fields of a recipe mean, as plain torch on one batch: the spec ``unirl parity`` holds every
backend's own numbers to, and the one the docs cite. It never trains.

One update's numbers, in order:

1. **Token rewards.** Each completion's total reward (the recipe's rewards, weighted; with ``overlong_buffer = b``,
   minus DAPO's soft punishment ``min(max(0, length - (max_new_tokens - b)), b) / b x overlong_penalty``; then
   ``reward_clip`` clips it to [-c, c]) sits on its last token. With ``kl_coef > 0`` and ``kl_placement=reward``,
   every token also gets ``-kl_coef x KL_t`` of the policy that sampled it against the reference policy
   (``kl_estimator``).
2. **Advantages.** With a group baseline (``group_mean``: the group's mean, the completion itself included;
   ``leave_one_out``: the mean of the group's other completions) a completion's return (its token rewards summed) minus
   the baseline, divided by ``advantage_norm`` (``group``: the group's standard deviation of returns; ``batch``: the
   step's; Bessel-corrected, plus a small epsilon), the same for all its tokens; ``batch_whiten`` instead whitens the
   broadcast advantages over every token of the step (minus the token mean, over the token standard deviation).
   With a critic (PPO), GAE over the token rewards and the critic's values (``algorithm.critic.gamma``,
   ``gae_lambda``), whitened the same way.
   Without a baseline (``none``, REINFORCE++) each token's advantage is its return to go (the rewards from it to the
   end), whitened over the step's tokens when ``advantage_norm=batch_whiten``.
3. **Ratio.** ``importance_sampling_level=token``: per token, ``exp(log pi - log pi_old)``; ``sequence`` (GSPO): per
   completion, the exponential of its mean token log-ratio, the same value on every token (its gradient reaches each
   token through the mean).
4. **Clipped objective, per token.** ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``; with ``dual_clip = c``,
   for ``A < 0`` at most ``-c A`` (Ye et al. 2020).
5. **Aggregation** (with ``overlong_filter``, over the completions that ended: truncated ones are left out).
   ``token_mean``: over every token of the batch; ``seq_mean_token_mean``: per completion over its tokens, then over
   completions; ``seq_mean_token_sum_norm``: per completion summed, averaged over completions, divided by
   ``loss_normalizer`` (``max_new_tokens`` when null: Dr. GRPO).
6. **KL in the loss.** With ``kl_placement=loss``: ``kl_coef`` times the same aggregation of the per-token KL of the
   current policy against the reference.
7. **Entropy.** ``- entropy_coef`` times the same aggregation of the per-token entropy.

The loss is the sum of 5, 6 and 7. What a backend computes differently by construction (an epsilon, an aggregation
it always uses) is a :class:`Semantics` field a design difference changes (``unirl.backend.parity.certificate``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from unirl.recipe.schema import Recipe

KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "k3"}


@dataclass(frozen=True)
class Semantics:
    """The fields of a recipe that decide one update's numbers, and the constants of the reference computation."""

    advantage_baseline: str
    advantage_norm: str
    kl_coef: float
    kl_estimator: str
    kl_placement: str
    clip_low: float
    clip_high: float
    dual_clip: float | None
    importance_sampling_level: str
    loss_aggregation: str
    loss_normalizer: int
    entropy_coef: float
    reward_clip: float | None = None
    max_new_tokens: int = 0
    overlong_buffer: int | None = None
    """DAPO's soft overlong punishment: a completion longer than ``max_new_tokens - overlong_buffer`` tokens loses
    ``(length - (max_new_tokens - buffer)) / buffer x overlong_penalty`` reward (None: no shaping)."""
    overlong_penalty: float = 1.0
    overlong_filter: bool = False
    """Truncated completions are left out of the loss (their advantages still count in their group's statistics)."""
    gamma: float = 1.0
    """The critic's discount (``algorithm.critic.gamma``; GAE only)."""
    gae_lambda: float = 1.0
    """GAE's lambda (``algorithm.critic.gae_lambda``)."""
    # -- how the reference computes what the recipe does not say (a backend's design difference may change these)
    std_eps: float = 1e-6
    """Added to a standard deviation before dividing by it (group and batch normalisation)."""
    whiten_eps: float = 1e-8
    """Added to the variance inside the square root when whitening."""
    kl_times_ratio: bool = False
    """The loss's KL term multiplied by the importance ratio (TRL's ``use_bias_correction_kl``)."""
    entropy_aggregation: str | None = None
    """How the entropy term aggregates (None: as the loss does)."""
    kl_aggregation: str | None = None
    """How the loss's KL term aggregates (None: as the loss does)."""
    kl_after_baseline: bool = False
    """With the KL in the reward and a group baseline: the baseline and normalisation use the outcome rewards alone,
    and each token then adds ``-kl_coef x`` its KL to go (OpenRLHF)."""
    whiten_unbiased: bool = True
    """Whitening divides by the Bessel-corrected variance (False: by the biased one)."""
    ratio_per_completion: bool = False
    """One importance ratio per completion, the product of its tokens' (exp of the summed log-ratio), clipped once;
    the loss the mean over completions of that ratio times the advantage (TRL's RLOOTrainer). The clip fraction is
    then a fraction of completions."""
    group_rows: bool = False
    """Group statistics reduced row-wise over the rewards laid out as [groups, G] (OpenRLHF, TRL) rather than over
    each group's own vector (verl). The same numbers in exact arithmetic; in float32 the two reductions may round the
    mean differently, which a tiny std + eps then amplifies."""
    precision: str = "float64"
    """The arithmetic of advantages and loss: the reference's is exact enough that a group of equal rewards has
    advantages of exactly 0; a backend computing in float32 gets rounding there (a design difference)."""

    @classmethod
    def of(cls, recipe: Recipe) -> Semantics:
        a = recipe.algorithm
        return cls(
            advantage_baseline=a.advantage_baseline, advantage_norm=a.advantage_norm, kl_coef=float(a.kl_coef),
            kl_estimator=KL_ESTIMATORS[a.kl_estimator], kl_placement=a.kl_placement, clip_low=float(a.clip_low),
            clip_high=float(a.clip_low if a.clip_high is None else a.clip_high),
            dual_clip=None if a.dual_clip is None else float(a.dual_clip),
            importance_sampling_level=a.importance_sampling_level, loss_aggregation=a.loss_aggregation,
            loss_normalizer=int(a.loss_normalizer or a.max_new_tokens), entropy_coef=float(a.entropy_coef),
            reward_clip=None if a.reward_clip is None else float(a.reward_clip), gamma=float(a.critic.gamma),
            gae_lambda=float(a.critic.gae_lambda), max_new_tokens=int(a.max_new_tokens),
            overlong_buffer=overlong_buffer(a.overlong_buffer, int(a.max_new_tokens)),
            overlong_penalty=float(a.overlong_penalty), overlong_filter=bool(a.overlong_filter))

    def changed(self, **changes: Any) -> Semantics:
        return replace(self, **changes)

    @property
    def kl_in_reward(self) -> bool:
        return self.kl_coef > 0 and self.kl_placement == "reward"

    @property
    def kl_in_loss(self) -> bool:
        return self.kl_coef > 0 and self.kl_placement == "loss"


@dataclass(frozen=True)
class Tensors:
    """A frozen batch as tensors (see :mod:`unirl.backend.parity.batch`): B completions of at most T tokens."""

    rewards: torch.Tensor
    """[B] the recipe's total reward of each completion."""
    group: torch.Tensor
    """[B] the prompt group of each completion (long)."""
    mask: torch.Tensor
    """[B, T] 1 under a completion token."""
    logp: torch.Tensor
    """[B, T] the current policy's log-probabilities (a leaf the gradient is taken against)."""
    old_logp: torch.Tensor
    """[B, T] the policy that sampled the batch."""
    ref_logp: torch.Tensor
    """[B, T] the reference policy."""
    entropy: torch.Tensor
    """[B, T] the current policy's per-token entropy."""
    values: torch.Tensor
    """[B, T] a critic's value estimates (PPO's GAE)."""
    truncated: torch.Tensor | None = None
    """[B] bool: cut at max_new_tokens without an end-of-sequence token (None: none were)."""


def overlong_buffer(value: int | str | None, max_new_tokens: int) -> int | None:
    """``algorithm.overlong_buffer`` as a number of tokens: ``auto`` resolves as the planner does
    (:func:`unirl.backend.auto._overlong_buffer`: a fifth of max_new_tokens, none when that is under 1 token)."""
    if value == "auto":
        return max_new_tokens // 5 or None
    return int(value) if value else None


# -- the pieces ------------------------------------------------------------------------------------------------------
def overlong_punishment(lengths: torch.Tensor, s: Semantics) -> torch.Tensor:
    """[B] DAPO's soft overlong punishment of each completion (0 without ``overlong_buffer``; at most
    ``overlong_penalty`` in size, reached at ``max_new_tokens``)."""
    if not s.overlong_buffer:
        return lengths * 0.0
    exceed = (lengths - (s.max_new_tokens - s.overlong_buffer)).clamp(0, s.overlong_buffer)
    return -exceed / s.overlong_buffer * s.overlong_penalty


def kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """KL(pi || pi_ref) per token, from the sampled tokens' log-probabilities (Schulman's k1, k2, k3)."""
    import torch

    log_ratio = logp - ref_logp
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1 + log_ratio
    raise ValueError(f"KL estimator {estimator!r}: one of k1, k2, k3")


def aggregate(values: torch.Tensor, mask: torch.Tensor, how: str, normalizer: int) -> torch.Tensor:
    """Per-token values to one number (step 5 of the module docstring)."""
    masked = values * mask
    if how == "token_mean":
        return masked.sum() / mask.sum()
    if how == "seq_mean_token_mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if how == "seq_mean_token_sum_norm":
        return masked.sum(-1).mean() / normalizer
    raise ValueError(f"loss aggregation {how!r}")


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float, unbiased: bool = True) -> torch.Tensor:
    """Minus the mean over the masked tokens, over their (Bessel-corrected) standard deviation."""
    n = mask.sum()
    mean = (values * mask).sum() / n
    var = (((values - mean) * mask) ** 2).sum() / (n - 1 if unbiased else n)
    return (values - mean) / (var + eps).sqrt() * mask


def token_rewards(t: Tensors, s: Semantics) -> torch.Tensor:
    """Step 1: each completion's reward on its last token, and the KL penalty on every token when it is in the
    reward (of the policy that sampled the batch)."""
    import torch

    rewards = t.rewards + overlong_punishment(t.mask.sum(-1), s)
    rewards = rewards if s.reward_clip is None else rewards.clamp(-s.reward_clip, s.reward_clip)
    last = (t.mask.sum(-1).long() - 1).clamp(min=0)
    out = torch.zeros_like(t.mask)
    out[torch.arange(len(rewards)), last] = rewards.to(out.dtype)
    if s.kl_in_reward:
        out = out - s.kl_coef * kl_per_token(t.old_logp, t.ref_logp, s.kl_estimator) * t.mask
    return out * t.mask


def advantages(t: Tensors, s: Semantics) -> torch.Tensor:
    """Step 2: [B, T] advantages, 0 under padding."""
    import torch

    per_token = token_rewards(t, s)
    if s.advantage_baseline == "critic":
        gae = generalized_advantages(per_token, t.values * t.mask, t.mask, s.gamma, s.gae_lambda)
        if s.advantage_norm == "batch_whiten":
            return whiten(gae, t.mask, s.whiten_eps, s.whiten_unbiased)
        if s.advantage_norm == "none":
            return gae
        raise ValueError(f"advantage_norm={s.advantage_norm!r} with a critic: batch_whiten or none")
    if s.advantage_baseline == "none":
        to_go = per_token.flip(-1).cumsum(-1).flip(-1) * t.mask
        if s.advantage_norm == "batch_whiten":
            return whiten(to_go, t.mask, s.whiten_eps, s.whiten_unbiased)
        if s.advantage_norm == "none":
            return to_go
        raise ValueError(f"advantage_norm={s.advantage_norm!r} with no baseline: batch_whiten or none")
    if s.advantage_baseline not in ("group_mean", "leave_one_out"):
        raise ValueError(f"advantage_baseline={s.advantage_baseline!r}: the reference covers group_mean, "
                         "leave_one_out and none")
    kl_to_go = None
    if s.kl_after_baseline and s.kl_in_reward:
        outcome_only = token_rewards(t, replace(s, kl_coef=0.0))
        kl_to_go = (per_token - outcome_only).flip(-1).cumsum(-1).flip(-1) * t.mask
        per_token = outcome_only
    returns = per_token.sum(-1)
    centred = torch.empty_like(returns)
    scale = torch.ones_like(returns)
    by_rows = s.group_rows and s.advantage_baseline == "group_mean"
    if by_rows:
        rows = grouped_rows(returns, t.group)
        centred = (rows - rows.mean(-1, keepdim=True)).reshape(-1)
        if s.advantage_norm == "group":
            scale = (rows.std(-1, keepdim=True) + s.std_eps).expand_as(rows).reshape(-1)
    for g in [] if by_rows else t.group.unique():  # type: ignore[no-untyped-call]
        members = t.group == g
        r = returns[members]
        n = r.numel()
        baseline = r.mean() if s.advantage_baseline == "group_mean" else (r.sum() - r) / (n - 1)
        centred[members] = r - baseline
        if s.advantage_norm == "group":
            scale[members] = r.std() + s.std_eps
    if s.advantage_norm == "batch":
        scale = scale * 0 + returns.std() + s.std_eps
    per_sequence = centred / scale
    broadcast = per_sequence.unsqueeze(-1) * t.mask
    if kl_to_go is not None:
        broadcast = broadcast + kl_to_go
    if s.advantage_norm == "batch_whiten":
        return whiten(broadcast, t.mask, s.whiten_eps, s.whiten_unbiased)
    return broadcast


def grouped_rows(values: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """``values`` as [groups, G]: the batch's groups must be consecutive and of one size (as every backend lays out
    a step's completions)."""
    sizes = group.unique_consecutive(return_counts=True)[1]  # type: ignore[no-untyped-call]
    if len(sizes) != len(group.unique()) or len(set(sizes.tolist())) != 1:  # type: ignore[no-untyped-call]
        raise ValueError("group_rows needs consecutive groups of one size")
    return values.reshape(len(sizes), -1)


def generalized_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                           lam: float) -> torch.Tensor:
    """GAE (Schulman et al. 2016): delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lambda A_{t+1}, with
    V past a completion's end taken as 0."""
    import torch

    width = rewards.shape[-1]
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for step in reversed(range(width)):
        following = values[:, step + 1] if step + 1 < width else torch.zeros_like(running)
        delta = rewards[:, step] + gamma * following - values[:, step]
        running = delta + gamma * lam * running
        out[:, step] = running
    return out * mask


@dataclass
class LossParts:
    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl_term: torch.Tensor | None
    entropy_term: torch.Tensor | None
    clip_fraction: torch.Tensor
    """Tokens whose clipped surrogate was chosen: ratio below 1 - clip_low with A < 0, or above 1 + clip_high with
    A > 0."""
    dual_clip_fraction: torch.Tensor | None
    """Tokens with A < 0 whose loss the dual clip bounded (ratio above c)."""


def loss_parts(t: Tensors, adv: torch.Tensor, s: Semantics) -> LossParts:
    """Steps 3 to 7 on ``t.logp`` (keep it a leaf that requires grad to read the gradient)."""
    import torch

    if s.overlong_filter and t.truncated is not None:
        t = replace(t, mask=t.mask * (~t.truncated).unsqueeze(-1))
    if s.ratio_per_completion:
        return completion_ratio_loss(t, adv, s)
    log_ratio = t.logp - t.old_logp
    if s.importance_sampling_level == "token":
        ratio = torch.exp(log_ratio)
    else:
        mean = (log_ratio * t.mask).sum(-1) / t.mask.sum(-1).clamp(min=1)
        ratio = torch.exp(mean).unsqueeze(-1).expand_as(t.logp)
    plain = -adv * ratio
    clipped = -adv * ratio.clamp(1 - s.clip_low, 1 + s.clip_high)
    per_token = torch.maximum(plain, clipped)
    valid = t.mask.bool()
    clip_fraction = ((clipped > plain) & valid).float().sum() / valid.sum()
    dual_fraction = None
    if s.dual_clip is not None:
        bound = -adv * s.dual_clip
        dual_fraction = ((per_token > bound) & (adv < 0) & valid).float().sum() / valid.sum()
        per_token = torch.where(adv < 0, torch.minimum(per_token, bound), per_token)
    pg_loss = aggregate(per_token, t.mask, s.loss_aggregation, s.loss_normalizer)
    loss = pg_loss
    kl_term = None
    if s.kl_in_loss:
        kl = kl_per_token(t.logp, t.ref_logp, s.kl_estimator)
        if s.kl_times_ratio:
            kl = kl * ratio
        kl_term = s.kl_coef * aggregate(kl, t.mask, s.kl_aggregation or s.loss_aggregation, s.loss_normalizer)
        loss = loss + kl_term
    entropy_term = None
    if s.entropy_coef:
        how = s.entropy_aggregation or s.loss_aggregation
        entropy_term = -s.entropy_coef * aggregate(t.entropy, t.mask, how, s.loss_normalizer)
        loss = loss + entropy_term
    return LossParts(loss, pg_loss, kl_term, entropy_term, clip_fraction, dual_fraction)


def completion_ratio_loss(t: Tensors, adv: torch.Tensor, s: Semantics) -> LossParts:
    """The loss of :attr:`Semantics.ratio_per_completion`: ``mean_i max(-A_i r_i, -A_i clip(r_i))`` with
    ``r_i = exp(sum_t log pi / pi_old)`` and ``A_i`` the completion's advantage (its tokens share it)."""
    import torch

    ratio = torch.exp(((t.logp - t.old_logp) * t.mask).sum(-1))
    per_completion = (adv * t.mask).sum(-1) / t.mask.sum(-1).clamp(min=1)
    plain = -per_completion * ratio
    clipped = -per_completion * ratio.clamp(1 - s.clip_low, 1 + s.clip_high)
    pg_loss = torch.maximum(plain, clipped).mean()
    clip_fraction = (clipped > plain).float().mean()
    return LossParts(pg_loss, pg_loss, None, None, clip_fraction, None)


def quantities(t: Tensors, s: Semantics, adv_for_loss: Any = None) -> dict[str, Any]:
    """Every certified quantity of the reference, as plain numbers: ``advantages`` [B][T], ``loss``, ``grad`` (d loss
    / d log pi per token, [B][T]), ``kl_term``, ``clip_fraction``, ``dual_clip_fraction``, computed in
    ``s.precision``. The loss is computed on ``adv_for_loss`` (default: these advantages), so a backend's loss is
    compared on the same advantages."""
    import torch

    dtype = getattr(torch, s.precision)
    t = Tensors(**{f.name: x.to(dtype) if x is not None and x.is_floating_point() else x
                   for f in fields(t) for x in [getattr(t, f.name)]})
    adv = advantages(t, s)
    logp = t.logp.detach().clone().requires_grad_(True)
    used = adv if adv_for_loss is None else torch.as_tensor(adv_for_loss, dtype=dtype)
    parts = loss_parts(replace(t, logp=logp), used, s)
    parts.loss.backward()  # type: ignore[no-untyped-call]
    assert logp.grad is not None

    def number(x: torch.Tensor | None) -> float | None:
        return None if x is None else float(x.detach())

    return {"advantages": (adv * t.mask).tolist(), "loss": float(parts.loss.detach()),
            "grad": (logp.grad * t.mask).tolist(), "kl_term": number(parts.kl_term),
            "clip_fraction": number(parts.clip_fraction), "dual_clip_fraction": number(parts.dual_clip_fraction)}
