"""Learner and generation throughput of the LLM policy on one GPU (bf16, hf backend).

A randomly initialised Qwen2-shaped model (default: Qwen2.5-0.5B's shape, ~0.5B parameters; no
download) and random token prompts. Measures:

- generation tokens/s of the ``hf`` backend (batched, KV cache, sampling, per-token log-probs);
- learner tokens/s: forward + backward + AdamW step of ``TokenPolicy.score`` on packed rows in the
  ``per_turn`` layout (block-diagonal masks) and in the ``packed`` layout, at a given row length.

    memrl bench mem1-gpu                 # on a CUDA machine (the lead runs it)
    memrl bench mem1-gpu --preset tiny   # a CPU smoke run of the same code (--device cpu)
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from memrl.experiment.report import Plot, add_output_arguments, write_report

logger = logging.getLogger(__name__)

NAME = "mem1_gpu"

PRESETS = {
    # Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocab 151936).
    "qwen0.5b": dict(vocab=151936, hidden=896, layers=24, heads=14, kv_heads=2, mlp=4864),
    "tiny": dict(vocab=2048, hidden=64, layers=2, heads=4, kv_heads=2, mlp=128),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen0.5b")
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="auto: cuda when torch sees one, else cpu (default: %(default)s)",
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", "bfloat16", "float32"],
        default="auto",
        help="auto: bfloat16 on cuda, float32 on cpu (bfloat16 on cpu tries the GPU's path)",
    )
    parser.add_argument(
        "--gen-batch", type=int, nargs="+", default=[8, 32, 64], help="prompts generated together"
    )
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--row-tokens", type=int, default=4096, help="tokens per training row")
    parser.add_argument("--rows", type=int, default=4, help="rows per optimizer step")
    parser.add_argument("--steps", type=int, default=3, help="timed learner steps (after 1 warmup)")
    parser.add_argument("--seed", type=int, default=0)
    add_output_arguments(parser, NAME)


def random_qwen2(shape: dict) -> Any:
    """A Qwen2 causal LM of ``shape`` (vocab, hidden, layers, heads, kv_heads, mlp) with random
    weights (seed 0), float32 on the CPU: no hub download."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        intermediate_size=shape["mlp"],
        max_position_embeddings=32768,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def _model(preset: dict, device: str, dtype):
    return random_qwen2(preset).to(device=device, dtype=dtype)


class _IdTokenizer:
    """Just enough tokenizer for the hf backend on random ids (no stop strings are used)."""

    def __init__(self, vocab: int) -> None:
        self.eos_token_id = vocab - 1
        self.pad_token_id = vocab - 2

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from memrl.methods.mem1.batch import collate, pack_rows
    from memrl.methods.mem1.context import ContextPolicy, Turn, packed_unit, per_turn_units
    from memrl.methods.mem1.generation.base import GenerationSettings
    from memrl.methods.mem1.generation.hf import HFBackend
    from memrl.methods.mem1.network import TokenPolicy

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device; use --device cpu or auto")
    if args.dtype == "auto":
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
    else:
        dtype = getattr(torch, args.dtype)
    preset = PRESETS[args.preset]
    lm = _model(preset, device, dtype)
    params = sum(p.numel() for p in lm.parameters())
    rng = np.random.default_rng(args.seed)
    vocab = preset["vocab"]
    rows: list[dict] = []
    base = {"preset": args.preset, "params_m": params / 1e6, "device": device, "dtype": str(dtype)}

    backend = HFBackend(lm, _IdTokenizer(vocab), GenerationSettings(batch_size=max(args.gen_batch)))
    backend.eos_ids = set()  # random weights: generate the full budget every time
    for batch in args.gen_batch:
        prompts = [rng.integers(0, vocab - 2, args.prompt_tokens).tolist() for _ in range(batch)]
        backend.generate(prompts[:1], [[]], 4)  # warmup
        _sync(device)
        t0 = time.perf_counter()
        out = backend.generate(prompts, [[]] * batch, args.new_tokens)
        _sync(device)
        dt = time.perf_counter() - t0
        tokens = sum(len(o.ids) for o in out)
        rows.append(
            {
                **base,
                "kind": "generation",
                "batch": batch,
                "tokens": tokens,
                "seconds": dt,
                "tokens_per_s": tokens / dt,
            }
        )
        logger.info("generation batch %d: %.0f tokens/s", batch, tokens / dt)

    policy = TokenPolicy(lm, value_head=True).to(device)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6)
    # Episodes shaped like MEM1 QA: 512-token prompt, 6 turns of 128 generated + 256 observed.
    turns = [
        Turn(
            gen_ids=rng.integers(0, vocab - 2, 128).tolist(),
            obs_ids=rng.integers(0, vocab - 2, 256).tolist() if t < 5 else [],
        )
        for t in range(6)
    ]
    prompt = rng.integers(0, vocab - 2, args.prompt_tokens).tolist()
    mem1 = ContextPolicy("mem1")
    for mode in ("per_turn", "packed"):
        units = (
            per_turn_units(mem1, prompt, turns)
            if mode == "per_turn"
            else [packed_unit(mem1, prompt, turns)]
        )
        units = [(0, u) for u in units] * 64
        bins = pack_rows(units, args.row_tokens)[: args.rows]
        cols = collate(units, bins, pad_id=vocab - 2)
        x = {
            k: torch.as_tensor(cols[k], device=device)
            for k in ("input_ids", "position_ids", "seg", "vis", "loss_mask")
        }
        times = []
        for step in range(args.steps + 1):
            _sync(device)
            t0 = time.perf_counter()
            out = policy.score(
                x["input_ids"],
                x["position_ids"],
                x["seg"],
                x["vis"],
                with_values=True,
                logp_mask=x["loss_mask"],
            )
            mask = x["loss_mask"].float()
            loss = -(out["logp"] * mask).sum() / mask.sum() + (out["values"] ** 2 * mask).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            _sync(device)
            if step:
                times.append(time.perf_counter() - t0)
        real = int((cols["seg"] != cols["vis"].shape[1] - 1).sum())
        dt = float(np.mean(times))
        rows.append(
            {
                **base,
                "kind": f"learner_{mode}",
                "batch": len(bins),
                "tokens": real,
                "seconds": dt,
                "tokens_per_s": real / dt,
            }
        )
        logger.info("learner %s: %.0f tokens/s", mode, real / dt)
    if device == "cuda":
        base["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        for r in rows:
            r["peak_gib"] = base["peak_gib"]
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=f"LLM throughput ({args.preset}, {params / 1e6:.0f}M params, {device})",
        plots=[Plot(x="kind", y="tokens_per_s", kind="bar")],
    )
    return 0
