"""Two learners against one learner on the same minibatch: DDP (every learner holds the model)
and FSDP2 (the model sharded over the learners) must give the same loss, the same gradients and
the same weights after the step.

The gradients of two DDP learners are checked in two forked gloo processes without Ray (fast);
DDP and FSDP through RLlib's learner group on a real local Ray are the slow tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from memrl_testing import start_forked_processes
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID

from memrl.envs.text import text_space
from memrl.methods.mem1.advantages import add_advantages
from memrl.methods.mem1.algorithm import learner_batches, merge_scores
from memrl.methods.mem1.batch import build_rows
from memrl.methods.mem1.context import ContextPolicy, Turn
from memrl.methods.mem1.rollout import TextEpisode

LR = 1e-3
KEYS = ("input_ids", "position_ids", "seg", "vis", "loss_mask", "old_logp", "advantages",
        "ref_logp", "old_values", "returns")  # fmt: skip


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _episodes(vocab: int) -> list[TextEpisode]:
    """Episodes of growing length (uneven rows), rewards 0, 1, 0, 1, 0."""
    rng = np.random.default_rng(0)
    episodes = []
    for e in range(5):
        turns = [
            Turn(gen_ids=rng.integers(5, vocab, 3 + 2 * t + e).tolist(),
                 obs_ids=rng.integers(5, vocab, 5).tolist())
            for t in range(2)
        ]  # fmt: skip
        turns[-1].obs_ids = []
        episodes.append(TextEpisode(f"t{e}", f"g{e}", rng.integers(5, vocab, 6).tolist(), turns,
                                    env_reward=float(e % 2)))  # fmt: skip
    return episodes


def _minibatch(learner) -> dict[str, np.ndarray]:
    """Uneven rows (so the two shards hold different numbers of loss tokens), PPO advantages."""
    episodes = _episodes(learner._policy().lm.config.vocab_size)
    rng = np.random.default_rng(1)
    cols = build_rows(episodes, ContextPolicy("mem1"), "per_turn", 32, pad_id=0)
    scored = {k: v for k, v in learner.score_rows(cols, 10_000).items() if k != "rows"}
    scored["ref_logp"] = scored["logp"] - 0.05 * cols["loss_mask"]
    add_advantages(cols, scored, episodes, algorithm="ppo", kl_coef=0.1, whiten=False)
    cols["old_logp"] = cols["old_logp"] + (rng.normal(0, 0.3, cols["old_logp"].shape)
                                           * cols["loss_mask"]).astype(np.float32)  # fmt: skip
    return {k: cols[k] for k in KEYS}


def _ddp_learner(rank: int, init_file: str, out_dir: str, build, shards) -> None:
    """One of two DDP learners (a forked process): its shard's update, then its gradients."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        learner = build()
        assert isinstance(
            learner.module[DEFAULT_MODULE_ID], torch.nn.parallel.DistributedDataParallel
        )
        learner.update(batch=shards[rank])
        named = learner._policy().named_parameters()
        grads = {n: p.grad.clone() for n, p in named if p.grad is not None}
        torch.save(grads, f"{out_dir}/{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ddp_learners_average_to_the_gradient_of_the_whole_minibatch(mem1_config, tmp_path):
    """Each DDP learner weights its shard's loss so that DDP's average over learners is the
    gradient of the token-mean over the whole minibatch: the gradients one learner gets on all
    of it, compared before any optimizer state can hide a scale (AdamW's first step hardly
    depends on it)."""
    spaces = {DEFAULT_MODULE_ID: (text_space(), text_space())}
    kw = {"algorithm": "ppo", "lr": LR, "grad_clip": 1e9, "micro_batch_tokens": 40}
    one = mem1_config(**kw).build_learner(spaces=spaces)
    rows = _minibatch(one)
    shards = learner_batches(rows, 2)["batches"]
    tokens = [int(b.policy_batches[DEFAULT_MODULE_ID]["loss_mask"].sum()) for b in shards]
    assert tokens[0] != tokens[1]  # unequal shards: the token normalizer matters

    def build():
        resources = {"num_learners": 2, "num_cpus_per_learner": 1}
        return mem1_config(resources=resources, **kw).build_learner(spaces=spaces)

    # Forked from a fresh interpreter that has torch and RLlib imported (memrl_testing says why).
    args = (str(tmp_path / "init"), str(tmp_path), build, shards)
    start_forked_processes(_ddp_learner, args, nprocs=2, workdir=tmp_path)
    one.update(**learner_batches(rows, 1))
    want = {n: p.grad for n, p in one._policy().named_parameters() if p.grad is not None}
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert got.keys() == want.keys()
        for name, grad in want.items():
            torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("fsdp", [False, True], ids=["ddp", "fsdp"])
def test_two_learners_step_like_one(local_ray, mem1_config, fsdp):
    # Defined here so that Ray ships it by value: learner processes cannot import this module.
    def grads_and_weights(learner) -> tuple[dict, dict]:
        """Every parameter's gradient and value, whole (gathered from the shards under FSDP)."""

        def full(value):
            value = value.full_tensor() if hasattr(value, "full_tensor") else value
            return value.detach().clone()

        named = dict(learner._policy().named_parameters())
        grads = {n: full(p.grad) for n, p in named.items() if p.grad is not None}
        return grads, {n: full(p) for n, p in named.items()}

    spaces = {DEFAULT_MODULE_ID: (text_space(), text_space())}
    kw = {"algorithm": "ppo", "lr": LR, "grad_clip": 1e9, "micro_batch_tokens": 40}
    one = mem1_config(**kw).build_learner(spaces=spaces)
    rows = _minibatch(one)
    assert rows["input_ids"].shape[0] >= 4
    group = mem1_config(
        fsdp=fsdp, resources={"num_learners": 2, "num_cpus_per_learner": 1}, **kw
    ).build_learner_group(spaces=spaces)
    try:
        # scoring: each learner scores every other row; merged, they are one learner's scores
        vocab = one._policy().lm.config.vocab_size
        cols = build_rows(_episodes(vocab), ContextPolicy("mem1"), "per_turn", 32, pad_id=0)
        parts = [r.get() for r in group.foreach_learner(lambda lr: lr.score_rows(cols, 64))]
        shares = sorted(tuple(p["rows"]) for p in parts)
        b = cols["input_ids"].shape[0]
        assert shares == [tuple(range(0, b, 2)), tuple(range(1, b, 2))]
        merged = merge_scores(parts, cols["input_ids"].shape)
        alone = one.score_rows(cols, 64)
        for key in ("logp", "ref_logp", "values"):
            np.testing.assert_allclose(merged[key], alone[key], atol=1e-5)
        shards = learner_batches(rows, 2)["batches"]
        tokens = [int(b.policy_batches[DEFAULT_MODULE_ID]["loss_mask"].sum()) for b in shards]
        assert tokens[0] != tokens[1]  # unequal shards: the token normalizer matters
        want = one.update(**learner_batches(rows, 1))[DEFAULT_MODULE_ID]
        got = group.update(batches=shards)
        want_grads, want_weights = grads_and_weights(one)
        per_learner = [r.get() for r in group.foreach_learner(grads_and_weights)]
        sharded = [
            r.get()
            for r in group.foreach_learner(
                lambda learner: all(
                    hasattr(p, "device_mesh") for p in learner._policy().parameters()
                )
            )
        ]
        # what weight syncs and checkpoints read (FSDP: gathered on the first learner)
        group.foreach_learner(lambda learner: learner.gather_full_state())
        synced = group.get_state()[COMPONENT_LEARNER][COMPONENT_RL_MODULE][DEFAULT_MODULE_ID]
    finally:
        group.shutdown()
    # the minibatch's loss: the mean of the learners' shard losses weighted by their tokens
    losses = [g[DEFAULT_MODULE_ID]["total_loss"].peek() for g in got]
    total = sum(n * loss for n, loss in zip(tokens, losses, strict=True)) / sum(tokens)
    assert total == pytest.approx(want["total_loss"].peek(), rel=1e-4)
    assert sharded == [fsdp, fsdp]  # FSDP: every parameter is a DTensor shard
    for name, weight in want_weights.items():
        got_weight = torch.as_tensor(np.array(synced[f"policy.{name}"]))
        torch.testing.assert_close(got_weight, weight, rtol=0, atol=LR * 0.1)
    for grads, weights in per_learner:
        assert grads.keys() == want_grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, want_grads[name], rtol=1e-4, atol=1e-7)
        for name, weight in weights.items():
            # AdamW's first step moves each weight by about lr x sign(gradient): the same step
            torch.testing.assert_close(weight, want_weights[name], rtol=0, atol=LR * 0.1)
