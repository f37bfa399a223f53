"""Where the bulk path applies (``resources.sampler``), and wiring it into an AlgorithmConfig."""

from __future__ import annotations

from typing import Any


def bulk_refusal(algo_config: Any, exp: Any, model_reason: str | None) -> str | None:
    """Why the bulk path cannot run this experiment, or None when it can.

    Args:
        algo_config: the AlgorithmConfig with the env runners and learners already set.
        exp: the ExperimentConfig.
        model_reason: the model's own reason (None: the model supports the bulk path).
    """
    if model_reason is not None:
        return model_reason
    tag = getattr(type(exp.algorithm), "TAG_KEY", ("", ""))[1]
    if tag != "ppo":
        return f"it trains PPO only, not algorithm {tag!r}"
    mode = algo_config.gym_env_vectorize_mode
    if mode not in ("vector_entry_point", "sync"):
        return (
            "it steps its envs in the runner's process (env_vectorize_mode 'vector' or 'sync'), "
            f"not {mode!r}"
        )
    if exp.resources.num_learners > 1:
        return f"it trains with one learner, not num_learners={exp.resources.num_learners}"
    return None


def use_bulk(algo_config: Any, exp: Any, model_reason: str | None = None) -> bool:
    """Whether ``resources.sampler`` picks the bulk path for this experiment.

    Raises:
        ValueError: sampler 'bulk' where the bulk path cannot run (the message says why).
    """
    from memrl.envs import has_vector_env

    sampler = exp.resources.sampler
    if sampler == "episodes" or (sampler == "auto" and not has_vector_env(exp.env.id)):
        return False
    why = bulk_refusal(algo_config, exp, model_reason)
    if why is not None and sampler == "bulk":
        raise ValueError(
            f"resources.sampler is 'bulk' but {why}; use sampler 'auto' (bulk where it "
            "applies) or 'episodes'"
        )
    return why is None


def apply_bulk(
    algo_config: Any, env_runner_class: type | None = None, learner_class: type | None = None
) -> None:
    """Sets a bulk env runner and learner (defaults: ``BulkEnvRunner``, ``BulkPPOLearner``)."""
    if env_runner_class is None:
        from memrl.rollout.env_runner import BulkEnvRunner

        env_runner_class = BulkEnvRunner
    if learner_class is None:
        from memrl.rollout.learner import BulkPPOLearner

        learner_class = BulkPPOLearner
    algo_config.env_runners(env_runner_cls=env_runner_class)
    algo_config.learners(learner_class=learner_class)


def apply_overlap(algo_config: Any, exp: Any) -> None:
    """Makes PPO sample the next batch while it trains (``resources.overlap_sampling``;
    ``OverlappedPPO``), where the experiment runs on the bulk path.

    Raises:
        ValueError: the experiment is not on the bulk path (the message says why).
    """
    from memrl.rollout.env_runner import BulkEnvRunner

    runner = algo_config.env_runner_cls
    if not (isinstance(runner, type) and issubclass(runner, BulkEnvRunner)):
        why = bulk_refusal(algo_config, exp, None) or "the env has no native vector form"
        raise ValueError(
            f"resources.overlap_sampling needs the bulk path, which this experiment is not on: "
            f"{why}; turn overlap_sampling off"
        )
    if not getattr(algo_config.learner_class, "corrects_acting_lag", False):
        raise ValueError(
            "resources.overlap_sampling trains Memo models only (model.type memo): their "
            "learner corrects for batches acted one weight version behind; turn "
            "overlap_sampling off"
        )
    from memrl.rollout.overlap import OverlappedPPO

    algo_config.algo_class = OverlappedPPO
