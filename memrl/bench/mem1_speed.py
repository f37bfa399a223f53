"""Generation and learner tokens/s of an LLM policy, per training mode, to size a MEM1 run.

For each model (a prepared model folder with ``--model``, or a known shape with random weights
with ``--preset``: no download, the figures depend on the shape only):

- ``generation``: tokens/s of the ``hf`` backend (batched, KV cache, sampling at temperature 1,
  per-token log-probs) at each ``--gen-batch``, from ``--prompt-tokens`` random prompts, every row
  generating ``--new-tokens`` (no end token);
- ``learner``: tokens/s of one optimizer step (forward, backward, AdamW) of ``TokenPolicy`` on
  ``--rows`` training rows of ``--row-tokens`` tokens, laid out as MEM1 episodes (``per_turn``
  and/or ``packed``), split into micro-batches of ``--micro-rows`` rows with gradients
  accumulated, for each ``--train`` mode:
  ``full`` (every weight), ``lora`` (adapters r=16 on every projection), ``frozen`` (the lowest
  ``--freeze-layers`` layers and the embeddings frozen, the rest fully trained) and
  ``lora-frozen`` (adapters on the layers above those). Peak GPU memory per setting on CUDA.

    memrl bench mem1-speed --model data/models/smollm2-135m-instruct   # sizes a CPU run
    memrl bench mem1-speed --device cuda --preset qwen0.5b smollm2-135m # the GPU check

Weights are float32 (as trained weights are kept) unless ``--dtype``; forward passes compute in
``--compute-dtype`` (autocast; several are measured side by side). Other defaults follow the
device: on CUDA bfloat16 compute, rows of 4096 tokens, generation at batch 8/32/64; on a CPU
float32, rows of 512 tokens and smaller batches (a CPU step of a 135M model takes seconds).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

logger = logging.getLogger(__name__)

NAME = "mem1_speed"
PRESETS = {
    # Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocab 151936).
    "qwen0.5b": dict(
        arch="qwen2", vocab=151936, hidden=896, layers=24, heads=14, kv_heads=2, mlp=4864
    ),
    # SmolLM2-135M-Instruct's shape (memrl data model smollm2-135m-instruct has its weights).
    "smollm2-135m": dict(
        arch="llama", vocab=49152, hidden=576, layers=30, heads=9, kv_heads=3, mlp=1536
    ),
    "tiny": dict(arch="qwen2", vocab=2048, hidden=64, layers=2, heads=4, kv_heads=2, mlp=128),
}
MODES = ("full", "lora", "frozen", "lora-frozen")
LAYOUTS = ("per_turn", "packed")
DEVICE_DEFAULTS = {
    # option: (cuda, cpu)
    "gen_batch": ([8, 32, 64], [4, 16]),
    "prompt_tokens": (512, 256),
    "new_tokens": (128, 32),
    "row_tokens": (4096, 512),
    "rows": (4, 2),
    "micro_rows": ([1, 4], [1, 2]),
    "steps": (3, 1),
}


COLUMNS = (
    "model",
    "params_m",
    "device",
    "dtype",
    "compute",
    "kind",
    "mode",
    "layout",
    "batch",
    "micro_rows",
    "trainable_m",
    "tokens",
    "seconds",
    "tokens_per_s",
    "peak_gib",
    "setting",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", nargs="+", help="prepared model folder(s) (real weights)")
    which.add_argument(
        "--preset",
        nargs="+",
        choices=sorted(PRESETS),
        help="known shape(s) with random weights (default: smollm2-135m)",
    )
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument(
        "--dtype",
        choices=["auto", "bfloat16", "float32"],
        default="auto",
        help="the weights' dtype (auto: float32, as trained weights are kept)",
    )
    parser.add_argument(
        "--compute-dtype",
        nargs="+",
        choices=["auto", "bfloat16", "float32"],
        default=["auto"],
        help="dtype(s) the forward passes compute in, each measured in turn (autocast; auto: "
        "bfloat16 on cuda, float32 on cpu)",
    )
    parser.add_argument("--train", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--freeze-layers",
        type=int,
        default=None,
        help="layers frozen in the frozen modes (default: 4/5 of the model's layers)",
    )
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=["per_turn"])
    parser.add_argument("--gen-batch", type=int, nargs="+", help="prompts generated together")
    parser.add_argument("--prompt-tokens", type=int)
    parser.add_argument("--new-tokens", type=int)
    parser.add_argument("--row-tokens", type=int, help="tokens per training row")
    parser.add_argument("--rows", type=int, help="rows per optimizer step")
    parser.add_argument("--micro-rows", type=int, nargs="+", help="rows per forward/backward")
    parser.add_argument("--steps", type=int, help="timed learner steps (after one warm-up)")
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--skip-learner", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    add_output_arguments(parser, NAME)


def random_lm(shape: dict) -> Any:
    """A causal LM of ``shape`` (arch, vocab, hidden, layers, heads, kv_heads, mlp) with random
    weights (seed 0), float32 on the CPU: no hub download."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_class, model_class = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[shape.get("arch", "qwen2")]
    config = config_class(
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
    return model_class(config)


class _IdTokenizer:
    """Just enough tokenizer for the hf backend on random ids (no stop strings are used)."""

    def __init__(self, vocab: int) -> None:
        self.eos_token_id = vocab - 1
        self.pad_token_id = vocab - 2

    def decode(self, ids: list[int]) -> str:
        return " ".join(str(i) for i in ids)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _settings(args: argparse.Namespace, device: str) -> dict[str, Any]:
    column = 0 if device == "cuda" else 1
    return {
        key: getattr(args, key) if getattr(args, key) is not None else pair[column]
        for key, pair in DEVICE_DEFAULTS.items()
    }


def _load(source: str, is_preset: bool, mode: str, freeze: int, dtype: Any, device: str) -> Any:
    """The LM for one training mode (fresh weights each time: modes must not share state)."""
    from memrl.methods.mem1.network import LoRASettings, adapt_lm, load_lm

    lora = LoRASettings(enabled=mode.startswith("lora"))
    layers = freeze if mode.endswith("frozen") else 0
    if not is_preset:
        return load_lm(source, dtype, lora, freeze_layers=layers).to(device)
    lm = random_lm(PRESETS[source]).to(device=device, dtype=dtype)
    return adapt_lm(lm, lora, freeze_layers=layers)


def _generation_rows(
    lm: Any, vocab: int, sizes: dict, rng: Any, device: str, compute: Any
) -> list[dict]:
    from memrl.methods.mem1.generation.base import GenerationSettings
    from memrl.methods.mem1.generation.hf import HFBackend

    settings = GenerationSettings(batch_size=max(sizes["gen_batch"]))
    backend = HFBackend(lm, _IdTokenizer(vocab), settings, compute_dtype=compute)
    backend.eos_ids = set()  # random ids: every row generates the full budget
    rows = []
    for batch in sizes["gen_batch"]:
        prompts = [
            rng.integers(0, vocab - 2, sizes["prompt_tokens"]).tolist() for _ in range(batch)
        ]
        backend.generate(prompts[:1], [[]], 4)  # warm-up
        _sync(device)
        t0 = time.perf_counter()
        out = backend.generate(prompts, [[]] * batch, sizes["new_tokens"])
        _sync(device)
        dt = time.perf_counter() - t0
        tokens = sum(len(o.ids) for o in out)
        rows.append(
            {
                "kind": "generation",
                "mode": "-",
                "layout": "-",
                "batch": batch,
                "tokens": tokens,
                "seconds": dt,
                "tokens_per_s": tokens / dt,
            }
        )
        logger.info("generation %s batch %d: %.0f tokens/s", compute, batch, tokens / dt)
    return rows


def _training_rows(vocab: int, sizes: dict, layout: str, rng: Any) -> dict[str, Any]:
    """Rows shaped like MEM1 QA episodes (prompt, 6 turns of generated + observed tokens)."""
    from memrl.methods.mem1.batch import collate, pack_rows
    from memrl.methods.mem1.context import ContextPolicy, Turn, packed_unit, per_turn_units

    scale = sizes["row_tokens"] / 4096
    gen, obs = max(8, int(128 * scale)), max(8, int(256 * scale))
    turns = [
        Turn(
            gen_ids=rng.integers(0, vocab - 2, gen).tolist(),
            obs_ids=rng.integers(0, vocab - 2, obs).tolist() if t < 5 else [],
        )
        for t in range(6)
    ]
    prompt = rng.integers(0, vocab - 2, max(16, int(512 * scale))).tolist()
    mem1 = ContextPolicy("mem1")
    units = (
        per_turn_units(mem1, prompt, turns)
        if layout == "per_turn"
        else [packed_unit(mem1, prompt, turns)]
    )
    units = [(0, u) for u in units] * 64
    bins = pack_rows(units, sizes["row_tokens"])[: sizes["rows"]]
    return collate(units, bins, pad_id=vocab - 2)


def _learner_rows(
    lm: Any, cols: dict, sizes: dict, device: str, base: dict[str, Any], compute: Any
) -> list[dict]:
    import numpy as np
    import torch

    from memrl.methods.mem1.losses import nll_loss
    from memrl.methods.mem1.network import TokenPolicy

    policy = TokenPolicy(lm, value_head=False, compute_dtype=compute).to(device)
    params = [p for p in policy.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-6)
    x = {
        k: torch.as_tensor(cols[k], device=device)
        for k in ("input_ids", "position_ids", "seg", "vis", "loss_mask")
    }
    real = int((cols["seg"] != cols["vis"].shape[1] - 1).sum())
    out = []
    for micro in sizes["micro_rows"]:
        n = x["input_ids"].shape[0]
        chunks = [list(range(i, min(n, i + micro))) for i in range(0, n, micro)]
        times = []
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for step in range(sizes["steps"] + 1):
            _sync(device)
            t0 = time.perf_counter()
            opt.zero_grad()
            for rows in chunks:
                sub = {k: v[rows] for k, v in x.items()}
                scored = policy.score(
                    sub["input_ids"],
                    sub["position_ids"],
                    sub["seg"],
                    sub["vis"],
                    logp_mask=sub["loss_mask"],
                )
                (nll_loss(scored["logp"], sub["loss_mask"]) * len(rows) / n).backward()
            opt.step()
            _sync(device)
            if step:
                times.append(time.perf_counter() - t0)
        dt = float(np.mean(times))
        row = {
            **base,
            "kind": "learner",
            "batch": n,
            "micro_rows": micro,
            "trainable_m": trainable / 1e6,
            "tokens": real,
            "seconds": dt,
            "tokens_per_s": real / dt,
        }
        if device == "cuda":
            row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out.append(row)
        logger.info(
            "learner %s %s micro %d: %.0f tokens/s",
            base["mode"],
            base["layout"],
            micro,
            real / dt,
        )
    return out


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device; use --device cpu or auto")
    dtype = torch.float32 if args.dtype == "auto" else getattr(torch, args.dtype)
    computes = [
        (torch.bfloat16 if device == "cuda" else dtype) if c == "auto" else getattr(torch, c)
        for c in args.compute_dtype
    ]
    sizes = _settings(args, device)
    sources = [(m, False) for m in args.model or []] or [
        (p, True) for p in args.preset or ["smollm2-135m"]
    ]
    rows: list[dict] = []
    for source, is_preset in sources:
        lm = _load(source, is_preset, "full", 0, dtype, device)
        vocab = lm.config.vocab_size
        n_layers = lm.config.num_hidden_layers
        freeze = args.freeze_layers if args.freeze_layers is not None else n_layers * 4 // 5
        label = source if is_preset else source.rstrip("/").split("/")[-1]
        base = {
            "model": label,
            "params_m": sum(p.numel() for p in lm.parameters()) / 1e6,
            "device": device,
            "dtype": str(dtype).removeprefix("torch."),
        }
        if not args.skip_generation:
            for compute in computes:
                rng = np.random.default_rng(args.seed)
                labels = {**base, "compute": str(compute).removeprefix("torch.")}
                for row in _generation_rows(lm, vocab, sizes, rng, device, compute):
                    rows.append({**labels, **row})
        del lm
        if args.skip_learner:
            continue
        for layout in args.layouts:
            cols = _training_rows(vocab, sizes, layout, np.random.default_rng(args.seed))
            for mode in args.train:
                for compute in computes:
                    lm = _load(source, is_preset, mode, freeze, dtype, device)
                    name = f"{mode}{freeze}" if mode.endswith("frozen") else mode
                    labels = {
                        **base,
                        "compute": str(compute).removeprefix("torch."),
                        "mode": name,
                        "layout": layout,
                    }
                    rows += _learner_rows(lm, cols, sizes, device, labels, compute)
                    del lm
                    if device == "cuda":
                        torch.cuda.empty_cache()
    for row in rows:
        row["setting"] = (
            f"{row['model']} {row['compute']} gen b{row['batch']}"
            if row["kind"] == "generation"
            else f"{row['model']} {row['compute']} {row['mode']} {row['layout']} "
            f"m{row['micro_rows']}"
        )
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=f"MEM1 LLM tokens/s ({device}, {str(dtype).removeprefix('torch.')} weights)",
        columns=[c for c in COLUMNS if any(c in row for row in rows)],
        plots=[Plot(x="setting", y="tokens_per_s", kind="bar", facet="kind")],
    )
    return 0
