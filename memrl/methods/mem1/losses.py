"""Token-level policy-gradient losses of the LLM learners (pure torch, unit-tested by hand).

All tensors are (B, T) over rows of packed token sequences; ``mask`` selects the generated tokens,
the only ones any loss covers (never observation tokens, prompts or padding). Means are over the
masked tokens of the minibatch (token-mean). When a minibatch is split into micro-batches (or
over learners), each piece passes ``num_tokens``, the masked-token count of the whole minibatch,
so that the pieces' losses add up to the minibatch's token-mean exactly.
"""

from __future__ import annotations

from typing import Literal

import torch

from memrl.methods.ppo_math import approx_kl, clipped_surrogate_loss, masked_mean


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
    num_tokens: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, token-mean (ppo_math.clipped_surrogate_loss); ``clipfrac``: the
    share of tokens where the clipped branch is the one taken."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    pg_loss = masked_mean(clipped_surrogate_loss(ratio, advantages, clip), mask, num_tokens)
    with torch.no_grad():
        clipped = advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip) < advantages * ratio
        clipfrac = masked_mean(clipped.float(), mask, num_tokens)
        kl = masked_mean(approx_kl(log_ratio), mask, num_tokens)
    return pg_loss, {"clipfrac": clipfrac, "approx_kl": kl}


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
    num_tokens: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * max((V - R)^2, (clip(V, V_old -+ clip) - R)^2), token-mean."""
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    v_loss_unclipped = (values - returns) ** 2
    v_loss_clipped = (v_clipped - returns) ** 2
    v_loss = 0.5 * masked_mean(torch.maximum(v_loss_unclipped, v_loss_clipped), mask, num_tokens)
    with torch.no_grad():
        vf_clipfrac = masked_mean((v_loss_clipped > v_loss_unclipped).float(), mask, num_tokens)
    return v_loss, {"vf_clipfrac": vf_clipfrac}


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL estimate log pi - log pi_ref (folded into PPO's reward)."""
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance, non-negative KL estimate exp(d) - d - 1, d = ref - logp (GRPO)."""
    d = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.exp(d) - d - 1.0


def nll_loss(
    logp: torch.Tensor, mask: torch.Tensor, num_tokens: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Negative log-likelihood of the masked (generated) tokens, token-mean over ``num_tokens``
    (default: the mask's count), so micro-batches add up to their minibatch's mean."""
    return -masked_mean(logp, mask, num_tokens)


def rl_loss(
    algorithm: Literal["ppo", "grpo", "raft", "imitation"],
    logp: torch.Tensor,
    batch: dict[str, torch.Tensor],
    *,
    clip: float,
    kl_coef: float,
    vf_clip: float = 0.5,
    vf_loss_coeff: float = 1.0,
    values: torch.Tensor | None = None,
    num_tokens: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The learner's whole loss on one (micro-)batch, and its statistics.

    PPO: clipped surrogate + ``vf_loss_coeff`` x clipped value loss (the KL to the reference is
    already in the advantages through the reward; ``ref_kl`` reports its k1 estimate). GRPO:
    clipped surrogate + ``kl_coef`` x k3 KL to the reference. RAFT and imitation: token NLL of
    the batch's generated tokens (the rows of the episodes kept for the update) + ``kl_coef`` x
    k3 KL to the reference.

    Args:
        logp, values: (B, T) the current policy's log-probs and (PPO) values.
        batch: ``loss_mask``, ``ref_logp`` and, for PPO and GRPO, ``old_logp`` and
            ``advantages`` (PPO also ``old_values`` and ``returns``), each (B, T).
        num_tokens: token-mean denominator (default: this batch's masked tokens).
    """
    mask = batch["loss_mask"]
    if algorithm in ("raft", "imitation"):
        nll = nll_loss(logp, mask, num_tokens)
        kl_loss = masked_mean(kl_k3(logp, batch["ref_logp"]), mask, num_tokens)
        stats = {"nll": nll, "ref_kl": kl_loss}
        return nll + kl_coef * kl_loss, {k: v.detach() for k, v in stats.items()}
    pg_loss, stats = clipped_pg_loss(
        logp, batch["old_logp"], batch["advantages"], mask, clip, num_tokens
    )
    stats = {"policy_loss": pg_loss, **stats}
    if algorithm == "ppo":
        if values is None:
            raise ValueError("PPO's loss needs the critic's values (model.value_head)")
        v_loss, v_stats = clipped_value_loss(
            values, batch["old_values"], batch["returns"], mask, vf_clip, num_tokens
        )
        loss = pg_loss + vf_loss_coeff * v_loss
        ref_kl = masked_mean(kl_k1(logp.detach(), batch["ref_logp"]), mask, num_tokens)
        stats.update(vf_loss=v_loss, ref_kl=ref_kl, **v_stats)
    elif algorithm == "grpo":
        kl_loss = masked_mean(kl_k3(logp, batch["ref_logp"]), mask, num_tokens)
        loss = pg_loss + kl_coef * kl_loss
        stats.update(ref_kl=kl_loss)
    else:
        raise ValueError(
            f"algorithm must be 'ppo', 'grpo', 'raft' or 'imitation', got {algorithm!r}"
        )
    return loss, {k: v.detach() for k, v in stats.items()}
