"""GPU learner check: one Memo PPO training iteration with the learner on the GPU vs on the CPU.

For each model size (the configs/memo_key_door.yaml model, and a paper-width one), each device and
each learner precision (``model.learner_precision``: float32, and bfloat16 autocast), builds the
algorithm from configs/memo_key_door.yaml with ``num_gpus_per_learner`` 1 (cuda) or 0 (cpu), the
learner in the driver and samples from the driver's env runner, runs a warm-up iteration (CUDA
init, cuDNN autotune) and one timed iteration, checks where the learner's weights live, and
reports the learner throughput: env steps of the train batch over the time of the timed
iteration's learner update (a clock around ``learner_group.update``), and its speed-up over the
same model's float32 learner on the CPU. Writes memo_ppo_learner.{md,parquet,png} under --output.

    python scripts/gpu_learner_check.py                        # GPU machine: cpu and cuda
    python scripts/gpu_learner_check.py --devices cpu --models memo-small --train-batch 400
    python scripts/gpu_learner_check.py --precisions float32   # no bfloat16 rows
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "memo_ppo_learner"
MODELS = {
    "memo-small": {},
    "memo-paper-width": {"d_model": 256, "n_layers": 4, "n_heads": 8, "encoder_hiddens": [256]},
}
GPUS = {"cuda": 1.0, "cpu": 0.0}
PRECISIONS = ("float32", "bfloat16")


def one_setting(
    model: dict, device: str, precision: str, args: argparse.Namespace, logdir: Path
) -> dict:
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.checkpoints import build_algo
    from memrl.experiment.config import load_config
    from memrl.experiment.progress import flatten

    overrides = [
        f"resources.num_gpus_per_learner={GPUS[device]}",
        "resources.num_env_runners=0",
        f"resources.num_envs_per_env_runner={args.envs}",
        f"algorithm.train_batch_size={args.train_batch}",
        f"algorithm.minibatch_size={args.minibatch}",
        f"model.learner_precision={precision}",
    ]
    overrides += [f"model.{k}={json.dumps(v)}" for k, v in model.items()]
    exp = load_config(REPO / "configs" / "memo_key_door.yaml", overrides)
    algo = build_algo(build_algorithm_config(exp), logdir)
    try:
        updates = _timed_updates(algo, device)
        algo.train()  # warm-up (CUDA init, cuDNN autotune)
        updates.clear()
        start, cpu = time.perf_counter(), time.process_time()
        result = flatten(algo.train())
        wall = time.perf_counter() - start
        # CPU time of this process (all its threads): on a shared machine, the work without the
        # waiting.
        cpu = time.process_time() - cpu
        learner = algo.learner_group._learner  # the driver's local learner (num_learners: 0)
        weights = str(next(learner.module["default_policy"].parameters()).device)
        if not weights.startswith(device):
            raise RuntimeError(f"asked for the learner on {device}, its weights are on {weights}")
        batch = float(result["env_runners/num_env_steps_sampled"])
        update_s = sum(updates)
        return {
            "weights_on": weights,
            "iteration_s": wall,
            "iteration_cpu_s": cpu,
            "learner_update_s": update_s,
            "sampling_and_rest_s": wall - update_s,
            "learner_steps_per_s": batch / update_s,
            "total_loss": float(result.get("learners/default_policy/total_loss", float("nan"))),
        }
    finally:
        algo.stop()


def _timed_updates(algo, device: str) -> list[float]:
    """Times each ``learner_group.update`` of ``algo`` into the returned list.

    RLlib's own ``learner_update_timer`` is a moving average with a 0.01 weight per new value: two
    iterations in, it still holds mostly the warm-up's time (CUDA init included).
    """
    import torch

    group = algo.learner_group
    update = group.update
    times: list[float] = []

    def timed(*args, **kwargs):
        start = time.perf_counter()
        out = update(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        return out

    group.update = timed
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="bench_out/gpu_learner_check")
    parser.add_argument(
        "--devices", default="cuda,cpu", help="comma-separated, run in this order: cuda, cpu"
    )
    parser.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated, of {list(MODELS)}"
    )
    parser.add_argument(
        "--train-batch", type=int, default=2000, help="env steps per iteration (20 trials)"
    )
    parser.add_argument("--minibatch", type=int, default=1000, help="env steps per minibatch")
    parser.add_argument(
        "--precisions",
        default=",".join(PRECISIONS),
        help=f"comma-separated learner precisions, of {list(PRECISIONS)} (the speed-up is over "
        "float32 on the CPU, which runs whenever cpu is in --devices)",
    )
    parser.add_argument(
        "--envs",
        type=int,
        default=20,
        help="envs stepped together (20: one 100-step trial each per 2000-step batch; sampling "
        "runs on the CPU in every setting, so fewer, larger inference batches shorten the check)",
    )
    args = parser.parse_args(argv)
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    bad = (
        sorted(set(devices) - set(GPUS))
        + sorted(set(models) - set(MODELS))
        + sorted(set(precisions) - set(PRECISIONS))
    )
    if bad or not devices or not models or not precisions:
        parser.error(
            f"unknown or empty --devices/--models/--precisions {bad}; use {list(GPUS)}, "
            f"{list(MODELS)} and {list(PRECISIONS)}"
        )

    import torch

    if "cuda" in devices and not torch.cuda.is_available():
        print("error: --devices has cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    from memrl.experiment.ray_session import ray_session

    where = torch.cuda.get_device_name(0) if "cuda" in devices else "CPU only"
    rows: list[dict] = []
    with ray_session(None), tempfile.TemporaryDirectory() as tmp:
        for name in models:
            for device in devices:
                # The CPU's float32 row is every speed-up's reference.
                ours = ["float32", *precisions] if device == "cpu" else precisions
                for precision in dict.fromkeys(ours):
                    row = {
                        "model": name,
                        "device": device,
                        "precision": precision,
                        "num_gpus_per_learner": GPUS[device],
                    }
                    row.update(one_setting(MODELS[name], device, precision, args, Path(tmp)))
                    rows.append(row)
                    # Written after every setting: a run stopped by its time limit keeps what
                    # it had.
                    _report(rows, args, where)
    return 0


def _report(rows: list[dict], args: argparse.Namespace, where: str) -> None:
    from memrl.experiment.tables import Plot, write_report

    for row in rows:
        cpu = [
            r
            for r in rows
            if r["model"] == row["model"] and r["device"] == "cpu" and r["precision"] == "float32"
        ]
        ratio = row["learner_steps_per_s"] / cpu[0]["learner_steps_per_s"] if cpu else None
        row["speedup_vs_cpu"] = float("nan") if ratio is None else ratio
        row["setting"] = f"{row['device']} {row['precision']}"
    write_report(
        NAME,
        rows,
        args.output,
        title=f"Memo PPO learner, one iteration of {args.train_batch} env steps ({where})",
        plots=[Plot(x="model", y="learner_steps_per_s", group="setting", kind="bar")],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
