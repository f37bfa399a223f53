"""MemoTransformer: the cached step path equals the training forward; cache sizes are bounded."""

from __future__ import annotations

import pytest
import torch

from memrl.methods.memo.network import MemoConfig, MemoTransformer

torch.set_num_threads(1)  # small shared machines: one thread per test process

SMALL = dict(d_model=32, n_layers=2, n_heads=4, l_seg=8, l_sum=2)


def _net(**kw) -> MemoTransformer:
    torch.manual_seed(0)
    net = MemoTransformer(MemoConfig(**{**SMALL, **kw})).eval()
    # Larger weights than the 0.02 init, so attention is far from uniform and bugs show.
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return net


def _stepped(net: MemoTransformer, x: torch.Tensor) -> torch.Tensor:
    cache = net.init_cache(batch_size=x.shape[0])
    out = []
    for t in range(x.shape[1]):
        y, cache = net.step(x[:, t], cache)
        out.append(y)
    return torch.stack(out, dim=1)


CASES = [
    dict(mode="memo"),
    dict(mode="rmt"),
    dict(mode="fct"),
    dict(mode="fct", fct_window=5),
    dict(mode="memo", max_summaries=2),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_step_path_equals_training_forward(kw):
    net = _net(**kw)
    x = torch.randn(3, 4 * 8 + 5, 32)  # four full segments and a partial one
    ref = net(x)
    got = _stepped(net, x)
    assert (ref - got).abs().max().item() <= 1e-4


@pytest.mark.parametrize("offsets", [(0, 5, 11), (0, 8, 16)], ids=["apart", "segments-apart"])
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_envs_not_in_lockstep_each_match_their_own_training_forward(kw, offsets):
    """Env b starts its trial at step offsets[b]: the batch never holds equal counts.

    (0, 8, 16): every env ends a segment at the same step while holding different numbers of
    summaries (and, capped, some evict while others append).
    """
    net = _net(**kw)
    T = max(offsets) + 4 * 8 + 5  # each env: four full segments and a partial one
    x = torch.randn(len(offsets), T, 32)
    cache = net.init_cache(batch_size=len(offsets))
    got = []
    for t in range(T):
        starting = [b for b, o in enumerate(offsets) if o == t and t > 0]
        if starting:
            net.reset_cache(cache, torch.tensor(starting))
        y, cache = net.step(x[:, t], cache)
        got.append(y)
    got = torch.stack(got, dim=1)
    for b, o in enumerate(offsets):
        ref = net(x[b : b + 1, o:])[0]
        assert (got[b, o:] - ref).abs().max().item() <= 1e-4, (kw, offsets, b)


def test_envs_at_different_steps_share_one_batched_cache():
    """Rows reset at different times must behave as if each ran alone."""
    net = _net(mode="memo")
    x = torch.randn(2, 30, 32)
    cache = net.init_cache(batch_size=2)
    outs = {0: [], 1: []}
    for t in range(30):
        if t == 11:  # env 1 starts a new trial at step 11
            net.reset_cache(cache, torch.tensor([1]))
        y, cache = net.step(x[:, t], cache)
        outs[0].append(y[0])
        outs[1].append(y[1])
    ref0 = net(x[:1])[0]
    ref1 = net(x[1:, 11:])[0]
    assert (torch.stack(outs[0]) - ref0).abs().max() <= 1e-4
    assert (torch.stack(outs[1][11:]) - ref1).abs().max() <= 1e-4


def test_rope_scores_depend_on_relative_positions_only():
    """RoPE rotates each pair of a head's dimensions by its position's angle: norms are kept,
    position 0 is the identity, and a query-key score depends only on their distance."""
    from memrl.methods.memo.layers import rotate

    net = _net(mode="memo")
    q, k = torch.randn(2, net.cfg.head_dim)

    def at(x: torch.Tensor, pos: int) -> torch.Tensor:
        return rotate(x, *net._rope(pos, 1, pos + 1)).flatten()

    torch.testing.assert_close(at(q, 0), q)
    torch.testing.assert_close(at(q, 37).norm(), q.norm())
    score = at(q, 3) @ at(k, 1)
    torch.testing.assert_close(at(q, 50) @ at(k, 48), score, atol=1e-5, rtol=1e-5)
    assert (at(q, 5) @ at(k, 1) - score).abs() > 1e-3  # another distance, another score


def test_segment_view_holds_each_rows_current_segment_after_its_summaries():
    """``seg_kv`` of rows holding different numbers of summaries (6, 4 and 2 tokens) and segment
    steps: the first layer's K and V of exactly the steps of each row's current segment, K rotated
    to positions n_sum, n_sum + 1, ... The first layer's K/V depend on a step's token and
    position only, so they are worked out here from the weights, not read from the cache."""
    import torch.nn.functional as F

    from memrl.methods.memo.layers import rotate

    net = _net(mode="memo")
    cfg = net.cfg
    offsets, T = (0, 5, 14), 27
    x = torch.randn(len(offsets), T, 32)
    cache = net.init_cache(batch_size=len(offsets))
    for t in range(T):
        starting = [b for b, o in enumerate(offsets) if o == t and t > 0]
        if starting:
            net.reset_cache(cache, torch.tensor(starting))
        _, cache = net.step(x[:, t], cache)
    assert cache.n_sum.tolist() == [6, 4, 2] and cache.seg_len.tolist() == [3, 6, 5]
    block, (H, hd) = net.blocks[0], (cfg.n_heads, cfg.head_dim)
    view = cache.seg_kv  # (n_layers, 2, B, H, S, hd)
    assert view.shape[4] == 6
    for b in range(len(offsets)):
        n, s = int(cache.n_sum[b]), int(cache.seg_len[b])
        steps = x[b : b + 1, T - s :]  # (1, s, d): the current segment
        a = F.rms_norm(steps, (cfg.d_model,), block.attn_norm.weight, cfg.norm_eps)
        qkv = F.linear(a, block.attn.qkv.weight).view(1, s, 3, H, hd)
        cos, sin = net._rope(n, s, n + s)
        k = rotate(qkv[:, :, 1], cos[:, :, 0], sin[:, :, 0])[0].transpose(0, 1)  # (H, s, hd)
        v = qkv[0, :, 2].transpose(0, 1)
        torch.testing.assert_close(view[0, 0, b, :, :s], k, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(view[0, 1, b, :, :s], v, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["memo", "rmt", "fct", "memo-capped", "fct-window"])
def test_cache_tokens_are_bounded_and_bytes_follow(mode):
    kw = {
        "memo-capped": dict(mode="memo", max_summaries=2),
        "fct-window": dict(mode="fct", fct_window=5),
    }.get(mode, dict(mode=mode))
    net = _net(**kw)
    cache = net.init_cache(batch_size=2)
    x = torch.randn(2, 45, 32)
    for t in range(45):
        _, cache = net.step(x[:, t], cache)
        steps = t + 1
        n_blocks = steps // 8
        expected = {
            "memo": n_blocks * 2 + steps % 8,
            "rmt": min(n_blocks, 1) * 2 + steps % 8,
            "fct": steps,
            "memo-capped": min(n_blocks, 2) * 2 + steps % 8,
            "fct-window": min(steps, 5),
        }[mode]
        assert net.cache_tokens(cache) == expected
        assert net.cache_bytes(cache) == expected * 2 * 2 * 32 * 4
    if mode == "memo":
        assert net.cache_tokens(cache) <= 5 * 2 + 8
    # Capped modes never allocate past their bound (summaries + a segment + summary slots).
    room = {"rmt": 1 * 2 + 8 + 2, "memo-capped": 2 * 2 + 8 + 2, "fct-window": 5}.get(mode)
    if room is not None:
        assert cache.kv.shape[4] <= room


def test_prefill_equals_stepping():
    for kw in CASES:
        net = _net(**kw)
        x = torch.randn(2, 21, 32)
        stepped = net.init_cache(2)
        for t in range(21):
            _, stepped = net.step(x[:, t], stepped)
        filled = net.prefill(x)
        y_next = torch.randn(2, 32)
        a, _ = net.step(y_next, stepped)
        b, _ = net.step(y_next, filled)
        assert (a - b).abs().max() <= 1e-4, kw
        assert net.cache_tokens(stepped) == net.cache_tokens(filled)


def test_training_forward_backprops_through_every_summary():
    net = _net(mode="memo")
    net.train()
    x = torch.randn(1, 40, 32, requires_grad=True)
    y = net(x, seg_len=8)
    y[:, -1].sum().backward()
    # The last step sees step 0 only through four generations of summaries.
    assert x.grad[0, 0].abs().sum() > 0
    x.grad = None
    net_rmt = _net(mode="fct", fct_window=4)
    y = net_rmt(x)
    y[:, -1].sum().backward()
    assert x.grad[0, 0].abs().sum() == 0  # outside the window: no path


def test_seg_len_changes_the_segmentation():
    net = _net(mode="memo")
    x = torch.randn(1, 30, 32)
    a, b = net(x, seg_len=8), net(x, seg_len=10)
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-5)  # same first chunk prefix
    assert (a[:, 20:] - b[:, 20:]).abs().max() > 1e-3


def test_layer_drop_only_in_training():
    net = _net(mode="memo", layer_drop=0.5)
    x = torch.randn(1, 20, 32)
    assert torch.equal(net(x), net(x))
    net.train()
    torch.manual_seed(1)
    outs = {tuple(net(x)[0, -1, :3].tolist()) for _ in range(8)}
    assert len(outs) > 1


def test_bad_config_is_rejected_with_the_value():
    with pytest.raises(ValueError, match="mode"):
        MemoConfig(mode="lstm")
    with pytest.raises(ValueError, match="divisible"):
        MemoConfig(d_model=30, n_heads=4)


def _reencoding_forward(net: MemoTransformer, x: torch.Tensor, seg: int) -> torch.Tensor:
    """The training forward as the paper states it: every chunk runs all kept summaries, its
    steps and the summary slots from position 0."""
    cfg = net.cfg
    B, T, _ = x.shape
    slots = net.slots.weight[None].expand(B, -1, -1)
    mem, outs = x.new_zeros(B, 0, cfg.d_model), []
    for start in range(0, T, seg):
        chunk = x[:, start : start + seg]
        n, L = mem.shape[1], chunk.shape[1]
        emit = L == seg and start + seg < T
        h, _ = net._causal_run(torch.cat([mem, chunk, slots] if emit else [mem, chunk], dim=1))
        outs.append(h[:, n : n + L])
        if emit:
            mem = torch.cat([mem, h[:, n + L :]], dim=1)
            if cfg.summary_cap is not None:
                mem = mem[:, -cfg.summary_cap * cfg.l_sum :]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize(
    "kw", [dict(mode="memo"), dict(mode="memo", max_summaries=2), dict(mode="rmt")]
)
def test_training_forward_reuses_summary_keys_exactly(kw):
    """The forward keeps the summaries' K/V from chunk to chunk instead of running them again:
    outputs and gradients (inputs and every weight) match the re-encoding formulation."""
    net = _net(**kw).eval()
    x = torch.randn(3, 45, SMALL["d_model"], requires_grad=True)  # 5 full chunks + 5 steps
    ours, theirs = net(x, 8, layer_drop=False), _reencoding_forward(net, x, 8)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    weights = [x, *net.parameters()]
    probe = torch.randn_like(ours)  # a loss that every output feature moves
    g_ours = torch.autograd.grad((ours * probe).sum(), weights)
    g_theirs = torch.autograd.grad((theirs * probe).sum(), weights)
    for a, b in zip(g_ours, g_theirs, strict=True):
        # float32 sums in another order: within 1e-4 of each gradient's own scale
        assert (a - b).abs().max() <= 1e-4 * b.abs().max()
