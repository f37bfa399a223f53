"""``TokenLearner`` built for real (RLlib's build_learner, no Ray): its loss against values worked
out by hand, micro-batched updates against one pass, the scoring pass against the policy."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from memrl.methods.mem1.advantages import add_advantages
from memrl.methods.mem1.batch import build_rows, row_lengths, slice_rows
from memrl.methods.mem1.context import ContextPolicy, Turn
from memrl.methods.mem1.rollout import TextEpisode

UPDATE_KEYS = ("input_ids", "position_ids", "seg", "vis", "loss_mask", "old_logp", "advantages")


def _hand_batch():
    logp = torch.log(torch.tensor([[1.5, 0.5, 3.0]]))
    batch = {
        "loss_mask": torch.tensor([[True, True, False]]),
        "old_logp": torch.zeros((1, 3)),
        "advantages": torch.tensor([[1.0, -1.0, 7.0]]),
        "old_values": torch.zeros((1, 3)),
        "returns": torch.tensor([[1.0, 3.0, 9.0]]),
        "ref_logp": logp + torch.tensor([[math.log(2.0), 0.0, 1.0]]),
    }
    return logp, batch


def test_compute_loss_for_module_by_hand(make_learner):
    logp, batch = _hand_batch()
    grpo = make_learner(algorithm="grpo", group_size=2, kl_coef=0.5, clip=0.2)
    loss = grpo.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=None, batch=batch, fwd_out={"logp": logp}
    )
    # clipped surrogate: tokens -1.2 and 0.8 -> -0.2; k3 KL at d = (ln 2, 0): (1 - ln 2) / 2
    assert loss.item() == pytest.approx(-0.2 + 0.5 * (1 - math.log(2.0)) / 2)
    ppo = make_learner(algorithm="ppo", clip=0.2, vf_clip=0.5, vf_loss_coeff=0.5, kl_coef=0.5)
    values = torch.tensor([[2.0, 0.0, 5.0]])
    loss = ppo.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID,
        config=None,
        batch=batch,
        fwd_out={"logp": logp, "values": values},
    )
    # value loss: 0.5 x mean(max((2-1)^2, (.5-1)^2), max(9, 9)) = 2.5; no KL term (it is in A)
    assert loss.item() == pytest.approx(-0.2 + 0.5 * 2.5)


def _episodes(vocab: int, n: int = 4, seed: int = 0) -> list[TextEpisode]:
    """Random-token episodes of 2-3 turns, in groups of two with rewards 0, 1 | 2, 3."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        turns = []
        for t in range(2 + e % 2):
            gen = rng.integers(5, vocab, 4 + t).tolist()
            turns.append(Turn(gen_ids=gen, obs_ids=rng.integers(5, vocab, 6).tolist(), logps=None))
        turns[-1].obs_ids = []
        out.append(
            TextEpisode(
                f"t{e}", f"g{e // 2}", rng.integers(5, vocab, 8).tolist(), turns, env_reward=e
            )
        )
    return out


def _update_rows(learner, algorithm: str):
    """A real row batch with advantages from the learner's own scoring pass."""
    vocab = learner._policy().lm.config.vocab_size
    episodes = _episodes(vocab)
    cols = build_rows(episodes, ContextPolicy("mem1"), "per_turn", 40, pad_id=0)
    scored = learner.score_rows(cols, token_budget=10_000)
    scored = {k: v for k, v in scored.items() if k != "rows"}
    rng = np.random.default_rng(1)
    scored["ref_logp"] = scored["logp"] + rng.normal(0, 0.1, scored["logp"].shape).astype(
        np.float32
    )  # a reference that differs, so the KL terms are not zero
    add_advantages(cols, scored, episodes, algorithm=algorithm, kl_coef=0.1, whiten=False)
    keys = (*UPDATE_KEYS, "ref_logp", *(("old_values", "returns") if algorithm == "ppo" else ()))
    return {k: cols[k] for k in keys}


def _stats(results) -> dict[str, float]:
    return {k: v.peek() for k, v in results[DEFAULT_MODULE_ID].items()}


def _grads(learner) -> list[torch.Tensor]:
    return [p.grad.clone() for p in learner._params.values()]


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_micro_batched_update_equals_one_pass(make_learner, algorithm):
    kw = {"algorithm": algorithm, "group_size": 2, "lr": 1e-3, "grad_clip": 1e9}
    whole = make_learner(micro_batch_tokens=100_000, **kw)
    micro = make_learner(micro_batch_tokens=30, **kw)
    rows = _update_rows(whole, algorithm)
    assert rows["input_ids"].shape[0] >= 4  # several rows, so several micro-batches
    # Ratios away from 1, so that the clipped branch has work to do.
    rng = np.random.default_rng(2)
    rows["old_logp"] = (
        rows["old_logp"]
        + rng.normal(0, 0.5, rows["old_logp"].shape).astype(np.float32) * rows["loss_mask"]
    )
    batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(rows)}, env_steps=1)
    one = _stats(whole.update(batch=batch))
    many = _stats(micro.update(batch=batch))
    assert many["micro_batches"] >= 3 and one["micro_batches"] == 1
    for a, b in zip(_grads(whole), _grads(micro), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    assert one["clipfrac"] > 0  # the clipped branch is exercised
    for key in ("policy_loss", "ref_kl", "clipfrac", "approx_kl", "total_loss"):
        assert many[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7)


def test_one_micro_batch_is_the_gradient_of_compute_loss_for_module(make_learner):
    learner = make_learner(algorithm="ppo", lr=1e-3, grad_clip=1e9)
    rows = _update_rows(learner, "ppo")
    learner.update(batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(rows)}, env_steps=1))
    got = _grads(learner)
    # The same gradient by hand, from the weights before the step: rebuild and do one pass.
    fresh = make_learner(algorithm="ppo", lr=1e-3, grad_clip=1e9)
    batch = {k: torch.as_tensor(v) for k, v in rows.items()}
    module = fresh.module[DEFAULT_MODULE_ID]
    loss = fresh.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=None, batch=batch, fwd_out=module.forward_train(batch)
    )
    loss.backward()
    for a, b in zip(got, _grads(fresh), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_score_rows_reads_the_policy_at_loss_tokens_only(make_learner):
    learner = make_learner(algorithm="ppo")
    policy = learner._policy()
    with torch.no_grad():
        policy.value_head.weight.normal_()
    vocab = policy.lm.config.vocab_size
    cols = build_rows(_episodes(vocab), ContextPolicy("mem1"), "per_turn", 40, pad_id=0)
    scored = learner.score_rows(cols, token_budget=50)
    np.testing.assert_array_equal(scored["rows"], np.arange(cols["input_ids"].shape[0]))
    mask = cols["loss_mask"]
    assert not scored["logp"][~mask].any() and not scored["ref_logp"][~mask].any()
    for r in range(cols["input_ids"].shape[0]):
        x = {k: torch.as_tensor(v) for k, v in slice_rows(cols, [r]).items()}
        with torch.no_grad():
            out = policy.score(
                x["input_ids"], x["position_ids"], x["seg"], x["vis"], with_values=True
            )
        n = int(row_lengths(cols)[r])
        m = mask[r, :n]
        np.testing.assert_allclose(scored["logp"][r, :n][m], out["logp"][0, :n][m], atol=1e-5)
        np.testing.assert_allclose(scored["values"][r, :n], out["values"][0, :n], atol=1e-5)
    # The reference starts as a frozen copy of the policy.
    np.testing.assert_allclose(scored["ref_logp"], scored["logp"], atol=1e-6)


def test_score_rows_computes_only_what_is_asked(make_learner):
    learner = make_learner(algorithm="grpo", group_size=2)
    with torch.no_grad():  # policy and reference apart, so that each column has its own source
        for p in learner._policy().lm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    vocab = learner._policy().lm.config.vocab_size
    cols = build_rows(_episodes(vocab), ContextPolicy("mem1"), "per_turn", 40, pad_id=0)
    both = learner.score_rows(cols, token_budget=50)
    only_ref = learner.score_rows(cols, token_budget=50, current=False)
    only_cur = learner.score_rows(cols, token_budget=50, reference=False)
    assert set(only_ref) == {"rows", "ref_logp"} and set(only_cur) == {"rows", "logp"}
    np.testing.assert_array_equal(only_ref["ref_logp"], both["ref_logp"])
    np.testing.assert_array_equal(only_cur["logp"], both["logp"])
    assert np.abs(both["logp"] - both["ref_logp"]).max() > 1e-4


def test_grpo_without_kl_or_recomputed_logps_scores_nothing(mem1_config):
    from memrl.methods.mem1.algorithm import Mem1Algorithm

    calls = []

    class Counting:  # stands in for the learner group: any scoring call would show up here
        def foreach_learner(self, fn):
            calls.append(fn)
            return []

    algo = Mem1Algorithm.__new__(Mem1Algorithm)
    algo.learner_group = Counting()
    cols = {"input_ids": np.zeros((2, 3), np.int64)}
    for kl, recompute, scoring_calls in ((0.0, False, 0), (0.1, False, 1), (0.0, True, 1)):
        algo.config = mem1_config(
            algorithm="grpo", group_size=2, kl_coef=kl, recompute_old_logp=recompute
        )
        calls.clear()
        algo._score(cols)
        assert len(calls) == scoring_calls, (kl, recompute)


def test_reference_log_probs_come_from_the_frozen_reference(make_learner):
    """Once the policy has moved away from its reference, ``score_rows`` reads the current
    log-probs from the policy and the reference log-probs from the reference as it was built."""
    learner = make_learner(algorithm="ppo")
    policy = learner._policy()
    cols = build_rows(
        _episodes(policy.lm.config.vocab_size), ContextPolicy("mem1"), "per_turn", 40, pad_id=0
    )
    before = learner.score_rows(cols, token_budget=10_000)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in policy.lm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    after = learner.score_rows(cols, token_budget=10_000)
    mask = cols["loss_mask"]
    assert np.abs(after["logp"] - before["logp"])[mask].mean() > 1e-2  # the policy moved
    np.testing.assert_allclose(after["ref_logp"], before["logp"], atol=1e-5)


def test_reference_scores_at_the_policy_temperature(make_learner):
    """With rollouts sampled at a temperature, the KL reference is a copy of that same sampling
    distribution: before any update its log-probs equal the policy's (a reference scored at
    temperature 1 would put a KL between identical weights)."""
    learner = make_learner(
        algorithm="grpo", group_size=2, kl_coef=0.1, model={"generation": {"temperature": 0.25}}
    )
    policy, ref = learner._policy(), learner._reference
    assert policy.temperature == 0.25
    assert ref.temperature == policy.temperature and ref.compute_dtype == policy.compute_dtype
    cols = build_rows(
        _episodes(policy.lm.config.vocab_size), ContextPolicy("mem1"), "per_turn", 40, pad_id=0
    )
    scored = learner.score_rows(cols, token_budget=10_000)
    mask = cols["loss_mask"]
    np.testing.assert_allclose(scored["ref_logp"][mask], scored["logp"][mask], atol=1e-6)
    policy.temperature = 1.0  # the same weights at another temperature score differently
    at_one = learner.score_rows(cols, token_budget=10_000, reference=False)
    assert np.abs(at_one["logp"] - scored["logp"])[mask].max() > 1e-2


def test_reference_is_refreshed_in_place(make_learner):
    learner = make_learner(algorithm="grpo", group_size=2)
    ref = learner._reference
    with torch.no_grad():
        for p in learner._policy().lm.parameters():
            p.add_(0.1)
    assert not torch.equal(next(ref.lm.parameters()), next(learner._policy().lm.parameters()))
    learner.snapshot_reference()
    assert learner._reference is ref  # no second copy is made
    for a, b in zip(ref.lm.parameters(), learner._policy().lm.parameters(), strict=True):
        assert torch.equal(a, b) and not a.requires_grad


def test_bf16_weights_travel_as_bf16_tensors(tiny_model_dir):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from memrl.envs.text import text_space
    from memrl.methods.mem1.rlmodule import LLMRLModule

    def module(inference_only: bool):
        cfg = {"path": str(tiny_model_dir), "dtype": "bfloat16", "value_head": True}
        spec = RLModuleSpec(
            module_class=LLMRLModule,
            observation_space=text_space(),
            action_space=text_space(),
            model_config=cfg,
            inference_only=inference_only,
        )
        return spec.build()

    learner_side, runner_side = module(False), module(True)
    with torch.no_grad():
        for p in learner_side.parameters():
            p.add_(0.25)
    state = learner_side.get_state(inference_only=True)
    assert state and all(v.dtype == torch.bfloat16 for v in state.values())
    assert not any(k.startswith("policy.value_head") for k in state)  # runners have no critic
    runner_side.set_state(state)
    for name, p in runner_side.named_parameters():
        assert torch.equal(p, dict(learner_side.named_parameters())[name])


def test_lr_warm_up_ramps_the_actor_lr_and_resumes_from_a_restored_state(make_learner):
    kw = {"algorithm": "grpo", "group_size": 2, "lr": 1e-3, "lr_warmup_steps": 3}
    learner = make_learner(**kw)
    rows = _update_rows(learner, "grpo")
    batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(rows)}, env_steps=1)
    optim = next(iter(learner._optimizer_parameters))
    seen = []
    for _ in range(2):
        learner.update(batch=batch)
        seen.append(optim.param_groups[0]["lr"])
    assert seen == pytest.approx([1e-3 / 3, 2e-3 / 3])
    # A learner restored from this state takes step 3 at the full rate, and stays there.
    restored = make_learner(**kw)
    restored.set_state(learner.get_state())
    optim = next(iter(restored._optimizer_parameters))
    for _ in range(2):
        restored.update(batch=batch)
        assert optim.param_groups[0]["lr"] == pytest.approx(1e-3)


_MMAP_PROBE = """
import contextlib, ctypes, ctypes.util, sys
import torch
from memrl.methods.mem1.learner import big_blocks_mapped
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
def mapped_kib():
    libc.free(libc.malloc(16 << 20))  # freed, it raises glibc's default mmap threshold to 16 MB
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(1 << 20)
    mapped = (libc.mallinfo2().hblkhd - before) >> 10  # KiB mapped for the 1 MB block
    libc.free(block)
    return mapped
where = sys.argv[1]
scope = big_blocks_mapped(torch.device(where.split(",")[1])) if "," in where else None
with scope or contextlib.nullcontext():
    inside = mapped_kib()
print(inside, mapped_kib())
"""


def test_big_blocks_are_mapped_during_a_cpu_update_only():
    """With glibc's default, a 1 MB block asked for after a 16 MB one was freed comes from the
    heap (the threshold rose to 16 MB), where it stays resident when freed. Within
    ``big_blocks_mapped`` (a CPU learner update) it gets its own mmap, handed back to the
    system when freed; after it, blocks below 32 MB come from the heap again (generation's
    speed); on a GPU nothing changes."""
    import subprocess
    import sys

    def mapped_kib(where: str) -> tuple[int, int]:
        out = subprocess.run(
            [sys.executable, "-c", _MMAP_PROBE, where], capture_output=True, text=True, check=True
        )
        inside, after = out.stdout.strip().splitlines()[-1].split()
        return int(inside), int(after)

    assert mapped_kib("default") == (0, 0)
    inside, after = mapped_kib("update,cpu")
    assert inside >= 1024 and after == 0
    assert mapped_kib("update,meta") == (0, 0)  # not a CPU learner: glibc's default kept


def test_a_cpu_update_runs_its_forward_and_backward_with_big_blocks_mapped(
    make_learner, monkeypatch
):
    """Every micro-batch of a CPU learner update runs inside ``big_blocks_mapped`` (checked by
    wrapping the real scope and recording, at each micro-batch's loss, whether it is open)."""
    import memrl.methods.mem1.learner as mem1_learner

    learner = make_learner(algorithm="ppo", micro_batch_tokens=30)
    opened = []
    real_scope = mem1_learner.big_blocks_mapped

    @contextlib.contextmanager
    def recorded_scope(device):
        with real_scope(device):
            opened.append(device)
            try:
                yield
            finally:
                opened.pop()

    monkeypatch.setattr(mem1_learner, "big_blocks_mapped", recorded_scope)
    inside = []
    loss_and_stats = learner._loss_and_stats

    def recorded_loss(*args, **kwargs):
        inside.append([d.type for d in opened])
        return loss_and_stats(*args, **kwargs)

    monkeypatch.setattr(learner, "_loss_and_stats", recorded_loss)
    rows = _update_rows(learner, "ppo")
    learner.update(batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(rows)}, env_steps=1))
    assert len(inside) >= 2  # several micro-batches
    assert inside == [["cpu"]] * len(inside)
    assert opened == []  # closed after the update
