"""Scaling: env steps/s of sampling, learning and the whole PPO loop vs env runners and learners.

On Dark-Key-To-Door with RLlib's MLP policy (PPO, new API stack), for 0, 1 and 2 env runners
(with the learner in the driver) and for 1 and 2 remote learners (DDP on CPU, the same total
batch), each at ``--envs-per-runner`` envs per runner stepped by the env's native vectorized
version and memrl's lean connectors on RLlib's episode path (``vector``) and on the bulk path
(``bulk``: rollouts as flat arrays from the vector env to the PPO loss, memrl.rollout; one learner
at most), Memo rows (the model, envs per runner and PPO batch, minibatch and epochs of
``--memo-config``, ``configs/memo_key_door.yaml`` by default; 0 runners) on both paths
(``memo``, ``memo-bulk``) and on the bulk path sampling the next batch while the learner trains
(``memo-overlap``, ``resources.overlap_sampling``), and with one remote env runner beside the
driver's learner (``memo`` and ``memo-overlap``), plus comparison rows: RLlib's defaults
(gymnasium's SyncVectorEnv of single envs, action normalization, the default connectors) at 8
envs (RLlib's default setting) and at ``--envs-per-runner`` envs, memrl's defaults with
SyncVectorEnv stepping, and more envs per runner (``--more-envs``). The ceiling is the raw
scalar env: one env (as ``make_env`` builds it, what the episode path steps) in a plain loop in
one process, random actions; beside it the raw native vector env, its envs stepped together, both
measured back to back before and after every setting.

Columns: ``pipeline_steps_per_s`` (env steps per wall second of whole ``train()`` iterations:
sampling + learning + weight sync), ``sampling_steps_per_s`` (a sampling-only round of one train
batch on the env runners), ``learner_steps_per_s`` (the train batch over RLlib's
``learner_update_timer``: all epochs and minibatches); ``*_per_cpu_s``: the same steps per CPU
second of the processes involved (driver, env runners, learners; the sampling processes for
sampling), and ``*_frac_of_raw`` / ``*_cpu_frac_of_raw``: fractions of the raw scalar env's
speed, per wall second (raw measured right before and after each setting) and per CPU second. On a
shared machine the per-CPU-second fractions are the stable figures: wall-clock rates swing with
other users' load.
Ray is started with at least 1 + runners + learners logical CPUs, which may be more than the
machine's cores (then the processes share them).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "scaling"
ENV_ID = "memrl/DarkKeyToDoor-v0"
ENV_CONFIG = {"size": 5, "episode_len": 20, "trial_len": 100}
RAW_SCALAR = ("raw scalar env", 1, "none")
"""(setting, envs, vectorize) of the raw scalar env's row: the ceiling the fractions are of."""
logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runners", default="0,1,2", help="env runner counts (learner in driver)")
    parser.add_argument("--learners", default="1,2", help="remote learner counts (0 env runners)")
    parser.add_argument(
        "--envs-per-runner", type=int, default=256, help="vectorized envs per env runner"
    )
    parser.add_argument(
        "--baseline-envs",
        type=int,
        default=8,
        help="also measure RLlib's defaults at this many envs (0 runners; 0: skip)",
    )
    parser.add_argument(
        "--more-envs",
        type=int,
        default=64,
        help="also measure 0 and 1 runners at this many envs per runner (0: skip)",
    )
    parser.add_argument(
        "--memo-config",
        default="configs/memo_key_door.yaml",
        help="experiment YAML whose Memo model, envs per runner and PPO batch settings the Memo "
        "rows use ('': none)",
    )
    parser.add_argument(
        "--memo-compile",
        action="store_true",
        help="Memo rows with model.compile_learner (torch.compile of the learner's transformer "
        "forward, both paths; 3 warm-up iterations instead of 1 absorb the compiling)",
    )
    parser.add_argument(
        "--memo-precision",
        choices=("float32", "bfloat16"),
        default=None,
        help="Memo rows with this model.learner_precision (both paths; default: the "
        "--memo-config's)",
    )
    parser.add_argument("--train-batch", type=int, default=4000, help="env steps per iteration")
    parser.add_argument("--minibatch", type=int, default=1000, help="SGD minibatch size")
    parser.add_argument("--epochs", type=int, default=4, help="passes over each train batch")
    parser.add_argument("--iters", type=int, default=3, help="timed iterations per setting")
    parser.add_argument(
        "--raw-steps", type=int, default=50_000, help="steps per measurement of the raw env loop"
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 timed iteration, 20k raw steps, no baseline rows"
    )
    add_output_arguments(parser, NAME)


def raw_env_speed(steps: int, seed: int = 0) -> tuple[float, float]:
    """Env steps per wall second and per CPU second of the raw scalar env: one Dark-Key-To-Door
    env as ``make_env`` builds it, in a plain loop (random actions)."""
    import numpy as np

    from memrl.envs import make_env

    env = make_env(ENV_ID, dict(ENV_CONFIG))
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, env.action_space.n, size=steps).tolist()
    start, cpu = time.perf_counter(), time.process_time()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    env.close()
    return steps / elapsed, steps / max(cpu, 1e-9)


def raw_vector_env_speed(num_envs: int, steps: int, seed: int = 0) -> tuple[float, float]:
    """Env steps per wall and per CPU second of the native vectorized env alone (random actions)."""
    import numpy as np

    from memrl.envs import make_vector_env

    env = make_vector_env(ENV_ID, num_envs, dict(ENV_CONFIG))
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    rounds = max(1, steps // num_envs)
    actions = rng.integers(0, 5, size=(rounds, num_envs))
    start, cpu = time.perf_counter(), time.process_time()
    for a in actions:
        env.step(a)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    env.close()
    done = rounds * num_envs
    return done / elapsed, done / max(cpu, 1e-9)


def raw_speeds(steps: int, vec_envs: int) -> dict[tuple[str, int, str], tuple[float, float]]:
    """One measurement of the raw envs, back to back (the same load): the scalar env for
    ``steps`` steps, then the native vector env of ``vec_envs`` envs; each (steps per wall second,
    per CPU second), keyed by (setting, envs, vectorize) of its row."""
    return {
        RAW_SCALAR: raw_env_speed(steps),
        (f"raw vector env, {vec_envs} envs", vec_envs, "vector"): raw_vector_env_speed(
            vec_envs, max(steps, 20 * vec_envs)
        ),
    }


def raw_rows(raws: list[dict[tuple[str, int, str], tuple[float, float]]]) -> list[dict[str, Any]]:
    """The table's raw rows from ``raw_speeds`` measurements: the scalar env, then the vector env
    beside it; each the median of its measurements, with its fractions of the scalar env's."""
    medians = {
        key: tuple(statistics.median(r[key][i] for r in raws) for i in (0, 1)) for key in raws[0]
    }
    raw_wall, raw_cpu = medians[RAW_SCALAR]
    return [
        {
            "setting": label,
            "env_runners": 0,
            "learners": 0,
            "envs_per_runner": envs,
            "vectorize": mode,
            "pipeline_steps_per_s": wall,
            "pipeline_steps_per_cpu_s": cpu,
            "sampling_steps_per_s": wall,
            "sampling_steps_per_cpu_s": cpu,
            "learner_steps_per_s": float("nan"),
            "raw_steps_per_s": raw_wall,
            "pipeline_frac_of_raw": wall / raw_wall,
            "sampling_frac_of_raw": wall / raw_wall,
            "pipeline_cpu_frac_of_raw": cpu / raw_cpu,
            "sampling_cpu_frac_of_raw": cpu / raw_cpu,
        }
        for (label, envs, mode), (wall, cpu) in medians.items()
    ]


def experiment(
    runners: int, learners: int, envs: int, args: argparse.Namespace, mode: str = "auto"
) -> dict[str, Any]:
    """The experiment config of one setting (the total train batch is the same for any learners).

    ``mode``: an ``env_vectorize_mode`` (RLlib's episode path), "bulk" (the native vector env on
    the bulk path), "memo" / "memo-bulk" / "memo-overlap" (the Memo model of ``--memo-config``
    on either path, and on the bulk path sampling the next batch while it trains,
    ``resources.overlap_sampling``), or
    "rllib" for RLlib's own defaults (sync stepping, action normalization on, the default
    module-to-env connectors)."""
    per_learner = args.train_batch // max(1, learners)
    minibatch, epochs = min(args.minibatch, per_learner), args.epochs
    rllib = mode == "rllib"
    overlap = mode == "memo-overlap"
    bulk = overlap or mode in ("bulk", "memo-bulk")
    model = {"type": "mlp", "hiddens": [64, 64], "lean_connectors": not rllib}
    if mode.startswith("memo"):
        model, ppo = memo_model(args.memo_config)
        model["compile_learner"] = args.memo_compile
        if args.memo_precision:
            model["learner_precision"] = args.memo_precision
        per_learner, minibatch, epochs = ppo.train_batch_size, ppo.minibatch_size, ppo.num_epochs
        mode = "vector"
    return {
        "name": "scaling",
        "env": {
            "id": ENV_ID,
            "config": dict(ENV_CONFIG),
            "normalize_actions": True if rllib else None,
        },
        "algorithm": {
            "name": "ppo",
            "train_batch_size": per_learner,
            "minibatch_size": minibatch,
            "num_epochs": epochs,
        },
        "model": model,
        "resources": {
            "num_env_runners": runners,
            "num_envs_per_env_runner": envs,
            "num_learners": learners,
            "env_vectorize_mode": "sync" if rllib else "vector" if bulk else mode,
            "sampler": "bulk" if bulk else "episodes",
            "overlap_sampling": overlap,
        },
    }


def _memo_title(args: argparse.Namespace) -> str:
    """How the Memo rows ran, for the table's title."""
    if not args.memo_config:
        return "no Memo rows"
    how = [args.memo_config]
    if args.memo_compile:
        how.append("compile_learner")
    if args.memo_precision:
        how.append(f"learner_precision {args.memo_precision}")
    return "Memo: " + ", ".join(how)


def memo_model(path: str) -> tuple[dict[str, Any], Any]:
    """The ``model`` section (a dict) and the PPO settings of the experiment YAML at ``path``; its
    model must be a Memo model."""
    from memrl.experiment.config import load_config
    from memrl.experiment.dataclass_dicts import to_dict

    exp = load_config(path)
    model = to_dict(exp.model)
    if model.get("type") != "memo":
        raise ValueError(f"--memo-config {path}: model.type is {model.get('type')!r}, not memo")
    return model, exp.algorithm


def memo_envs(path: str) -> int:
    """Envs per runner of the experiment YAML at ``path``."""
    from memrl.experiment.config import load_config

    return load_config(path).resources.num_envs_per_env_runner


def _pids(algo: Any) -> list[int]:
    """Processes of the algorithm: the driver, its remote env runners and remote learners."""
    pids = [os.getpid()]
    group = algo.env_runner_group
    if group is not None and group.num_remote_env_runners():
        pids += group.foreach_env_runner(lambda _: os.getpid(), local_env_runner=False)
    if not algo.learner_group.is_local:
        calls = algo.learner_group.foreach_learner(lambda _: os.getpid())
        pids += [c.get() for c in calls.ignore_errors()]
    return pids


def _cpu_seconds(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _sample_cost(algo: Any, steps: int, rounds: int = 3) -> tuple[float, float]:
    """Sampling alone: env steps per wall second and per CPU second of the sampling processes,
    the median of ``rounds`` sampling rounds of ``steps`` each (one round is short and noisy)."""
    rates = sorted((_sample_round(algo, steps) for _ in range(rounds)), key=lambda r: r[1])
    return rates[len(rates) // 2]


def _sample_round(algo: Any, steps: int) -> tuple[float, float]:

    def timed(runner: Any, n: int) -> tuple[int, float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        episodes = runner.sample(num_timesteps=n, explore=True)
        done = sum(len(e) for e in episodes)
        return done, time.perf_counter() - start, time.process_time() - cpu

    group = algo.env_runner_group
    remote = group.num_remote_env_runners()
    if not remote:
        results = [timed(algo.env_runner, steps)]
    else:
        per = max(1, steps // remote)
        results = group.foreach_env_runner(lambda r: timed(r, per), local_env_runner=False)
    done = sum(r[0] for r in results)
    return done / max(r[1] for r in results), done / max(sum(r[2] for r in results), 1e-9)


def measure(config: dict[str, Any], iters: int, logdir: Path, warmup: int = 1) -> dict[str, float]:
    """Builds the algorithm, runs ``warmup`` warm-up iterations, then times ``iters`` iterations
    and one sampling-only round of a train batch."""
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.checkpoints import build_algo
    from memrl.experiment.config import parse_config
    from memrl.experiment.progress import flatten

    algo = build_algo(build_algorithm_config(parse_config(config)), logdir)
    # RLlib's learner timer is a moving average that keeps ~98% of its first (warm-up) value
    # after two more iterations: the learner's own update calls are timed here instead.
    update, spent = algo.learner_group.update, []

    def timed_update(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return update(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    algo.learner_group.update = timed_update
    try:
        for _ in range(warmup):
            result = flatten(algo.train())
        pids = _pids(algo)
        steps0 = result["env_runners/num_env_steps_sampled_lifetime"]
        spent.clear()
        start, cpu0 = time.perf_counter(), _cpu_seconds(pids)
        for _ in range(iters):
            result = flatten(algo.train())
        wall, cpu = time.perf_counter() - start, _cpu_seconds(pids) - cpu0
        steps = result["env_runners/num_env_steps_sampled_lifetime"] - steps0
        batch = float(result["env_runners/num_env_steps_sampled"])
        sampling, sampling_cpu = _sample_cost(algo, int(batch))
        return {
            "pipeline_steps_per_s": steps / wall,
            "pipeline_steps_per_cpu_s": steps / max(cpu, 1e-9),
            "sampling_steps_per_s": sampling,
            "sampling_steps_per_cpu_s": sampling_cpu,
            "learner_steps_per_s": steps / max(sum(spent), 1e-9),
        }
    finally:
        algo.stop()


def settings(args: argparse.Namespace) -> list[tuple[int, int, int, str]]:
    """(env runners, learners, envs per runner, vectorize mode) of every measured setting."""
    runners = [int(x) for x in args.runners.split(",") if x.strip()]
    learners = [int(x) for x in args.learners.split(",") if x.strip()]
    if any(n < 0 for n in runners + learners):
        raise ValueError(
            f"--runners/--learners must be >= 0, got {args.runners!r}/{args.learners!r}"
        )
    envs = args.envs_per_runner
    out: list[tuple[int, int, int, str]] = []
    if not args.quick:
        if args.baseline_envs:
            out.append((0, 0, args.baseline_envs, "rllib"))
        out += [(0, 0, envs, "rllib"), (0, 0, envs, "sync")]
    for mode in ("vector", "bulk"):
        out += [(r, 0, envs, mode) for r in runners]
    if args.more_envs and args.more_envs != envs and not args.quick:
        for mode in ("vector", "bulk"):
            out += [(r, 0, args.more_envs, mode) for r in runners if r <= 1]
    out += [(0, n, envs, "vector") for n in learners if n > 0]
    # The bulk path trains with one learner (remote or in the driver).
    out += [(0, n, envs, "bulk") for n in learners if n == 1]
    if args.memo_config:
        # In the driver on either path, and one remote env runner beside the driver's learner.
        envs = memo_envs(args.memo_config)
        out += [(0, 0, envs, m) for m in ("memo", "memo-bulk", "memo-overlap")]
        out += [(1, 0, envs, m) for m in ("memo", "memo-overlap")]
    return out


def run(args: argparse.Namespace) -> int:
    import tempfile

    import torch

    from memrl.experiment.ray_session import ray_session

    torch.set_num_threads(1)
    if args.quick:
        args.iters, args.raw_steps = 1, 20_000
    todo = settings(args)
    # The machine may be shared: the raw envs are measured right before and after every setting,
    # and each setting's fractions are taken against the mean of those two (the same load).
    vec_envs = max(args.envs_per_runner, args.more_envs or 0)
    raws = [raw_speeds(args.raw_steps, vec_envs)]
    rows: list[dict[str, Any]] = []
    need = max((1 + r + n for r, n, _, _ in todo), default=1)
    cores = os.cpu_count() or 1
    with ray_session(None, num_cpus=max(need, cores)), tempfile.TemporaryDirectory() as tmp:
        for runners, learners, envs, mode in todo:
            label = f"{runners} runners, {learners} learners, {envs} envs, {mode}"
            config = experiment(runners, learners, envs, args, mode)
            compiled = bool(config["model"].get("compile_learner"))
            figures = measure(config, args.iters, Path(tmp), warmup=3 if compiled else 1)
            raws.append(raw_speeds(args.raw_steps, vec_envs))
            raw_wall = (raws[-2][RAW_SCALAR][0] + raws[-1][RAW_SCALAR][0]) / 2
            rows.append(
                {
                    "setting": label,
                    "env_runners": runners,
                    "learners": learners,
                    "envs_per_runner": envs,
                    "vectorize": mode,
                    **figures,
                    "raw_steps_per_s": raw_wall,
                    "pipeline_frac_of_raw": figures["pipeline_steps_per_s"] / raw_wall,
                    "sampling_frac_of_raw": figures["sampling_steps_per_s"] / raw_wall,
                }
            )
            logger.info("%s: %s", label, rows[-1])
    raw_cpu = statistics.median(r[RAW_SCALAR][1] for r in raws)
    for row in rows:
        row["pipeline_cpu_frac_of_raw"] = row["pipeline_steps_per_cpu_s"] / raw_cpu
        row["sampling_cpu_frac_of_raw"] = row["sampling_steps_per_cpu_s"] / raw_cpu
    rows[:0] = raw_rows(raws)
    for row in rows:
        row["cpu_cores"] = cores
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=f"Scaling on Dark-Key-To-Door (MLP: PPO, batch {args.train_batch}, "
        f"{args.epochs} epochs of minibatch {args.minibatch}; {_memo_title(args)}; "
        f"{cores} CPU cores)",
        plots=[
            Plot(x="setting", y="pipeline_steps_per_s", kind="bar", title="whole loop, steps/s"),
            Plot(
                x="setting",
                y="sampling_cpu_frac_of_raw",
                kind="bar",
                title="sampling / raw scalar env (per CPU second)",
            ),
            Plot(
                x="setting",
                y="pipeline_cpu_frac_of_raw",
                kind="bar",
                title="whole loop / raw scalar env (per CPU second)",
            ),
            Plot(x="setting", y="learner_steps_per_s", kind="bar", title="learner, steps/s"),
        ],
    )
    return 0
