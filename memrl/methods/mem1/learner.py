"""``TokenLearner``: the RLlib Learner of LLM agents (token-level PPO with a critic, or GRPO).

The algorithm hands it rows of packed token sequences (memrl/methods/mem1/batch.py). Before an
update every learner scores its share of the batch once without gradients (``score_rows``: the
current policy's log-probs, the frozen reference's, the critic's values), from which the algorithm
builds advantages. An update (``_update``) then runs the minibatch shard this learner received in
micro-batches of at most ``micro_batch_tokens`` tokens, accumulating gradients, so a learner's
memory does not grow with the minibatch; the loss (``losses.rl_loss``) is normalized by the
minibatch's loss tokens over all learners, so the step equals one pass over the whole minibatch.
``sft_update`` runs the supervised warm start on the same rows.

Several learners train with DDP (RLlib's default), or, with ``algorithm.fsdp``, with the LM
sharded over them (torch FSDP2 ``fully_shard``: each decoder layer and the policy as the root
unit), for full fine-tuning of models that do not fit one GPU. Under FSDP every collective step
(scoring, micro-batches) runs the same number of times on every learner, and the first learner
keeps a gathered copy of the full weights for weight syncs and checkpoints
(``gather_full_state``); checkpoints then hold no optimizer state.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from memrl.methods.mem1.batch import micro_batches, row_lengths, slice_rows
from memrl.methods.mem1.losses import nll_loss, rl_loss
from memrl.methods.mem1.network import TokenPolicy, causal_lm, rank_and_world

logger = logging.getLogger(__name__)

SCORE_COLUMNS = ("input_ids", "position_ids", "seg", "vis")
SFT_REPORT_EVERY_S = 30.0
"""Seconds between the warm start's progress lines (it runs for minutes before iteration 1)."""


def _libc_function(name: str) -> Any:
    """A function of glibc (``malloc_trim``, ``mallopt``), or None where the C library has none
    (macOS, musl)."""
    import ctypes
    import ctypes.util

    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _libc_function("malloc_trim")
_MALLOPT = _libc_function("mallopt")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's mallopt parameters: the free heap top kept before it is trimmed, and the size from
which a block gets its own mmap."""
UPDATE_MMAP_THRESHOLD_BYTES = 64 * 1024
"""Blocks of this size or more get their own mmap during a CPU learner update."""
AFTER_MMAP_THRESHOLD_BYTES, AFTER_TRIM_THRESHOLD_BYTES = 32 * 2**20, 64 * 2**20
"""The thresholds after it: glibc's dynamic ones at their largest."""


def _set_mmap_threshold(size: int) -> bool:
    """Makes glibc serve every block of ``size`` bytes or more by its own mmap, handed back to
    the system when freed; returns whether it could (glibc only). Process-wide, until set again.
    """
    return _MALLOPT is not None and _MALLOPT(M_MMAP_THRESHOLD, size) == 1


@contextlib.contextmanager
def big_blocks_mapped(device: torch.device) -> Iterator[None]:
    """Within it (a CPU learner update), blocks of 64 KiB or more get their own mmap.

    By default glibc raises its mmap threshold each time such a block is freed (up to 32 MB),
    and from then on tensors below it come from the heap, where freed blocks stay resident and a
    later tensor of another size may not fit them: an update that accumulates over micro-batches
    grew its peak memory with every one (8 rows 1.1-1.4x one row, ``memrl bench mem1-memory``);
    with the threshold fixed it stays flat. Generation, though, allocates and frees blocks of
    that size at every token, and mapping each costs it about a third of its speed, so after the
    update the thresholds go to the largest values glibc's dynamic ones reach. No-op on GPUs and
    without glibc.
    """
    if device.type != "cpu" or not _set_mmap_threshold(UPDATE_MMAP_THRESHOLD_BYTES):
        yield
        return
    try:
        yield
    finally:
        _set_mmap_threshold(AFTER_MMAP_THRESHOLD_BYTES)
        _MALLOPT(M_TRIM_THRESHOLD, AFTER_TRIM_THRESHOLD_BYTES)


def release_free_heap(device: torch.device) -> None:
    """Hands the C heap's free pages back to the system between CPU micro-batches.

    glibc keeps the blocks a micro-batch's activations freed, and the next micro-batch's tensors
    do not always fit in them, so without this each micro-batch can add resident memory
    (``memrl bench mem1-memory`` measures it). No-op on GPUs (activations live in device memory)
    and without glibc.
    """
    if device.type == "cpu" and _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _all_reduce(value: float, op: str, device: torch.device) -> float:
    """``value`` summed (``op="sum"``) or maxed over all learners (itself when alone)."""
    if rank_and_world()[1] == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    reduce_op = torch.distributed.ReduceOp.SUM if op == "sum" else torch.distributed.ReduceOp.MAX
    torch.distributed.all_reduce(t, op=reduce_op)
    return float(t.item())


def shard_policy(policy: TokenPolicy) -> None:
    """FSDP2: every decoder layer is its own unit; the policy (embeddings, final norm, output
    layer, value head) is the root unit, so calls must go through ``policy(...)``."""
    from torch.distributed.fsdp import fully_shard

    for layer in causal_lm(policy.lm).get_decoder().layers:
        fully_shard(layer)
    fully_shard(policy)


def _rows_of(batch: dict[str, torch.Tensor], rows: list[int], lengths: np.ndarray) -> dict:
    """Rows of a tensor batch, trimmed to their longest row."""
    index = torch.as_tensor(rows, device=batch["input_ids"].device)
    t = max(1, int(lengths[rows].max()))
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            out[k] = v[index] if k == "vis" or v.ndim < 2 else v[index][:, :t]
    return out


class TokenLearner(TorchLearner):
    """PPO (critic, KL-shaped reward) or GRPO (group advantages, KL loss) on generated tokens."""

    def build(self) -> None:
        self._reference: TokenPolicy | None = None
        super().build()
        self.snapshot_reference()
        self.gather_full_state()

    @property
    def _fsdp(self) -> bool:
        return bool(self.config.mem1.fsdp)

    def _policy(self, module_id: str = DEFAULT_MODULE_ID) -> TokenPolicy:
        return self.module[module_id].unwrapped().policy

    def _make_module(self) -> Any:
        module = super()._make_module()
        if self._fsdp:
            # Sharded before the optimizers are made (FSDP replaces the parameters); the
            # reference is copied while the weights are still whole, and sharded the same way.
            policy = module[DEFAULT_MODULE_ID].policy
            self._reference = self._frozen_copy(policy)
            shard_policy(policy)
            shard_policy(self._reference)
        return module

    def _make_modules_ddp_if_necessary(self) -> None:
        if not self._fsdp:  # FSDP already spreads the model over the learners
            super()._make_modules_ddp_if_necessary()

    @staticmethod
    def _frozen_copy(policy: TokenPolicy) -> TokenPolicy:
        """The policy copied whole, so that the reference scores exactly as the policy does
        (temperature, compute dtype, chunking: a reference at another temperature would put a KL
        between identical weights), frozen and without a value head."""
        ref = copy.deepcopy(policy).eval().requires_grad_(False)
        ref.value_head = None
        return ref

    def snapshot_reference(self) -> None:
        """Freezes the current policy as the KL reference (LoRA: the base model, adapters off)."""
        policy = self._policy()
        if hasattr(policy.lm, "disable_adapter"):
            self._reference = None
        elif self._reference is None:
            self._reference = self._frozen_copy(policy)
        else:
            # In place (under FSDP, shard by shard): no second copy of the model at any time.
            with torch.no_grad():
                pairs = zip(self._reference.lm.parameters(), policy.lm.parameters(), strict=True)
                for ref, cur in pairs:
                    ref.copy_(cur)

    def gather_full_state(self) -> None:
        """FSDP: gathers the full weights (every learner must call this together); the first
        learner keeps them on the CPU for ``get_state`` (weight syncs, checkpoints)."""
        if not self._fsdp:
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(module, options=options)
        module.keep_full_state(state if rank_and_world()[0] == 0 else None)

    def _get_optimizer_state(self) -> dict[str, Any]:
        # A sharded optimizer state would be gathered by all learners at once; checkpoints are
        # written by one, so under FSDP they hold the weights only.
        return {} if self._fsdp else super()._get_optimizer_state()

    def _set_optimizer_state(self, state: dict[str, Any]) -> None:
        if self._fsdp and not state:
            logger.warning("FSDP checkpoint without optimizer state: AdamW restarts its moments")
            return
        super()._set_optimizer_state(state)

    def save_lm(self, path: str) -> bool:
        """Writes the policy's LM as a Hugging Face model folder (first learner only); returns
        whether it wrote one (not with LoRA adapters: the run's checkpoints hold those). Under
        FSDP every learner must call it (the weights are gathered)."""
        lm = self._policy().lm
        if hasattr(lm, "disable_adapter"):
            return False
        state = None
        if self._fsdp:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = get_model_state_dict(lm, options=options)
        if rank_and_world()[0] != 0:
            return False
        lm.save_pretrained(path, state_dict=state)
        return True

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

    def score_rows(
        self,
        cols: dict[str, np.ndarray],
        token_budget: int,
        *,
        current: bool = True,
        reference: bool = True,
    ) -> dict[str, np.ndarray]:
        """Current log-probs, reference log-probs and values of this learner's share of the rows
        (rows rank, rank + L, ... of L learners), without gradients, ``token_budget`` tokens per
        pass; log-probs only at loss tokens (0 elsewhere). ``current``/``reference``: whether
        the current policy's and the reference's log-probs are wanted (each costs a forward
        pass; values always come with a value head).

        Returns:
            ``rows`` (R,) the row indices scored here; ``logp`` (with ``current``), ``ref_logp``
            (with ``reference``) and (PPO) ``values``, each (R, T) float32 with ``cols``' T.
        """
        policy = self._policy()
        rank, world = rank_and_world()
        b, t = cols["input_ids"].shape
        lengths = row_lengths(cols)
        mine = np.arange(b)[rank::world]
        chunks = [[int(mine[i]) for i in c] for c in micro_batches(lengths[mine], token_budget)]
        passes = len(chunks)
        if self._fsdp:  # every learner joins every sharded forward pass
            passes = max(len(micro_batches(lengths[r::world], token_budget)) for r in range(world))
        with_values = policy.value_head is not None
        wanted_keys = [("logp", current), ("ref_logp", reference), ("values", with_values)]
        out = {k: np.zeros((len(mine), t), np.float32) for k, want in wanted_keys if want}
        position = {int(r): i for i, r in enumerate(mine)}
        was_training = policy.training
        policy.eval()
        with torch.no_grad():
            for k in range(passes):
                rows = chunks[k] if k < len(chunks) else [0]  # padding pass: results dropped
                sub = slice_rows({c: cols[c] for c in (*SCORE_COLUMNS, "loss_mask")}, rows)
                width = sub["input_ids"].shape[1]
                x = self._tensors(sub, (*SCORE_COLUMNS, "loss_mask"))
                args = (x["input_ids"], x["position_ids"], x["seg"], x["vis"])
                wanted = x["loss_mask"]
                found = {}
                if current or with_values:
                    cur = policy.score(*args, with_values=with_values, logp_mask=wanted)
                    found = {"logp": cur["logp"], "values": cur.get("values")}
                if reference and self._reference is not None:
                    found["ref_logp"] = self._reference.score(*args, logp_mask=wanted)["logp"]
                elif reference:
                    with policy.lm.disable_adapter():
                        found["ref_logp"] = policy.score(*args, logp_mask=wanted)["logp"]
                if k >= len(chunks):
                    continue
                at = [position[r] for r in rows]
                for key, value in out.items():
                    value[at, :width] = found[key].cpu().numpy()
        policy.train(was_training)
        return {"rows": mine, **out}

    def _loss_and_stats(
        self, batch: dict[str, Any], fwd_out: dict[str, Any], num_tokens: float | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        s = self.config.mem1
        return rl_loss(
            s.algorithm,
            fwd_out["logp"],
            batch,
            clip=s.clip,
            kl_coef=s.kl_coef,
            vf_clip=s.vf_clip,
            vf_loss_coeff=s.vf_loss_coeff,
            values=fwd_out.get("values"),
            num_tokens=num_tokens,
        )

    def compute_loss_for_module(
        self, *, module_id: str, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> torch.Tensor:
        """The loss of one batch as a whole (token-mean over its loss tokens)."""
        loss, stats = self._loss_and_stats(batch, fwd_out, None)
        stats["loss_tokens"] = batch["loss_mask"].sum().float()
        self.metrics.log_dict(stats, key=module_id, window=1)
        return loss

    def _update(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """One optimizer step on this learner's minibatch shard, in micro-batches (big CPU
        blocks mapped: ``big_blocks_mapped``)."""
        with big_blocks_mapped(self._device):
            return self._update_in_micro_batches(batch)

    def _update_in_micro_batches(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """One optimizer step on this learner's minibatch shard, in micro-batches.

        Each micro-batch's loss is weighted by L x (its shard's loss tokens) / (the minibatch's
        loss tokens over all L learners): with DDP or FSDP averaging gradients over learners, the
        step is the gradient of the token-mean over the whole minibatch.
        """
        (module_id, b), *rest = batch.items()
        assert not rest, f"TokenLearner trains one module, got {list(batch)}"
        s = self.config.mem1
        module = self.module[module_id]
        lengths = row_lengths(b)
        groups = micro_batches(lengths, s.micro_batch_tokens)
        _, world = rank_and_world()
        local = float(b["loss_mask"].sum())
        total = _all_reduce(local, "sum", self._device)
        steps = len(groups)
        if self._fsdp:  # every learner joins every sharded forward/backward
            steps = int(_all_reduce(float(steps), "max", self._device))
        ddp = isinstance(module, torch.nn.parallel.DistributedDataParallel)
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        sums: dict[str, torch.Tensor] = {}
        fwd: dict[str, Any] = {}
        loss_total = torch.zeros((), device=self._device)
        for k in range(steps):
            padding = k >= len(groups)
            sub = _rows_of(b, groups[0] if padding else groups[k], lengths)
            weight = 0.0 if padding else world * local / max(total, 1.0)
            defer_sync = ddp and k < len(groups) - 1  # DDP all-reduces on the last one only
            with module.no_sync() if defer_sync else contextlib.nullcontext():
                fwd = module.forward_train(sub)
                loss, stats = self._loss_and_stats(sub, fwd, max(local, 1.0))
                (loss * weight).backward()
            if k < steps - 1:
                release_free_heap(self._device)
            if not padding:
                loss_total = loss_total + loss.detach()
                for key, value in stats.items():
                    sums[key] = sums.get(key, 0.0) + value
        sums["grad_norm"] = self._clip_and_step()
        sums["loss_tokens"] = torch.tensor(local)
        sums["micro_batches"] = torch.tensor(float(len(groups)))
        self.metrics.log_dict(sums, key=module_id, window=1)
        return {module_id: fwd}, {module_id: loss_total}, {}

    def _clip_and_step(self) -> torch.Tensor:
        """Clips the gradients' global norm (``grad_clip``), steps the optimizers; a step with a
        non-finite norm is skipped. Returns the norm before clipping."""
        params = [p for p in self._params.values() if p.grad is not None]
        limit = self.config.grad_clip or float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, limit) if params else torch.zeros(())
        if hasattr(norm, "full_tensor"):  # a DTensor under FSDP
            norm = norm.full_tensor()
        if not torch.isfinite(norm):
            logger.warning("gradient norm is %s: update skipped", float(norm))
            return norm.detach()
        self._warm_up_lr()
        for optim in self._optimizer_parameters:
            optim.step()
        return norm.detach()

    def _warm_up_lr(self) -> None:
        """Sets the actor's learning rate for the coming step: ``lr x min(1, (k + 1) / N)`` at
        optimizer step k (0-based) with N = ``lr_warmup_steps``. k is read from AdamW's own
        step count, so a restored checkpoint resumes the ramp where it was."""
        s = self.config.mem1
        if s.lr_warmup_steps < 1:
            return
        for optim in self._optimizer_parameters:
            actor = optim.param_groups[0]
            state = optim.state.get(actor["params"][0], {})
            done = int(state["step"]) if "step" in state else 0
            actor["lr"] = s.lr * min(1.0, (done + 1) / s.lr_warmup_steps)

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
                out = policy.score(
                    x["input_ids"], x["position_ids"], x["seg"], x["vis"], logp_mask=x["loss_mask"]
                )
                loss = nll_loss(out["logp"], x["loss_mask"])
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
