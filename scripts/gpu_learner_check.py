"""GPU learner check: one Memo PPO training iteration with the learner on the GPU vs on the CPU.

For each model size (the configs/memo_key_door.yaml model, and a paper-width one) and each device,
builds the algorithm from configs/memo_key_door.yaml with ``num_gpus_per_learner`` 1 or 0 (the
learner in the driver, samples from the driver's env runner), runs a warm-up iteration (CUDA init,
cuDNN autotune) and one timed iteration, checks where the learner's weights live, and reports the
learner throughput: env steps of the train batch over RLlib's ``learner_update_timer``.
Writes gpu_learner_check.{md,json} under --output. Needs CUDA; exits 2 without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "memo-small": {},
    "memo-paper-width": {"d_model": 256, "n_layers": 4, "n_heads": 8, "encoder_hiddens": [256]},
}


def one_setting(model: dict, gpus: float, logdir: Path) -> dict:
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import load_config
    from memrl.experiment.train import build_algo, flatten

    # A 2000-step batch (20 trials, 2 minibatches) keeps the four settings well under 10 minutes.
    overrides = [
        f"resources.num_gpus_per_learner={gpus}",
        "resources.num_env_runners=0",
        "algorithm.train_batch_size=2000",
        "algorithm.minibatch_size=1000",
    ]
    overrides += [f"model.{k}={json.dumps(v)}" for k, v in model.items()]
    exp = load_config(REPO / "configs" / "memo_key_door.yaml", overrides)
    algo = build_algo(build_algorithm_config(exp), logdir)
    try:
        algo.train()  # warm-up
        start = time.perf_counter()
        result = flatten(algo.train())
        wall = time.perf_counter() - start
        learner = algo.learner_group._learner  # the driver's local learner (num_learners: 0)
        device = str(next(learner.module["default_policy"].parameters()).device)
        batch = float(result["env_runners/num_env_steps_sampled"])
        return {
            "device": device,
            "iteration_s": wall,
            "learner_update_s": result["timers/learner_update_timer"],
            "learner_steps_per_s": batch / result["timers/learner_update_timer"],
            "total_loss": float(result.get("learners/default_policy/total_loss", float("nan"))),
        }
    finally:
        algo.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="bench_out/gpu_learner_check")
    args = parser.parse_args()
    import tempfile

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU machine (CI never has one)", file=sys.stderr)
        return 2
    from memrl.experiment.ray_session import ray_session
    from memrl.experiment.report import format_table

    rows = []
    with ray_session(None), tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            for gpus in (0.0, 1.0):
                row = {"model": name, "num_gpus_per_learner": gpus}
                row.update(one_setting(model, gpus, Path(tmp)))
                rows.append(row)
                print(row, flush=True)
    for name in MODELS:
        cpu, gpu = (r for r in rows if r["model"] == name)
        gpu["speedup_vs_cpu"] = gpu["learner_steps_per_s"] / cpu["learner_steps_per_s"]
        assert gpu["device"].startswith("cuda"), f"the GPU learner ran on {gpu['device']}"
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    table = format_table(rows)
    title = f"# GPU learner check ({torch.cuda.get_device_name(0)})\n\n"
    (out / "gpu_learner_check.md").write_text(title + table + "\n")
    (out / "gpu_learner_check.json").write_text(json.dumps(rows, indent=1, default=str))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
