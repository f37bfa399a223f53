"""MEM1 checks that need a GPU, in a few minutes (scripts/gpu_check.py runs the learner part).

1. The vllm generation backend (vLLM 0.33; skipped with a message when vLLM is not installed):
   generation on a small random Qwen2-shaped model; its behaviour log-probs against the hf
   backend's definition (log-probs of the sampled distribution after temperature and top-p,
   recomputed by the HF model on the same tokens); a full weight sync through vLLM's IPC weight
   transfer (greedy continuations then match the HF model's); a LoRA sync as a LoRARequest.
2. One learner update in bf16 on the GPU, default path vs full-vocabulary logits, at 8k-token
   rows (Qwen2.5-0.5B's width and vocabulary, 2 layers): peak CUDA memory of the update.

Writes gpu_mem1_check.{md,json} under --output; exits 1 when a check fails, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path


def _tiny_model(folder: Path):
    import torch

    from memrl.methods.mem1.tiny import TinyModelSettings, build_tiny_model, build_tokenizer

    texts = ["Answer the questions. <think> state </think> <search> query </search>"] * 50
    tok = build_tokenizer(texts, 1000, ["<think>", "</think>", "<search>", "</search>"])
    shape = TinyModelSettings(hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                              intermediate_size=512)  # fmt: skip
    lm = build_tiny_model(len(tok), shape)
    with torch.no_grad():  # sharper distributions than the random init's
        for name, p in lm.named_parameters():
            if p.ndim == 2 and "embed" not in name:
                p.mul_(4.0)
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok, lm.to("cuda", torch.bfloat16)


def _processed_logps(lm, prompt, gen_ids, temperature, top_p):
    """Log-probs of ``gen_ids`` under the sampling distribution (temperature, then top-p), as the
    hf backend defines the behaviour log-prob."""
    import torch

    ids = torch.tensor([list(prompt) + list(gen_ids)], device="cuda")
    with torch.no_grad():
        logits = lm(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    order = logits.sort(-1, descending=True)
    probs = order.values.softmax(-1)
    drop = probs.cumsum(-1) - probs > top_p
    kept = order.values.masked_fill(drop, float("-inf"))
    logits = torch.full_like(logits, float("-inf")).scatter(-1, order.indices, kept)
    logp = logits.log_softmax(-1)
    return logp.gather(-1, torch.tensor(gen_ids, device="cuda")[:, None])[:, 0].tolist()


def vllm_checks(tmp: Path) -> list[dict]:
    import numpy as np
    import torch

    from memrl.methods.mem1.generation import GenerationSettings, make_backend
    from memrl.methods.mem1.network import LoRASettings, load_lm

    rows = []
    tok, lm = _tiny_model(tmp / "model")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(10, len(tok), 48).tolist() for _ in range(16)]
    temperature, top_p = 1.0, 0.9
    settings = GenerationSettings(
        backend="vllm", temperature=temperature, top_p=top_p, gpu_memory_utilization=0.25
    )
    started = time.perf_counter()
    engine = make_backend(settings, lm, tok, str(tmp / "model"))
    rows.append({"check": "vllm_start", "ok": True, "seconds": time.perf_counter() - started})

    gens = engine.generate(prompts, [[]] * len(prompts), 32)
    gaps = []
    for prompt, g in zip(prompts, gens, strict=True):
        want = _processed_logps(lm, prompt, g.ids, temperature, top_p)
        gaps += [abs(a - b) for a, b in zip(g.logps, want, strict=True)]
    mean_gap = float(np.mean(gaps))
    rows.append({"check": "behaviour_logps_vs_hf", "ok": mean_gap < 0.05,
                 "mean_abs_gap": mean_gap, "max_abs_gap": float(np.max(gaps))})  # fmt: skip

    hf = make_backend(GenerationSettings(), lm, tok)
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    started = time.perf_counter()
    engine.update_weights(lm)
    sync_s = time.perf_counter() - started
    ours = [g.ids[:8] for g in hf.generate(prompts, [[]] * len(prompts), 8, greedy=True)]
    theirs = [g.ids[:8] for g in engine.generate(prompts, [[]] * len(prompts), 8, greedy=True)]
    same = float(np.mean([a == b for a, b in zip(ours, theirs, strict=True)]))
    rows.append({"check": "full_weight_sync_ipc", "ok": same >= 0.9,
                 "greedy_prompts_equal": same, "seconds": sync_s})  # fmt: skip
    del engine
    gc.collect()
    torch.cuda.empty_cache()

    peft_lm = load_lm(str(tmp / "model"), torch.bfloat16, LoRASettings(enabled=True, r=8)).cuda()
    with torch.no_grad():
        for name, p in peft_lm.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    started = time.perf_counter()
    lora_engine = make_backend(settings, peft_lm, tok, str(tmp / "model"))
    lora_engine.update_weights(peft_lm)
    sync_s = time.perf_counter() - started
    hf = make_backend(GenerationSettings(), peft_lm, tok)
    ours = [g.ids[:8] for g in hf.generate(prompts, [[]] * len(prompts), 8, greedy=True)]
    theirs = [g.ids[:8] for g in lora_engine.generate(prompts, [[]] * len(prompts), 8, greedy=True)]
    same = float(np.mean([a == b for a, b in zip(ours, theirs, strict=True)]))
    rows.append({"check": "lora_sync_loraRequest", "ok": same >= 0.9,
                 "greedy_prompts_equal": same, "seconds": sync_s})  # fmt: skip
    del lora_engine
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def learner_memory(tmp: Path) -> list[dict]:
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from memrl.bench.mem1_memory import SHAPES, learner_config, update_batch, write_model
    from memrl.envs.text import text_space

    shape = SHAPES["qwen0.5b-2layers"]
    write_model(tmp / "learner_model", shape)
    rows = []
    for path in ("default", "full_logits"):
        for minibatch in (1, 4):
            config = learner_config(str(tmp / "learner_model"), path, 8192, 1024, "bfloat16")
            config.learners(num_learners=0, num_gpus_per_learner=1)
            space = text_space()
            learner = config.build_learner(spaces={DEFAULT_MODULE_ID: (space, space)})
            learner.update(batch=update_batch(1, 64, shape["vocab"], seed=1))
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
            learner.update(batch=update_batch(minibatch, 8192, shape["vocab"], seed=2))
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
            rows.append({"check": f"learner_{path}", "ok": True, "tokens": 8192,
                         "minibatch": minibatch, "peak_gib": peak / 2**30,
                         "seconds": time.perf_counter() - started})  # fmt: skip
            del learner
            gc.collect()
            torch.cuda.empty_cache()
    default = [r["peak_gib"] for r in rows if r["check"] == "learner_default"]
    full = [r["peak_gib"] for r in rows if r["check"] == "learner_full_logits"]
    rows.append({"check": "learner_default_vs_full_at_8k", "ok": default[0] <= full[0] / 4,
                 "ratio": default[0] / full[0],
                 "default_flat": max(default) <= 1.2 * min(default)})  # fmt: skip
    return rows


def _vllm_rows(tmp: Path) -> list[dict]:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return [{"check": "vllm", "ok": False, "note": "not installed: pip install -e .[vllm]"}]
    try:
        return vllm_checks(tmp)
    except Exception as err:  # reported as a failed check; the learner check still runs
        return [{"check": "vllm", "ok": False, "note": repr(err)[:300]}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="bench_out/gpu_learner_check")
    parser.add_argument("--skip-vllm", action="store_true", help="only the learner check")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU machine", file=sys.stderr)
        return 2
    from memrl.experiment.tables import format_table

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_vllm:
            rows += _vllm_rows(Path(tmp))
        rows += learner_memory(Path(tmp))
    for row in rows:
        print(row, flush=True)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    table = format_table(rows)
    title = f"# MEM1 GPU checks ({torch.cuda.get_device_name(0)})\n\n"
    (out / "gpu_mem1_check.md").write_text(title + table + "\n")
    (out / "gpu_mem1_check.json").write_text(json.dumps(rows, indent=1, default=str))
    print(table)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
