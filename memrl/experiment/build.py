"""An ExperimentConfig as RLlib objects: the env registered with RLlib, the AlgorithmConfig.

``build_algorithm_config`` is where the sections meet: the algorithm settings make the
AlgorithmConfig, the env, resources and fault-tolerance sections are applied, then the model
settings (a method's ``settings.py``) wire in its RLModule, connectors and learner.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from memrl.experiment.config import ExperimentConfig, FaultInjection

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig


def check_resources(exp: ExperimentConfig, cpus: float, gpus: float, *, where: str) -> None:
    """Raises ValueError when the run asks for more CPUs/GPUs than Ray has.

    Args:
        cpus, gpus: what the Ray instance offers.
        where: a description of that Ray instance for the message.
    """
    r = exp.resources
    need_cpus = (
        r.num_env_runners * r.num_cpus_per_env_runner + r.num_learners * r.num_cpus_per_learner
    )
    need_gpus = (
        r.num_env_runners * r.num_gpus_per_env_runner
        + max(1, r.num_learners) * r.num_gpus_per_learner
    )
    if need_cpus > cpus + 1e-9:
        raise ValueError(
            f"resources ask for {need_cpus:g} CPUs (num_env_runners={r.num_env_runners} x "
            f"num_cpus_per_env_runner={r.num_cpus_per_env_runner:g} + num_learners="
            f"{r.num_learners} x num_cpus_per_learner={r.num_cpus_per_learner:g}) but {where} "
            f"has {cpus:g}. Lower resources.num_env_runners (at most "
            f"{math.floor(cpus / max(r.num_cpus_per_env_runner, 1e-9))} here) or join a larger "
            "cluster with --address."
        )
    if need_gpus > gpus + 1e-9:
        raise ValueError(
            f"resources ask for {need_gpus:g} GPUs but {where} has {gpus:g}. Set "
            "resources.num_gpus_per_learner and num_gpus_per_env_runner to 0 to run on CPUs, or "
            "join a cluster with GPUs."
        )


def env_creator(env_id: str, fault: FaultInjection, env_context: Any) -> Any:
    """Builds one env inside an env runner (registered with RLlib under ``memrl:<id>``).

    RLlib calls it with ``num_envs`` in the context for the native vectorized version (the
    ``vector_entry_point`` vectorize mode) and without it for one single env.
    """
    from memrl.envs import make_env, make_vector_env

    config = dict(env_context)
    num_envs = config.pop("num_envs", None)
    if num_envs is not None:
        return make_vector_env(env_id, num_envs, config)
    env = make_env(env_id, config)
    worker_index = getattr(env_context, "worker_index", 0)
    if fault.step_error_probability > 0 and worker_index in fault.env_runner_indices:
        from memrl.envs.faults import StepErrorInjector

        seed = getattr(env_context, "vector_index", 0) + 1000 * worker_index
        env = StepErrorInjector(env, fault.step_error_probability, seed=seed)
    return env


def rllib_env_name(exp: ExperimentConfig) -> str:
    """Registers the experiment's env with RLlib and returns the name to pass to it."""
    from ray.tune.registry import register_env

    name = f"memrl:{exp.env.id}"
    register_env(name, functools.partial(env_creator, exp.env.id, exp.env.fault_injection))
    return name


def gym_vectorize_mode(exp: ExperimentConfig) -> str:
    """gymnasium's vectorize mode for the experiment's env runners (see env_vectorize_mode)."""
    from memrl.envs import has_vector_env

    mode = exp.resources.env_vectorize_mode
    native = has_vector_env(exp.env.id)
    if mode == "vector":
        if not native:
            raise ValueError(
                f"resources.env_vectorize_mode is 'vector' but {exp.env.id} has no native "
                "vectorized version; use 'auto' or 'sync'."
            )
        if exp.env.fault_injection.step_error_probability > 0:
            raise ValueError(
                "env.fault_injection wraps single envs: it needs resources.env_vectorize_mode "
                "'sync' or 'auto', not 'vector'."
            )
    if mode == "auto":
        use_native = native and exp.env.fault_injection.step_error_probability == 0
        mode = "vector" if use_native else "sync"
    return "vector_entry_point" if mode == "vector" else mode


def validate_env(exp: ExperimentConfig) -> None:
    """Builds the env once in this process, so a bad env id or config fails before Ray starts."""
    from memrl.envs import make_env

    gym_vectorize_mode(exp)
    env = make_env(exp.env.id, exp.env.config)
    env.close()


def build_algorithm_config(exp: ExperimentConfig) -> AlgorithmConfig:
    """The RLlib AlgorithmConfig (new API stack) for an experiment."""
    from memrl.experiment.callbacks import InnerEpisodeMetrics

    algo = exp.algorithm.make_algorithm_config(exp)
    # Every run (train, tune, eval) reports per-inner-episode returns; settings applied after
    # this (the model's) may add their own callbacks on top.
    algo.callbacks(InnerEpisodeMetrics)
    r, ft = exp.resources, exp.fault_tolerance
    algo.environment(env=rllib_env_name(exp), env_config=dict(exp.env.config))
    normalize = exp.env.normalize_actions
    if normalize is None:
        from memrl.envs import ENV_ENTRY_POINTS

        normalize = exp.env.id not in ENV_ENTRY_POINTS
    algo.environment(normalize_actions=normalize, clip_actions=False)
    algo.env_runners(
        num_env_runners=r.num_env_runners,
        num_envs_per_env_runner=r.num_envs_per_env_runner,
        num_cpus_per_env_runner=r.num_cpus_per_env_runner,
        num_gpus_per_env_runner=r.num_gpus_per_env_runner,
        custom_resources_per_env_runner=dict(r.custom_resources_per_env_runner),
        rollout_fragment_length=r.rollout_fragment_length,
        sample_timeout_s=r.sample_timeout_s,
        gym_env_vectorize_mode=gym_vectorize_mode(exp),
    )
    algo.learners(
        num_learners=r.num_learners,
        num_gpus_per_learner=r.num_gpus_per_learner,
        num_cpus_per_learner=r.num_cpus_per_learner,
        custom_resources_per_learner=dict(r.custom_resources_per_learner),
    )
    algo.resources(
        num_cpus_for_main_process=r.num_cpus_for_main_process,
        placement_strategy=r.placement_strategy,
    )
    algo.fault_tolerance(
        restart_failed_env_runners=ft.restart_failed_env_runners,
        max_num_env_runner_restarts=ft.max_num_env_runner_restarts,
        delay_between_env_runner_restarts_s=ft.delay_between_env_runner_restarts_s,
        restart_failed_sub_environments=ft.restart_failed_sub_environments,
        num_consecutive_env_runner_failures_tolerance=ft.num_consecutive_env_runner_failures_tolerance,
        env_runner_health_probe_timeout_s=ft.env_runner_health_probe_timeout_s,
    )
    # A sample round that every env runner dropped out of (their node died) is retried within
    # the same iteration, after RLlib's attempt to restore them, instead of ending an iteration
    # that trained on nothing: iterations keep their meaning across node losses.
    algo.reporting(min_sample_timesteps_per_iteration=1)
    algo.debugging(seed=exp.run.seed, log_level="WARN")
    exp.model.apply(algo, exp)
    if r.overlap_sampling:
        from memrl.rollout.select import apply_overlap

        apply_overlap(algo, exp)
    return algo
