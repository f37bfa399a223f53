"""vLLM generation check: memrl's vLLM backend on a random-weight Qwen2-shaped model (no hub).

Builds a byte-level BPE tokenizer locally (memrl.methods.mem1.tiny) and a Qwen2 model of
Qwen2.5-0.5B's width and depth with that vocabulary, hands both to ``VLLMBackend`` (which writes
them to a folder and starts an in-process engine), and times the generation of random-token
prompts with per-token log-probs. Writes vllm_generation.{md,parquet,png} under --output. Needs
vLLM and CUDA: scripts/gpu_check.py runs it only where vLLM is installed.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="bench_out/vllm")
    parser.add_argument("--device", default="cuda", help="vLLM runs on cuda only")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    if args.device != "cuda":
        print(f"error: vLLM generation needs --device cuda, got {args.device}", file=sys.stderr)
        return 2

    import numpy as np

    from memrl.experiment.tables import Plot, write_report
    from memrl.methods.mem1.generation.base import GenerationSettings
    from memrl.methods.mem1.generation.vllm import VLLMBackend
    from memrl.methods.mem1.tiny import TinyModelSettings, build_tiny_model, build_tokenizer

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(4000)]
    texts = [" ".join(rng.choice(words, 64)) for _ in range(400)]
    tokenizer = build_tokenizer(texts, vocab_size=4096)
    # Qwen2.5-0.5B's body (hidden 896, 24 layers, 14 heads, 2 KV heads) on this vocabulary.
    shape = TinyModelSettings(
        hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864
    )
    lm = build_tiny_model(len(tokenizer), shape)
    backend = VLLMBackend(lm, tokenizer, GenerationSettings(backend="vllm", seed=0))
    vocab = len(tokenizer)
    rows = []
    for batch in args.batch:
        prompts = [rng.integers(0, vocab - 8, args.prompt_tokens).tolist() for _ in range(batch)]
        backend.generate(prompts[:1], [[]], 4)  # warm-up
        start = time.perf_counter()
        out = backend.generate(prompts, [[]] * batch, args.new_tokens)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.ids) for o in out)
        if any(len(o.logps) != len(o.ids) for o in out):
            raise RuntimeError("vLLM returned a log-prob count that differs from the token count")
        rows.append(
            {"batch": batch, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
        )
    write_report(
        "vllm_generation",
        rows,
        args.output,
        title=f"vLLM generation ({sum(p.numel() for p in lm.parameters()) / 1e6:.0f}M params)",
        plots=[Plot(x="batch", y="tokens_per_s")],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
