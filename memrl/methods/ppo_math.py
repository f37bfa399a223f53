"""PPO's per-step formulas, shared by every method's learner (pure torch, no memrl imports).

Memo's learner applies them to (B, T) env steps, MEM1's to (B, T) generated tokens; both average
over a boolean or 0/1 ``mask`` of the steps that count. Keeping the formulas here means the two
learners cannot drift apart on what "the clipped surrogate" or "approx KL" is.
"""

from __future__ import annotations

import torch


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, count: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Sum of ``x`` over ``mask`` divided by ``count`` (default: the mask's count, at least 1,
    so the result is 0 when the mask is empty).

    ``count`` lets the pieces of a split batch (micro-batches, learners) each divide by the whole
    batch's count, so that their means add up to the batch's mean exactly.
    """
    mask = mask.to(x.dtype)
    denom = mask.sum().clamp(min=1.0) if count is None else count
    return (x * mask).sum() / denom


def clipped_surrogate_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, clip: float
) -> torch.Tensor:
    """Per step, PPO's negated clipped surrogate: -min(r * A, clip(r, 1 - clip, 1 + clip) * A)."""
    return -torch.min(advantages * ratio, advantages * ratio.clamp(1.0 - clip, 1.0 + clip))


def approx_kl(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per step, the non-negative KL(old || new) estimate (r - 1) - log r, r = pi_new / pi_old."""
    return torch.exp(log_ratio) - 1.0 - log_ratio
