"""`memrl eval`: run a checkpoint's policy for N episodes and report what it achieves.

The run's ``config.yaml`` (next to ``checkpoints/``) rebuilds the algorithm with a single local env
runner (no remote runners, no remote learners, no GPUs), the checkpoint is restored into it and its
weights are pushed to that runner; episodes are then sampled with ``explore=False`` (the policy's
mode) unless ``--explore``. For envs with inner episodes (Dark-Key-To-Door, corridor, ObjNav) the
report includes the mean return of each inner-episode index within a trial.

The results are also kept in the run directory (``eval/<checkpoint>.json``), with replays of the
first trials on grid and navigation envs (``eval/<checkpoint>.replay.json``, see replay.py), and
the run's HTML report (``report.html``) is written again to include them. A run on a storage URI
(s3://, gs://, file://) is read through a local copy (``open_checkpoint``) and those files are
written back to the storage.

Given an experiment YAML instead (``memrl eval configs/X.yaml``), the config's untrained policy
is evaluated the same way, without a checkpoint (for MEM1: the prompted model of ``model.path``,
no warm start); its results go to ``eval_out/<name>/`` (or ``--output``).

An algorithm that evaluates itself (it has ``evaluate_episodes``, as MEM1's does: held-out tasks,
EM, F1, peak tokens, turns, and a JSONL transcript per episode) is asked to instead; its summary
joins the report and its transcripts are written beside the report (or under the run's
``eval/``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from memrl.experiment.build import build_algorithm_config
from memrl.experiment.checkpoint_check import check_checkpoint, intact_checkpoint
from memrl.experiment.checkpoints import build_algo, restore_checkpoint
from memrl.experiment.config import apply_overrides, parse_config
from memrl.experiment.ray_session import ray_session
from memrl.experiment.run_dir import (
    CHECKPOINT_PREFIX,
    CHECKPOINTS,
    CONFIG,
    EVAL,
    RLLIB_LOGDIR,
    TB,
    RunDir,
    is_checkpoint_name,
    is_uri,
)
from memrl.experiment.run_report import refresh_report

logger = logging.getLogger(__name__)


def resolve_checkpoint(path: str | Path, echo: Any = print) -> tuple[RunDir, Path]:
    """Accepts a checkpoint dir or a run dir (then its newest intact checkpoint: when the
    newest is damaged, an older one, with a line through ``echo`` that says so).

    Raises:
        FileNotFoundError: no such path, or a run without checkpoints.
        ValueError: neither a run nor a checkpoint in one.
        DamagedCheckpoint: the checkpoint (for a run: every one of its checkpoints) is damaged.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"Checkpoint {str(p)!r} does not exist.")
    if (p / CONFIG).is_file():
        run = RunDir(p)
        names = run.saved_checkpoints()
    elif is_checkpoint_name(p.name) and (p.parent.parent / CONFIG).is_file():
        run, names = RunDir(p.parent.parent), [p.name]
    else:
        raise ValueError(
            f"{p} is neither a run directory (with config.yaml) nor a checkpoint inside one "
            f"(RUN/checkpoints/{CHECKPOINT_PREFIX}NNNNNN)."
        )
    _, ckpt = intact_checkpoint(run, names, lambda name: run.path / CHECKPOINTS / name, echo)
    return run, ckpt


# What a URI run's local copy leaves out: its other checkpoints, TensorBoard files, RLlib's logdir.
NOT_COPIED = (CHECKPOINTS, TB, RLLIB_LOGDIR)


@contextlib.contextmanager
def open_checkpoint(location: str | Path, echo: Any = print) -> Iterator[tuple[RunDir, Path]]:
    """``resolve_checkpoint`` for a local path or a run on a storage URI (s3://, gs://,
    file://). A URI run is copied for the block into a local temp dir (``run.path``): its files
    but the folders in NOT_COPIED, and the one checkpoint asked for (or the newest intact)."""
    if not is_uri(location):
        yield resolve_checkpoint(location, echo)
        return
    where = str(location).rstrip("/")
    head, _, tail = where.rpartition("/")
    name = None
    if is_checkpoint_name(tail) and head.endswith(f"/{CHECKPOINTS}"):
        where, name = head[: -len(CHECKPOINTS) - 1], tail
    with tempfile.TemporaryDirectory(prefix="memrl-run-") as tmp:
        run = RunDir(where, Path(tmp) / where.rsplit("/", 1)[-1])
        if not run.exists(CONFIG):
            raise FileNotFoundError(
                f"{where} is neither a run (with config.yaml) nor a checkpoint inside one "
                f"(RUN/checkpoints/{CHECKPOINT_PREFIX}NNNNNN)."
            )
        saved = run.saved_checkpoints()
        if name is not None and name not in saved:
            raise FileNotFoundError(
                f"Checkpoint {run.uri(CHECKPOINTS, name)} does not exist or was not saved "
                f"completely; complete ones: {', '.join(saved) or 'none'}."
            )
        for entry in run.top_level():
            if entry not in NOT_COPIED:
                run.download(entry, run.path / entry)

        def download(checkpoint: str) -> Path:
            run.download(f"{CHECKPOINTS}/{checkpoint}", run.path / CHECKPOINTS / checkpoint)
            return run.path / CHECKPOINTS / checkpoint

        yield run, intact_checkpoint(run, [name] if name else saved, download, echo)[1]


UNTRAINED_DIR = Path("eval_out")
"""Where ``memrl eval CONFIG`` keeps its results without ``--output``: ``eval_out/<name>/``."""


def is_config_file(path: str | Path) -> bool:
    """Whether ``memrl eval`` was given an experiment YAML rather than a run or checkpoint."""
    return str(path).endswith((".yaml", ".yml")) and not is_uri(path)


def evaluate_checkpoint(
    checkpoint: str | Path,
    *,
    episodes: int | None = None,
    output: str | Path | None = None,
    overrides: list[str] | None = None,
    explore: bool = False,
    replays: int = 3,
    eval_set: str | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    """Evaluates a checkpoint, or with an experiment YAML the config's untrained policy (e.g. a
    prompted LLM before any training); returns (and optionally writes as JSON) the results.

    ``replays``: trials recorded step by step for the report (grid and navigation envs only);
    ``eval_set``: one of the run's named evaluation sets instead of its main held-out set (MEM1:
    a name in ``algorithm.eval_extra``).
    """
    if is_config_file(checkpoint):
        return evaluate_config(
            checkpoint,
            episodes=episodes,
            output=output,
            overrides=overrides,
            explore=explore,
            eval_set=eval_set,
            echo=echo,
        )
    with open_checkpoint(checkpoint, echo) as (run, ckpt):
        exp = parse_config(apply_overrides(run.read_config(), list(overrides or [])))
        return _evaluate(
            exp, run, ckpt, episodes, output, explore, replays, echo, eval_set=eval_set
        )


def evaluate_config(
    config: str | Path,
    *,
    episodes: int | None = None,
    output: str | Path | None = None,
    overrides: list[str] | None = None,
    explore: bool = False,
    eval_set: str | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    """The untrained policy of an experiment YAML (no checkpoint, no warm start): for MEM1 the
    prompted model as ``model.path`` gives it. Results go to ``output`` (default
    ``eval_out/<name>/untrained.json``) with the transcripts beside them."""
    from memrl.experiment.config import load_config

    exp = load_config(config, list(overrides or []))
    stem = f"{eval_set}.untrained" if eval_set else "untrained"
    out = Path(output) if output else UNTRAINED_DIR / exp.name / f"{stem}.json"
    # A tiny model, if the config asks for one, is built into this folder (its run directory).
    return _evaluate(
        exp, None, None, episodes, out, explore, 0, echo, files=out.parent, eval_set=eval_set
    )


def _evaluate(
    exp: Any,
    run: RunDir | None,
    ckpt: Path | None,
    episodes: int | None,
    output: str | Path | None,
    explore: bool,
    replays: int,
    echo: Any,
    files: Path | None = None,
    eval_set: str | None = None,
) -> dict[str, Any]:
    """Evaluates ``exp``'s policy: the checkpoint ``ckpt`` of ``run``, or with neither the
    untrained one (``files`` is then where the method may keep files, e.g. a tiny model)."""
    from memrl.experiment.callbacks import inner_episode_stats
    from memrl.experiment.replay import REPLAY_ENVS, ReplayRecorder, replays_for

    episodes = exp.run.eval_episodes if episodes is None else episodes
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    exp = replace(
        exp,
        resources=replace(
            exp.resources,
            num_env_runners=0,
            num_learners=0,
            num_gpus_per_learner=0.0,
            num_gpus_per_env_runner=0.0,
            custom_resources_per_env_runner={},
        ),
    )
    record = replays > 0 and exp.env.id in REPLAY_ENVS
    if record:  # the recorder reads single envs (the same trajectories as the vector env)
        exp = replace(exp, resources=replace(exp.resources, env_vectorize_mode="sync"))
    # Results of a named evaluation set are kept apart from the main one's (eval/<set>.iter_N).
    name = ckpt.name if ckpt is not None else ""
    if eval_set and ckpt is not None:
        name = f"{eval_set}.{ckpt.name}"
    home = run.path if run is not None else files
    algo_config = build_algorithm_config(exp.located(home))  # config mistakes before Ray
    if ckpt is not None:  # and a checkpoint that does not fit it
        check_checkpoint(ckpt, exp, algo_config, shown_checkpoint(run, ckpt))
    # RLlib's Trainable log dir of an evaluation holds nothing: a temp dir, not one more
    # timestamped folder in the run's rllib/ per `memrl eval`.
    with ray_session(None, num_cpus=1), tempfile.TemporaryDirectory(prefix="memrl-eval-") as tmp:
        algo = build_algo(algo_config, Path(tmp))
        try:
            if ckpt is not None:
                restore_checkpoint(algo, ckpt, acting_only=True)
            runner = algo.env_runner
            if record:
                runner.env = ReplayRecorder(runner.env, exp.env.id)
            t0 = time.time()
            done: list[Any] = []
            own = None
            if callable(getattr(algo, "evaluate_episodes", None)):
                out = Path(output) if output else run.path / EVAL / f"{name}.json"
                own = algo.evaluate_episodes(
                    episodes,
                    explore=explore,
                    transcripts=out.with_suffix(".transcripts.jsonl"),
                    eval_set=eval_set,
                )
            elif eval_set is not None:
                raise ValueError(
                    f"--eval-set is for algorithms with named evaluation sets (MEM1); "
                    f"{exp.algorithm.name} evaluates on its env as configured: leave it out."
                )
            while own is None and len(done) < episodes:
                batch = runner.sample(num_episodes=episodes - len(done), explore=explore)
                done += [ep for ep in batch if ep.is_done]
            seconds = time.time() - t0
        finally:
            algo.stop()
    done = done[:episodes]
    recorded = replays_for(runner.env, done, replays) if record else []
    returns = own["returns"] if own else [float(ep.get_return()) for ep in done]
    lengths = own["turns"] if own else [len(ep) for ep in done]
    if ckpt is None:
        model_path = getattr(exp.model, "path", None)
        shown = f"{exp.name}, no checkpoint" + (f" (model.path {model_path})" if model_path else "")
    else:
        shown = shown_checkpoint(run, ckpt)
    result: dict[str, Any] = {
        "checkpoint": shown,
        "env": exp.env.id,
        "episodes": len(returns),
        "explore": explore,
        **({"eval_set": eval_set} if eval_set else {}),
        "return_mean": sum(returns) / len(returns),
        "return_std": _std(returns),
        "return_min": min(returns),
        "return_max": max(returns),
        "len_mean": sum(lengths) / len(lengths),
        "env_steps_per_s": sum(lengths) / max(seconds, 1e-9),
        "returns": returns,
    }
    result.update(inner_episode_stats(done))
    if own:
        kept = own.get("transcripts")
        if kept and run is not None and run.staged and Path(kept).parent == run.path / EVAL:
            own["transcripts"] = run.uri(EVAL, Path(kept).name)  # uploaded with the results
        result.update(own["summary"], transcripts=own["transcripts"])
        if "per_task" in own:
            result["per_task"] = own["per_task"]
    echo(
        f"{shown}: {len(returns)} episodes, return {result['return_mean']:.3f} "
        f"+- {result['return_std']:.3f} (min {result['return_min']:.2f}, "
        f"max {result['return_max']:.2f}), length {result['len_mean']:.1f}"
    )
    if "inner_return_by_index" in result:
        by_index = ", ".join(f"{v:.2f}" for v in result["inner_return_by_index"][:12])
        echo(f"return per inner-episode index: {by_index}")
        echo(f"inner-episode success rate: {result['inner_success_rate']:.3f}")
    if own:
        echo(", ".join(f"{k} {v:.4g}" for k, v in own["summary"].items()))
        echo(f"transcripts: {own['transcripts']}")
    if output:
        out = Path(output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        echo(f"wrote {out}")
    if run is not None:
        _keep_in_run(run, name, result, recorded, echo)
    return result


def shown_checkpoint(run: RunDir, ckpt: Path) -> str:
    """A checkpoint as the user knows it (a URI run's by its URI, not its local copy)."""
    return run.uri(CHECKPOINTS, ckpt.name) if run.staged else str(ckpt)


def _keep_in_run(
    run: RunDir, name: str, result: dict[str, Any], replays: list[dict[str, Any]], echo: Any
) -> None:
    """Writes the results (and replays) under the run's eval/ as ``<name>.*`` (the checkpoint's
    name, led by the evaluation set's when one was named) and refreshes its report; a run on a
    URI gets these eval files (results, replays, transcripts) and the report, written from the
    local copy ``open_checkpoint`` made, uploaded."""
    folder = run.path / EVAL
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(result, indent=1))
        if replays:
            (folder / f"{name}.replay.json").write_text(json.dumps({"trials": replays}))
        if run.staged:
            for path in sorted(folder.glob(f"{name}.*")):
                run.write_bytes(f"eval/{path.name}", path.read_bytes())
        echo(f"report: {refresh_report(run, local_copy=True)}")
    except OSError as err:  # a read-only run directory: the results were printed (and --output)
        logger.warning("could not keep the evaluation in %s (%s)", run.uri(EVAL), err)


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
