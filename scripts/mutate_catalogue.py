"""The breakage catalogue of ``scripts/mutate.py`` (``make mutate``): single-line bugs in the core
math of Memo, MEM1, the PPO formulas they share and the bulk rollout path, each with the fast tests
that must notice it (docs/testing.md)."""

from __future__ import annotations

from dataclasses import dataclass

MEM1_TESTS = ("tests/methods/mem1",)
MEMO_TESTS = ("tests/methods/memo",)
ROLLOUT_TESTS = ("tests/rollout",)
FAST = "not slow and not gpu"


@dataclass(frozen=True)
class Breakage:
    """One single-line bug: ``line`` (the exact text, occurring once in ``path``) becomes
    ``broken``, and ``tests`` must notice."""

    name: str
    """Short id (``--only NAME``)."""
    path: str
    """File, relative to the repository root."""
    line: str
    """Text of the correct line, without its indentation."""
    broken: str
    """What the line becomes."""
    tests: tuple[str, ...]
    """Test files or folders to run."""
    behaviour: str
    """The behaviour the breakage violates."""
    nth: int | None = None
    """Which occurrence of ``line`` to break (1: the first), for a line the file holds more than
    once; None: the line must occur exactly once."""


def _mem1(name: str, file: str, line: str, broken: str, behaviour: str) -> Breakage:
    return Breakage(name, f"memrl/methods/mem1/{file}", line, broken, MEM1_TESTS, behaviour)


def _memo(
    name: str, file: str, line: str, broken: str, behaviour: str, nth: int | None = None
) -> Breakage:
    return Breakage(name, f"memrl/methods/memo/{file}", line, broken, MEMO_TESTS, behaviour, nth)


def _ppo(name: str, line: str, broken: str, behaviour: str) -> Breakage:
    """A breakage of the PPO formulas both methods share: both methods' tests must notice."""
    return Breakage(
        name, "memrl/methods/ppo_math.py", line, broken, MEM1_TESTS + MEMO_TESTS, behaviour
    )


def _rollout(name: str, file: str, line: str, broken: str, behaviour: str) -> Breakage:
    return Breakage(name, f"memrl/rollout/{file}", line, broken, ROLLOUT_TESTS, behaviour)


CATALOGUE: tuple[Breakage, ...] = (
    # --- PPO formulas shared by Memo and MEM1 -----------------------------------------------
    _ppo(
        "ppo-mean-over-padding",
        "denom = mask.sum().clamp(min=1.0) if count is None else count",
        "denom = mask.numel() if count is None else count",
        "means divide by the masked steps (tokens), not by every position",
    ),
    _ppo(
        "ppo-pg-max",
        "return -torch.min(advantages * ratio, advantages * ratio.clamp(1.0 - clip, 1.0 + clip))",
        "return -torch.max(advantages * ratio, advantages * ratio.clamp(1.0 - clip, 1.0 + clip))",
        "PPO's surrogate takes the pessimistic (clipped) branch",
    ),
    _ppo(
        "ppo-approx-kl-k1",
        "return torch.exp(log_ratio) - 1.0 - log_ratio",
        "return -log_ratio",
        "approx_kl is the non-negative estimate (r - 1) - log r (1 - ln 2 at r = 2)",
    ),
    # --- MEM1: token losses -----------------------------------------------------------------
    _mem1(
        "mem1-ratio-inverted",
        "losses.py",
        "log_ratio = logp - old_logp",
        "log_ratio = old_logp - logp",
        "the ratio is pi / pi_old",
    ),
    _mem1(
        "mem1-value-clip-around-zero",
        "losses.py",
        "v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)",
        "v_clipped = torch.clamp(values, -clip, clip)",
        "the value clip is around the old values",
    ),
    _mem1(
        "mem1-k3-direction",
        "losses.py",
        "d = torch.clamp(ref_logp - logp, -20.0, 20.0)",
        "d = torch.clamp(logp - ref_logp, -20.0, 20.0)",
        "GRPO's k3 estimates KL(pi || pi_ref)",
    ),
    _mem1(
        "mem1-grpo-kl-sign",
        "losses.py",
        "loss = pg_loss + kl_coef * kl_loss",
        "loss = pg_loss - kl_coef * kl_loss",
        "GRPO's KL term is a penalty",
    ),
    _mem1(
        "mem1-vf-coeff-dropped",
        "losses.py",
        "loss = pg_loss + vf_loss_coeff * v_loss",
        "loss = pg_loss + v_loss",
        "PPO's value loss is weighted by vf_loss_coeff",
    ),
    # --- MEM1: advantages -------------------------------------------------------------------
    _mem1(
        "mem1-kl-reward-sign",
        "advantages.py",
        "token_rewards = -kl_coef * kl",
        "token_rewards = kl_coef * kl",
        "PPO's token reward penalizes the KL to the reference",
    ),
    _mem1(
        "mem1-no-baseline",
        "advantages.py",
        'advantages = (returns - scored["values"]) * mask',
        "advantages = returns * mask",
        "PPO's advantages are returns minus the critic's values",
    ),
    _mem1(
        "mem1-whiten-no-centre",
        "advantages.py",
        "advantages[mask] = (a - a.mean()) / (a.std() + 1e-8)",
        "advantages[mask] = a / (a.std() + 1e-8)",
        "whitened advantages have mean 0 on the loss tokens",
    ),
    _mem1(
        "mem1-raft-keeps-partial-answers",
        "rollout.py",
        "solved = ep.info.get(INFO_SUCCESS, 0.0) >= 1.0",
        'solved = ep.info.get("em", 0.0) >= 1.0',
        "RAFT trains only on episodes that answer every question exactly",
    ),
    _mem1(
        "mem1-raft-keeps-format-errors",
        "rollout.py",
        "return solved and ep.format_errors == 0 and not ep.truncated",
        "return solved and not ep.truncated",
        "RAFT drops episodes with a format error, even when their answer is right",
    ),
    _mem1(
        "mem1-nll-over-observations",
        "losses.py",
        "nll = nll_loss(logp, mask, num_tokens)",
        "nll = nll_loss(logp, torch.ones_like(mask), num_tokens)",
        "the RAFT/imitation NLL covers generated tokens only, never prompts or observations",
    ),
    _mem1(
        "mem1-dynamic-sampling-keeps-flat-groups",
        "selection.py",
        "return {str(g) for g in np.unique(keys) if np.ptp(values[keys == g]) > 0}",
        "return {str(g) for g in np.unique(keys) if np.ptp(values[keys == g]) >= 0}",
        "dynamic sampling drops GRPO groups whose rewards are all equal",
    ),
    _mem1(
        "mem1-old-logp-swapped",
        "advantages.py",
        'cols["old_logp"] = scored["logp"] if recompute_old_logp else cols["behaviour_logp"]',
        'cols["old_logp"] = cols["behaviour_logp"] if recompute_old_logp else scored["logp"]',
        "recompute_old_logp takes the ratio's denominator from the scoring pass",
    ),
    _mem1(
        "mem1-last-token-overwritten",
        "advantages.py",
        'token_rewards[last] += rewards[cols["episode"][last]]',
        'token_rewards[last] = rewards[cols["episode"][last]]',
        "the outcome adds to the last token's KL reward",
    ),
    _mem1(
        "mem1-grpo-raw-rewards",
        "advantages.py",
        'cols["advantages"] = np.where(mask, adv[ep_index], 0.0).astype(np.float32)',
        'cols["advantages"] = np.where(mask, rewards[ep_index], 0.0).astype(np.float32)',
        "GRPO's advantages are group-normalized outcomes",
    ),
    _mem1(
        "mem1-returns-forward",
        "advantages.py",
        "idx = np.lexsort((-order, ep))",
        "idx = np.lexsort((order, ep))",
        "returns are reward-to-go (summed from the end of the episode)",
    ),
    _mem1(
        "mem1-last-token-of-batch",
        "advantages.py",
        "out[mask] = order[mask] == last[ep[mask]]",
        "out[mask] = order[mask] == last.max()",
        "each episode's outcome lands on its own last generated token",
    ),
    _mem1(
        "mem1-group-stats-of-batch",
        "advantages.py",
        "out[idx] = (r - r.mean()) / (r.std() + eps)",
        "out[idx] = (r - rewards.mean()) / (rewards.std() + eps)",
        "GRPO normalizes each group by its own statistics",
    ),
    # --- MEM1: rows and batching ------------------------------------------------------------
    _mem1(
        "mem1-units-share-segments",
        "batch.py",
        'cols["seg"][r, sl] = u.seg + seg0',
        'cols["seg"][r, sl] = u.seg',
        "units packed in one row never see each other",
    ),
    _mem1(
        "mem1-unit-mask-dropped",
        "batch.py",
        'cols["vis"][r, seg0 : seg0 + k, seg0 : seg0 + k] = u.vis',
        'cols["vis"][r, seg0 : seg0 + k, seg0 : seg0 + k] = True',
        "a packed row keeps each unit's own attention mask",
    ),
    _mem1(
        "mem1-slice-shortest-row",
        "batch.py",
        "t = max(1, int(real.sum(1).max()))",
        "t = max(1, int(real.sum(1).min()))",
        "a sub-batch keeps its longest row whole",
    ),
    # --- MEM1: context policies and layouts -------------------------------------------------
    _mem1(
        "mem1-context-keeps-scratch",
        "context.py",
        'return [PROMPT_REF, ("kept", j - 1), ("obs", j - 1)]',
        'return [PROMPT_REF, ("gen", j - 1), ("obs", j - 1)]',
        "MEM1's context drops the scratch span of the previous turn",
    ),
    _mem1(
        "mem1-packed-exact-scratch",
        "context.py",
        'if ref[0] == "kept" and turns[ref[1]].scratch is None:',
        'if ref[0] == "kept":',
        "packed_exact shows a later turn the kept state, not the generated scratch",
    ),
    _mem1(
        "mem1-packed-gen-pieces-apart",
        "context.py",
        'vis[p, piece_index[("gen", t)]] = True',
        "vis[p, p] = True",
        "the pieces of one turn's generation see each other",
    ),
    _mem1(
        "mem1-token-order-restarts",
        "context.py",
        "tok_order[n_ctx:] = np.arange(order, order + n_gen)",
        "tok_order[n_ctx:] = np.arange(n_gen)",
        "token order runs over the whole episode, across turns",
    ),
    _mem1(
        "mem1-packed-positions-restart",
        "context.py",
        "positions.append(np.arange(ctx_len + offset, ctx_len + offset + n))",
        "positions.append(np.arange(offset, offset + n))",
        "generated tokens keep their rollout positions in packed rows",
    ),
    # --- MEM1: learner ----------------------------------------------------------------------
    _mem1(
        "mem1-reference-is-policy",
        "learner.py",
        'found["ref_logp"] = self._reference.score(*args, logp_mask=wanted)["logp"]',
        'found["ref_logp"] = policy.score(*args, logp_mask=wanted)["logp"]',
        "reference log-probs come from the frozen reference",
    ),
    _mem1(
        "mem1-reference-temperature",
        "learner.py",
        "ref = copy.deepcopy(policy).eval().requires_grad_(False)",
        "ref = TokenPolicy(copy.deepcopy(policy.lm).eval().requires_grad_(False), False)",
        "the KL reference scores at the policy's sampling temperature (a copy of the whole policy)",
    ),
    _mem1(
        "mem1-logp-temperature",
        "network.py",
        "return logits / temperature if temperature != 1.0 else logits",
        "return logits",
        "learners score tokens at the sampling temperature",
    ),
    _mem1(
        "mem1-ddp-scale",
        "learner.py",
        "weight = 0.0 if padding else world * local / max(total, 1.0)",
        "weight = 0.0 if padding else local / max(total, 1.0)",
        "with DDP each learner's gradient scale includes the number of learners",
    ),
    _mem1(
        "mem1-micro-batch-own-mean",
        "learner.py",
        "loss, stats = self._loss_and_stats(sub, fwd, max(local, 1.0))",
        "loss, stats = self._loss_and_stats(sub, fwd, None)",
        "micro-batches add up to the minibatch's token-mean",
    ),
    _mem1(
        "mem1-value-clip-around-new",
        "losses.py",
        "v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)",
        "v_clipped = values + torch.clamp(old_values - values, -clip, clip)",
        "the value clip is around the old values, not the new ones",
    ),
    _mem1(
        "mem1-update-outside-mmap-scope",
        "learner.py",
        "with big_blocks_mapped(self._device):",
        "with contextlib.nullcontext():",
        "a CPU learner update runs with big blocks mapped (big_blocks_mapped)",
    ),
    # --- Memo: learner ----------------------------------------------------------------------
    _memo(
        "memo-ratio-inverted",
        "learner.py",
        "ratio = torch.exp(logp - behaviour_logp)",
        "ratio = torch.exp(behaviour_logp - logp)",
        "the ratio is pi / pi_old",
    ),
    _memo(
        "memo-vf-unclipped",
        "learner.py",
        "vf_loss = vf_err.clamp(max=vf_clip)",
        "vf_loss = vf_err",
        "the squared value error is clipped at vf_clip_param",
    ),
    _memo(
        "memo-entropy-sign",
        "learner.py",
        "per_step = pg_loss + vf_coeff * vf_loss - entropy_coeff * entropy",
        "per_step = pg_loss + vf_coeff * vf_loss + entropy_coeff * entropy",
        "the entropy bonus lowers the loss",
    ),
    _memo(
        "memo-mean-over-padding",
        "learner.py",
        "total = masked_mean(per_step, mask)",
        "total = per_step.mean()",
        "the loss averages over the loss steps only",
    ),
    _memo(
        "memo-targets-not-normalized",
        "learner.py",
        "module.vf.normalize(targets),",
        "targets,",
        "the value loss compares normalized values with normalized targets",
    ),
    _memo(
        "memo-kl-sign",
        "learner.py",
        "total = total + self.curr_kl_coeffs_per_module[module_id] * kl",
        "total = total - self.curr_kl_coeffs_per_module[module_id] * kl",
        "the KL term adds coefficient x KL",
    ),
    _memo(
        "memo-kl-direction",
        "learner.py",
        "kl = mean(prev.kl(curr))",
        "kl = mean(curr.kl(prev))",
        "the KL term is KL(stored || current)",
    ),
    _memo(
        "memo-explained-variance-normalized",
        "learner.py",
        "LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(targets, values, mask),",
        "LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(targets, v_norm, mask),",
        "vf_explained_var compares the targets with the values in return units",
    ),
    _memo(
        "memo-rows-shuffled-once",
        "learner.py",
        "order = rng.permutation(len(steps))",
        "order = np.random.default_rng(seed).permutation(len(steps))",
        "each epoch shuffles the rows anew",
    ),
    # --- Memo: trial rows and advantages ----------------------------------------------------
    _memo(
        "memo-gae-no-discount",
        "batch.py",
        "delta = rewards[t] + gamma * values[t + 1] - values[t]",
        "delta = rewards[t] + values[t + 1] - values[t]",
        "the TD error discounts the next value",
    ),
    _memo(
        "memo-gae-no-gamma-in-trace",
        "batch.py",
        "last = delta + gamma * lambda_ * last",
        "last = delta + lambda_ * last",
        "GAE's trace decays by gamma x lambda",
    ),
    _memo(
        "memo-advantages-over-padding",
        "batch.py",
        "adv[mask] = (sel - sel.mean()) / max(float(sel.std()), 1e-4)",
        "adv[mask] = (sel - adv.mean()) / max(float(adv.std()), 1e-4)",
        "advantages are standardized over the loss mask only",
    ),
    _memo(
        "memo-targets-without-values",
        "batch.py",
        "targets[i, t0 : t0 + n] = a + v[:-1]",
        "targets[i, t0 : t0 + n] = a",
        "value targets are advantages plus values",
    ),
    _memo(
        "memo-lookback-in-loss",
        "batch.py",
        "mask[i, t0 : t0 + n] = True",
        "mask[i, : t0 + n] = True",
        "the loss covers the chunk's new steps, not its lookback",
    ),
    _memo(
        "memo-value-stats-over-padding",
        "batch.py",
        "module.vf.update(torch.from_numpy(targets[mask]).to(device))",
        "module.vf.update(torch.from_numpy(targets).to(device))",
        "the value statistics move with the loss steps' targets only",
    ),
    # --- Memo: cache and attention ----------------------------------------------------------
    _memo(
        "memo-segment-view-offset",
        "cache.py",
        "idx = torch.as_tensor(self.n_sum[:, None] + np.arange(S), device=self.kv.device)",
        "idx = torch.as_tensor(np.zeros((B, 1), np.int64) + np.arange(S), device=self.kv.device)",
        "the per-segment K/V view starts after the row's summaries",
    ),
    _memo(
        "memo-cache-keys-short",
        "cache.py",
        "return kb[:, :, : self.keys], vb[:, :, : self.keys]",
        "return kb[:, :, : self.keys - 1], vb[:, :, : self.keys - 1]",
        "a cached step attends to every key up to itself",
    ),
    _memo(
        "memo-window-one-wider",
        "layers.py",
        "mask &= i[None, :] > i[:, None] - window",
        "mask &= i[None, :] >= i[:, None] - window",
        "FCT's window holds the last W steps, the current one included",
    ),
    _memo(
        "memo-summary-slots-blind-to-self",
        "layers.py",
        "return j[None] <= (first + ar)[:, None]",
        "return j[None] < (first + ar)[:, None]",
        "new tokens in the cache see the keys up to themselves",
    ),
    _memo(
        "memo-attend-unscaled",
        "layers.py",
        "s = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))",
        "s = torch.matmul(q, k.transpose(-1, -2))",
        "cached attention scales scores by 1/sqrt(head size)",
    ),
    _memo(
        "memo-rope-halves-unswapped",
        "layers.py",
        "swapped = x.unflatten(-1, (2, x.shape[-1] // 2)).flip(-2).flatten(-2)",
        "swapped = x.unflatten(-1, (2, x.shape[-1] // 2)).flatten(-2)",
        "RoPE rotates pairs (scores depend on relative positions only)",
    ),
    _memo(
        "memo-summary-positions",
        "stepping.py",
        "cos, sin = self._rope(n + Lg, Ls, keys)",
        "cos, sin = self._rope(n, Ls, keys)",
        "summary slots sit after the segment at a segment's end",
    ),
    _memo(
        "memo-evict-newest",
        "network.py",
        "mem = mem[:, -cap * cfg.l_sum :]",
        "mem = mem[:, : cap * cfg.l_sum]",
        "streaming Memo evicts the oldest summary block",
    ),
    _memo(
        "memo-kept-summary-keys-detached",
        "network.py",
        "kvs = [(k[:, :, :fresh], v[:, :, :fresh]) for k, v in kvs]",
        "kvs = [(k[:, :, :fresh].detach(), v[:, :, :fresh]) for k, v in kvs]",
        "gradients flow through the summary K/V a training chunk keeps for the next",
    ),
    _memo(
        "memo-step-position",
        "stepping.py",
        "pos = cache.t if fct else cache.n_sum + cache.seg_len  # (B,) host",
        "pos = cache.t if fct else cache.seg_len  # (B,) host",
        "a cached step's token sits after the summaries",
    ),
    _memo(
        "memo-decoupled-clips-around-acting",
        "bulk_learner.py",
        'rows["logp"] = np.where(mask, prox_logp, rows["logp"]).astype(np.float32)',
        'rows["logp"] = rows["logp"].astype(np.float32)',
        "a batch acted behind is clipped around the learner's own policy (decoupled PPO)",
    ),
    _memo(
        "memo-behaviour-weight-inverted",
        "bulk_learner.py",
        'behaviour[mask] = np.exp(prox_logp[mask] - rows["logp"][mask])',
        'behaviour[mask] = np.exp(rows["logp"][mask] - prox_logp[mask])',
        "decoupled PPO weights a step by pi_prox / pi_behaviour",
    ),
    _memo(
        "memo-behaviour-weight-dropped",
        "learner.py",
        "pg_loss = pg_loss * behaviour_weights",
        "pg_loss = pg_loss",
        "decoupled PPO's surrogate is weighted per step",
    ),
    _memo(
        "memo-bulk-prefix-dropped",
        "bulk_learner.py",
        "obs[row[0, first[ii]], kk] = prefix[first[ii], kk]",
        "obs[row[0, first[ii]], kk] = 0.0",
        "a bulk row that starts mid-trial holds its trial's earlier observations",
    ),
    _memo(
        "memo-bulk-bootstrap-obs",
        "bulk_learner.py",
        "obs[row[te, ne], step[te, ne] + 1] = rollout.obs[te + 1, ne]",
        "obs[row[te, ne], step[te, ne] + 1] = rollout.obs[te, ne]",
        "a bulk row ends with the observation after its last step (the bootstrap value's)",
    ),
    _memo(
        "memo-bulk-reset-row-continues-trial",
        "bulk_runner.py",
        "batch[MEMO_TRIAL_T] = np.where(rollout.valid[t], trial_t, 0).astype(np.int64)",
        "batch[MEMO_TRIAL_T] = trial_t.astype(np.int64)",
        "a reset row restarts its cache (ended trials are not rebuilt under new weights)",
    ),
    _memo(
        "memo-bulk-prefix-by-position",
        "bulk_learner.py",
        "obs[row[0, first[ii]], kk] = prefix[first[ii], kk]",
        "obs[row[0, first[ii]], kk] = prefix[ii, kk]",
        "a bulk row that starts mid-trial takes its own env's earlier observations",
    ),
    _memo(
        "memo-bulk-value-stats-over-padding",
        "bulk_learner.py",
        "module.vf.update(torch.from_numpy(targets[mask]).to(device))",
        "module.vf.update(torch.from_numpy(targets).to(device))",
        "the bulk batch moves the value statistics with the loss steps' targets only",
    ),
    _memo(
        "memo-bulk-seg-len-not-drawn",
        "bulk_runner.py",
        "seg = self.module.memo_cfg.l_seg if not explore else self.module._acting_seg",
        "seg = self.module.memo_cfg.l_seg",
        "a bulk rollout records the segment length exploration acted with",
    ),
    # --- bulk rollouts: GAE over (T, N) arrays and the runner's rows ------------------------
    _rollout(
        "rollout-gae-propagate-off-by-one",
        "gae.py",
        "running = deltas[t] + gamma * lambda_ * propagate[t] * running",
        "running = deltas[t] + gamma * lambda_ * propagate[t - 1] * running",
        "an advantage stops at the step that ends its trial, not one step off",
    ),
    _rollout(
        "rollout-gae-truncation-flows",
        "gae.py",
        "propagate = not_terminal * (1.0 - truncated.float())",
        "propagate = not_terminal",
        "nothing flows back across a truncated trial's end",
    ),
    _rollout(
        "rollout-gae-skips-last-row",
        "gae.py",
        "for t in range(T - 1, -1, -1):",
        "for t in range(T - 2, -1, -1):",
        "the rollout's last row gets its advantage (bootstrapped from row T's value)",
    ),
    _rollout(
        "rollout-lstm-sequence-state-off-by-one",
        "recurrent_learner.py",
        "Columns.STATE_IN: {k: v[tf, nf] for k, v in states.items()},",
        "Columns.STATE_IN: {k: v[tf - 1, nf] for k, v in states.items()},",
        "an LSTM training sequence starts from the state its first step acted from",
    ),
    _rollout(
        "rollout-lstm-state-not-reset",
        "recurrent_runner.py",
        "v[starts] = self._initial[k]",
        "v[starts] = v[starts]",
        "a new trial acts from the module's initial recurrent state",
    ),
    _rollout(
        "rollout-obs-row-off-by-one",
        "env_runner.py",
        "rollout.obs[t + 1] = obs",
        "rollout.obs[t] = obs",
        "row t holds the observation the policy acted on at t (the step's result goes to t + 1)",
    ),
    _rollout(
        "rollout-grown-obs-misaligned",
        "env_runner.py",
        "obs=np.concatenate([rollout.obs, more.obs[1:]]),",
        "obs=np.concatenate([rollout.obs[:-1], more.obs]),",
        "a rollout that outgrows its first allocation keeps row t's observation at row t",
    ),
    _rollout(
        "rollout-train-obs-shifted",
        "learner.py",
        "(Columns.OBS, obs[:-1]),",
        "(Columns.OBS, obs[1:]),",
        "a train-batch row holds the observation its action was chosen on",
    ),
    _rollout(
        "rollout-advantages-not-centred",
        "learner.py",
        "batch[Postprocessing.ADVANTAGES] = (adv - adv.mean()) / std.clamp(min=1e-4)",
        "batch[Postprocessing.ADVANTAGES] = adv / std.clamp(min=1e-4)",
        "standardized advantages have mean 0 over the real steps",
    ),
    _rollout(
        "rollout-minibatches-shuffled-once",
        "learner.py",
        "order = torch.from_numpy(rng.permutation(size)).to(device)",
        "order = torch.from_numpy(np.random.default_rng(seed).permutation(size)).to(device)",
        "each epoch shuffles the flat batch anew",
    ),
    _rollout(
        "rollout-minibatches-same-every-update",
        "learner.py",
        "seed = (int(self.config.seed or 0), int(self._weights_seq_no))",
        "seed = (int(self.config.seed or 0), 0)",
        "each update shuffles its minibatches anew",
    ),
    _rollout(
        "rollout-lstm-sequences-shuffled-once",
        "recurrent_learner.py",
        "for group in np.array_split(rng.permutation(rows), count):",
        "for group in np.array_split(np.random.default_rng(0).permutation(rows), count):",
        "each epoch shuffles the LSTM sequences anew",
    ),
    _rollout(
        "rollout-lstm-advantages-over-padding",
        "recurrent_learner.py",
        "sel = adv[mask]",
        "sel = adv.flatten()",
        "LSTM advantages are standardized over the real steps, not the sequences' padding",
    ),
    _rollout(
        "rollout-overlap-batch-not-marked",
        "overlap.py",
        "rollout.extras[ACTED_BEHIND] = True",
        "rollout.extras[ACTED_BEHIND] = False",
        "a batch sampled during the last update is marked as acted one version behind",
    ),
)
