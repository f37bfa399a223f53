"""Token-level policy-gradient losses of the LLM learners (pure torch, unit-tested by hand).

All tensors are (B, T) over rows of packed token sequences; ``mask`` selects the generated tokens,
the only ones any loss covers (never observation tokens, prompts or padding). Means are over the
masked tokens of the minibatch (token-mean).
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``x`` shifted and scaled to mean 0, std 1 over the mask (values off the mask are kept 0)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return ((x - mean) * torch.rsqrt(var + eps)) * mask.to(x.dtype)


def clipped_pg_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, per token: -min(ratio * A, clip(ratio, 1 -+ clip) * A)."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    pg_loss = masked_mean(torch.maximum(pg_losses, pg_losses_clipped), mask)
    with torch.no_grad():
        clipfrac = masked_mean((pg_losses_clipped > pg_losses).float(), mask)
        approx_kl = masked_mean((ratio - 1) - log_ratio, mask)
    return pg_loss, {"clipfrac": clipfrac, "approx_kl": approx_kl}


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * max((V - R)^2, (clip(V, V_old -+ clip) - R)^2), token-mean."""
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    v_loss_unclipped = (values - returns) ** 2
    v_loss_clipped = (v_clipped - returns) ** 2
    v_loss = 0.5 * masked_mean(torch.maximum(v_loss_unclipped, v_loss_clipped), mask)
    with torch.no_grad():
        vf_clipfrac = masked_mean((v_loss_clipped > v_loss_unclipped).float(), mask)
    return v_loss, {"vf_clipfrac": vf_clipfrac}


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL estimate log pi - log pi_ref (folded into PPO's reward)."""
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance, non-negative KL estimate exp(d) - d - 1, d = ref - logp (GRPO)."""
    d = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.exp(d) - d - 1.0


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the generated tokens (warm start), token-mean."""
    return -masked_mean(logp, mask)
