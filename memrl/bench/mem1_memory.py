"""Peak memory of one MEM1 learner update on the CPU, default path vs full-vocabulary logits.

One fresh process per setting builds a real ``TokenLearner`` (PPO, value head) on a random model
with Qwen2.5-0.5B's width and vocabulary (hidden 896, 14 heads, 2 KV heads, MLP 4864, 151,936
tokens) but 2 decoder layers, runs one warm-up update (AdamW allocates its state), resets the
process's peak-RSS counter, runs one update on a minibatch of ``--minibatch`` rows of
``--tokens`` tokens each (a quarter of them loss tokens), and reports the peak RSS of that update
above the RSS before it (``peak_bytes``). Paths:

- ``default``: log-probs in chunks at loss tokens only, micro-batches of ``--micro-batch-tokens``;
- ``full_logits``: the LM's own forward (fp32 logits over the vocabulary at every position) on
  the whole minibatch at once, the learner's path before micro-batching and chunked log-probs.

    memrl bench mem1-memory                      # 2k/4k/8k tokens x 1/4/8 rows, both paths
    memrl bench mem1-memory --tokens 8192 --minibatch 1 --json

``full_logits`` settings above ``--full-logits-max-tokens`` tokens per minibatch are skipped (at
8k tokens one row's logits alone are ~5 GB; eight rows would not fit most machines).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "mem1_memory"
PATHS = ("default", "full_logits")
SHAPES = {
    # Qwen2.5-0.5B's width and vocabulary, 2 layers instead of 24.
    "qwen0.5b-2layers": dict(vocab=151936, hidden=896, layers=2, heads=14, kv_heads=2, mlp=4864),
    "tiny": dict(vocab=512, hidden=32, layers=2, heads=4, kv_heads=2, mlp=64),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument(
        "--minibatch", type=int, nargs="+", default=[1, 4, 8], help="rows per minibatch"
    )
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen0.5b-2layers")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument(
        "--logp-chunk-tokens",
        type=int,
        default=None,
        help="positions whose logits are computed together (default: the learner's default)",
    )
    parser.add_argument(
        "--full-logits-max-tokens",
        type=int,
        default=8192,
        help="skip full_logits settings with more tokens per minibatch (default: %(default)s)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads per setting")
    add_output_arguments(parser, NAME)


def write_model(folder: Path, shape: dict[str, int]) -> None:
    """A random model of the shape and a small tokenizer (the ids fed are random anyway)."""
    from memrl.bench.mem1_speed import random_lm
    from memrl.methods.mem1.tiny import build_tokenizer

    random_lm(shape).save_pretrained(folder)
    build_tokenizer(["memory bench text"] * 4, 300).save_pretrained(folder)


def learner_config(
    model_dir: str, path: str, micro_batch_tokens: int, chunk: int, dtype: str = "float32"
) -> Any:
    """The ``Mem1Config`` of a PPO learner on ``model_dir`` taking ``path`` (default or
    full_logits)."""
    from memrl.methods.mem1.algorithm import Mem1Config
    from memrl.methods.mem1.settings import LLMModelSettings, Mem1Settings

    full = path == "full_logits"
    settings = Mem1Settings(
        algorithm="ppo", micro_batch_tokens=10**9 if full else micro_batch_tokens, lr=1e-6
    )
    model = LLMModelSettings(path=model_dir, dtype=dtype, full_logits=full, logp_chunk_tokens=chunk)
    config = Mem1Config().training(mem1=settings)
    config.learners(num_learners=0)
    model.apply(config, None)
    return config


def update_batch(rows: int, tokens: int, vocab: int, seed: int) -> Any:
    """``rows`` rows of ``tokens`` tokens; a quarter are loss tokens (turns' generations)."""
    import numpy as np
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    rng = np.random.default_rng(seed)
    loss = np.zeros((rows, tokens), bool)
    for start in range(tokens // 8, tokens, tokens // 4):  # four generations per row
        loss[:, start : start + tokens // 16] = True
    cols = {
        "input_ids": rng.integers(0, vocab, (rows, tokens)),
        "position_ids": np.tile(np.arange(tokens), (rows, 1)),
        "seg": np.zeros((rows, tokens), np.int64),
        "vis": np.ones((rows, 2, 2), bool),
        "loss_mask": loss,
    }
    for key in ("old_logp", "ref_logp"):
        cols[key] = np.where(loss, -rng.random((rows, tokens)) * 5, 0).astype(np.float32)
    for key in ("advantages", "old_values", "returns"):
        cols[key] = (rng.standard_normal((rows, tokens)) * loss).astype(np.float32)
    return MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(cols)}, env_steps=rows)


def _rss(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (peak) of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(setting: dict[str, Any]) -> dict[str, Any]:
    """One setting, in this process (run by ``run`` in a fresh one each)."""
    import time

    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from memrl.envs.text import text_space

    torch.set_num_threads(setting["threads"])
    config = learner_config(
        setting["model_dir"], setting["path"], setting["micro_batch_tokens"], setting["chunk"]
    )
    space = text_space()
    learner = config.build_learner(spaces={DEFAULT_MODULE_ID: (space, space)})
    # AdamW allocates its state in the first update: measure the second.
    learner.update(batch=update_batch(1, 64, setting["vocab"], seed=1))
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    # The baseline is the reset peak itself: an RSS read before the reset can exceed it when
    # another thread returns pages in between, and the difference would come out negative.
    before = _rss("VmHWM")
    batch = update_batch(setting["minibatch"], setting["tokens"], setting["vocab"], seed=2)
    start = time.perf_counter()
    results = learner.update(batch=batch)
    seconds = time.perf_counter() - start
    peak = _rss("VmHWM")
    stats = results[DEFAULT_MODULE_ID]
    return {
        "path": setting["path"],
        "tokens": setting["tokens"],
        "minibatch": setting["minibatch"],
        "peak_bytes": peak - before,
        "peak_gib": (peak - before) / 2**30,
        "rss_before_gib": before / 2**30,
        "micro_batches": int(stats["micro_batches"].peek()),
        "seconds": seconds,
    }


def run(args: argparse.Namespace) -> int:
    from memrl.methods.mem1.network import DEFAULT_LOGP_CHUNK_TOKENS

    shape = SHAPES[args.shape]
    rows: list[dict[str, Any]] = []
    todo = [
        (path, tokens, minibatch)
        for path in args.paths
        for tokens in args.tokens
        for minibatch in args.minibatch
        if not (path == "full_logits" and tokens * minibatch > args.full_logits_max_tokens)
    ]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="memrl_mem1_memory_") as tmp:
        write_model(Path(tmp), shape)
        for path, tokens, minibatch in todo:
            setting = {
                "model_dir": tmp,
                "vocab": shape["vocab"],
                "path": path,
                "tokens": tokens,
                "minibatch": minibatch,
                "micro_batch_tokens": args.micro_batch_tokens,
                "chunk": args.logp_chunk_tokens or DEFAULT_LOGP_CHUNK_TOKENS,
                "threads": args.threads,
            }
            try:
                row = _in_fresh_process(setting)
                done = f"peak {row['peak_bytes'] / 2**30:.2f} GiB above the start"
            except RuntimeError as err:  # e.g. killed for memory: kept as a row, the rest run
                row = {k: setting[k] for k in ("path", "tokens", "minibatch")}
                row.update(peak_bytes=float("nan"), peak_gib=float("nan"), error=str(err)[:300])
                done = f"FAILED ({str(err).splitlines()[0][:200]})"
            rows.append(row)
            print(
                f"[{len(rows)}/{len(todo)}] {path}, {minibatch} x {tokens} tokens: {done} "
                f"({time.time() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=f"Peak memory of one learner update ({args.shape}, CPU, fp32)",
        plots=[Plot(x="tokens", y="peak_gib", group="path", facet="minibatch")],
    )
    return 0


def _in_fresh_process(setting: dict[str, Any]) -> dict[str, Any]:
    code = (
        "import json, sys; from memrl.bench.mem1_memory import measure; "
        "print('MEM1_MEMORY ' + json.dumps(measure(json.loads(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(setting)], capture_output=True, text=True
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("MEM1_MEMORY ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(
            f"the {setting['path']} setting at {setting['minibatch']} x {setting['tokens']} "
            f"tokens failed (exit {out.returncode}"
            + (": killed, most likely out of memory" if out.returncode == -9 else "")
            + f"): {out.stderr[-2000:]}"
        )
    return json.loads(lines[-1].split(" ", 1)[1])
