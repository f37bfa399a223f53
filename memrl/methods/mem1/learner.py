"""``TokenLearner``: the RLlib Learner of LLM agents (token-level PPO with a critic, or GRPO).

The algorithm hands it rows of packed token sequences (memrl/methods/mem1/batch.py). Before an
update it scores the whole batch once without gradients (``score_rows``: the current policy's
log-probs, the frozen reference's log-probs, the critic's values), from which the algorithm builds
advantages; ``compute_loss_for_module`` then applies the clipped loss over generated tokens only.
``sft_update`` runs the supervised warm start on the same rows.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from memrl.methods.mem1.batch import slice_rows
from memrl.methods.mem1.losses import (
    clipped_pg_loss,
    clipped_value_loss,
    kl_k1,
    kl_k3,
    masked_mean,
    sft_loss,
)
from memrl.methods.mem1.network import TokenPolicy

logger = logging.getLogger(__name__)

SCORE_COLUMNS = ("input_ids", "position_ids", "seg", "vis")
SFT_REPORT_EVERY_S = 30.0
"""Seconds between the warm start's progress lines (it runs for minutes before iteration 1)."""


class TokenLearner(TorchLearner):
    """PPO (critic, KL-shaped reward) or GRPO (group advantages, KL loss) on generated tokens."""

    def build(self) -> None:
        super().build()
        self._reference: TokenPolicy | None = None
        self.snapshot_reference()

    def _policy(self, module_id: str = DEFAULT_MODULE_ID) -> TokenPolicy:
        return self.module[module_id].unwrapped().policy

    def save_lm(self, path: str) -> bool:
        """Writes the policy's LM as a Hugging Face model folder (first learner only); returns
        whether it wrote one (not with LoRA adapters: the run's checkpoints hold those)."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            if torch.distributed.get_rank() != 0:
                return False
        lm = self._policy().lm
        if hasattr(lm, "disable_adapter"):
            return False
        lm.save_pretrained(path)
        return True

    def snapshot_reference(self) -> None:
        """Freezes the current policy as the KL reference (LoRA: the base model, adapters off)."""
        policy = self._policy()
        if hasattr(policy.lm, "disable_adapter"):
            self._reference = None
            return
        ref_lm = copy.deepcopy(policy.lm).eval()
        for p in ref_lm.parameters():
            p.requires_grad_(False)
        self._reference = TokenPolicy(ref_lm, value_head=False)

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        s = self.config.mem1
        policy = self._policy(module_id)
        lm_params = [p for p in policy.lm.parameters() if p.requires_grad]
        groups = [{"params": lm_params, "lr": s.lr}]
        params = list(lm_params)
        if policy.value_head is not None:
            vh = list(policy.value_head.parameters())
            groups.append({"params": vh, "lr": s.critic_lr})
            params += vh
        optimizer = torch.optim.AdamW(groups, weight_decay=0.0, betas=(0.9, 0.999))
        self.register_optimizer(
            module_id=module_id,
            optimizer_name="default",
            optimizer=optimizer,
            params=params,
            lr_or_lr_schedule=None,
        )

    def _tensors(self, cols: dict[str, np.ndarray], keys: Any) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(cols[k], device=self._device) for k in keys}

    def score_rows(self, cols: dict[str, np.ndarray], rows_per_chunk: int) -> dict[str, np.ndarray]:
        """Current log-probs, reference log-probs and values of every row (no gradients).

        Returns:
            ``logp``, ``ref_logp`` and (PPO) ``values``, each (B, T) float32 like ``cols``.
        """
        policy = self._policy()
        b, t = cols["input_ids"].shape
        out = {"logp": np.zeros((b, t), np.float32), "ref_logp": np.zeros((b, t), np.float32)}
        with_values = policy.value_head is not None
        if with_values:
            out["values"] = np.zeros((b, t), np.float32)
        was_training = policy.training
        policy.eval()
        with torch.no_grad():
            for start in range(0, b, rows_per_chunk):
                index = list(range(start, min(b, start + rows_per_chunk)))
                sub = slice_rows({k: cols[k] for k in SCORE_COLUMNS}, index)
                width = sub["input_ids"].shape[1]
                x = self._tensors(sub, SCORE_COLUMNS)
                args = (x["input_ids"], x["position_ids"], x["seg"], x["vis"])
                cur = policy.score(*args, with_values=with_values)
                if self._reference is not None:
                    ref = self._reference.score(*args)
                else:
                    with policy.lm.disable_adapter():
                        ref = policy.score(*args)
                out["logp"][index, :width] = cur["logp"].cpu().numpy()
                out["ref_logp"][index, :width] = ref["logp"].cpu().numpy()
                if with_values:
                    out["values"][index, :width] = cur["values"].cpu().numpy()
        policy.train(was_training)
        return out

    def compute_loss_for_module(
        self, *, module_id: str, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> torch.Tensor:
        s = self.config.mem1
        mask = batch["loss_mask"]
        logp = fwd_out["logp"]
        pg_loss, stats = clipped_pg_loss(logp, batch["old_logp"], batch["advantages"], mask, s.clip)
        stats = {"policy_loss": pg_loss, **stats}
        if s.algorithm == "ppo":
            v_loss, v_stats = clipped_value_loss(
                fwd_out["values"], batch["old_values"], batch["returns"], mask, s.vf_clip
            )
            loss = pg_loss + s.vf_loss_coeff * v_loss
            kl = masked_mean(kl_k1(logp.detach(), batch["ref_logp"]), mask)
            stats.update(vf_loss=v_loss, ref_kl=kl, **v_stats)
        else:
            kl_loss = masked_mean(kl_k3(logp, batch["ref_logp"]), mask)
            loss = pg_loss + s.kl_coef * kl_loss
            stats.update(ref_kl=kl_loss)
        stats["loss_tokens"] = mask.sum().float()
        self.metrics.log_dict({k: v.detach() for k, v in stats.items()}, key=module_id, window=1)
        return loss

    def sft_update(
        self,
        cols: dict[str, np.ndarray],
        *,
        epochs: int,
        rows_per_batch: int,
        lr: float,
        seed: int = 0,
    ) -> list[float]:
        """Supervised warm start on generated tokens; returns the loss of each step."""
        policy = self._policy()
        params = [p for p in policy.lm.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        rng = np.random.default_rng(seed)
        b = cols["input_ids"].shape[0]
        total = epochs * -(-b // rows_per_batch)
        warmup = max(1, total // 20)
        # Linear warmup, then cosine decay to zero.
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda k: min((k + 1) / warmup, 0.5 * (1 + np.cos(np.pi * min(1.0, k / total)))),
        )
        losses = []
        policy.train()
        started = last_report = time.monotonic()
        for epoch in range(epochs):
            order = rng.permutation(b)
            for start in range(0, b, rows_per_batch):
                sub = slice_rows(cols, order[start : start + rows_per_batch])
                x = self._tensors(sub, (*SCORE_COLUMNS, "loss_mask"))
                out = policy.score(x["input_ids"], x["position_ids"], x["seg"], x["vis"])
                loss = sft_loss(out["logp"], x["loss_mask"])
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                schedule.step()
                losses.append(float(loss.detach()))
                now = time.monotonic()
                if now - last_report >= SFT_REPORT_EVERY_S:
                    last_report = now
                    print(
                        f"warm start: step {len(losses):,}/{total:,} (epoch {epoch + 1}/{epochs})"
                        f" | loss {np.mean(losses[-50:]):.3f} | {now - started:.0f}s",
                        flush=True,
                    )
        self.snapshot_reference()
        return losses
