"""Memo's settings (``model: {type: memo, ...}``): the ONE place that wires its pieces into RLlib.

``MemoModelSettings.apply`` sets, on an AlgorithmConfig:
- the RLModule (``MemoRLModule``, rlmodule.py) and its model_config;
- the env-runner side: the env-to-module connector that adds each row's trial step
  (connectors.py) and a lookback horizon of one whole trial;
- the learner side: the connector that builds whole-trial rows with GAE (batch.py) and the PPO
  learner that packs whole rows into minibatches (learner.py), data-parallel (DDP) across
  ``num_learners`` learners;
- or, where ``resources.sampler`` picks the bulk path (memrl.rollout), the bulk env runner that
  steps the native vector env into arrays (bulk_runner.py) and the learner that makes the same
  rows from them (bulk_learner.py).
FCT, RMT and streaming variants are modes of the same network (``mode``, ``fct_window``,
``max_summaries``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memrl.methods.memo.rlmodule import MemoModuleConfig, MemoRLModule


@dataclass(frozen=True)
class MemoModelSettings(MemoModuleConfig):
    """Memo / FCT / RMT transformer policy, trained on whole trials with PPO (docs/memo.md).

    The network's and the RLModule's settings are those of ``MemoModuleConfig`` (rlmodule.py,
    extending the network's ``MemoConfig``), declared there once; this class adds what only the
    wiring needs, and fills the module's derived fields from the experiment (``model_config``).
    """

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "memo")

    seg_seed: int = field(default=0, init=False)
    """Not a YAML key: the run's seed (``model_config``)."""
    image_slice: list[int] | None = field(default=None, init=False)
    """Not a YAML key: resolved from ``image_obs`` (``model_config``)."""
    image_shape: list[int] | None = field(default=None, init=False)
    """Not a YAML key: resolved from ``image_obs`` (``model_config``)."""
    image_obs: str | None = None
    """Name of the env's image-like observation part (its ``obs_slices`` entry, with the shape in
    its ``obs_shapes``; ObjNav-lite: "view") to encode with a frozen conv net; null: none."""
    max_trial_len: int | None = None
    """Longest trial in env steps, the lookback kept per chunk (null: the env's trial_len)."""
    partial_update_steps: int | None = None
    """Env steps per env between updates within long trials (paper: 256 of 4096); each
    update's loss covers those steps, its context the trial so far (null: the resources'
    rollout_fragment_length)."""
    grad_diagnostics_every: int = 10
    """Updates between two logs of the trunk gradient-norm diagnostics (``trunk_grad_norm_pi``
    / ``_vf``: two extra backward passes on the first minibatch, ~10% of an update); 1: every
    update, 0: never. The first update always logs them (unless 0)."""

    def validate(self, where: str) -> None:
        if any(h < 1 for h in self.encoder_hiddens):
            raise ValueError(
                f"{where}.encoder_hiddens must be positive, got {self.encoder_hiddens}"
            )
        if any(c < 1 for c in self.image_channels) or not self.image_channels:
            raise ValueError(
                f"{where}.image_channels must be a non-empty list of positive ints, "
                f"got {self.image_channels}"
            )
        if self.image_features < 1:
            raise ValueError(f"{where}.image_features must be >= 1, got {self.image_features}")
        if any(h < 1 for h in self.vf_hiddens):
            raise ValueError(f"{where}.vf_hiddens must be positive, got {self.vf_hiddens}")
        if not 0.0 <= self.value_norm_decay < 1.0:
            raise ValueError(
                f"{where}.value_norm_decay must be in [0, 1), got {self.value_norm_decay}"
            )
        if self.grad_diagnostics_every < 0:
            raise ValueError(
                f"{where}.grad_diagnostics_every must be >= 0 (0: never), "
                f"got {self.grad_diagnostics_every}"
            )
        for name in ("max_trial_len", "partial_update_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{where}.{name} must be null or >= 1, got {value}")

    def model_config(self, exp: Any = None) -> dict[str, Any]:
        """The RLModule's model_config; ``exp`` (the experiment) gives the seed and resolves
        ``image_obs``."""
        derived: dict[str, Any] = {"seg_seed": int(getattr(getattr(exp, "run", None), "seed", 0))}
        if self.image_obs is not None:
            if exp is None:
                raise ValueError("model.image_obs needs the experiment's env to resolve it")
            start, stop, shape = self.image_layout(exp)
            derived.update(image_slice=[start, stop], image_shape=list(shape))
        return {**MemoModuleConfig.model_config(self), **derived}

    def image_layout(self, exp: Any) -> tuple[int, int, tuple[int, ...]]:
        """(start, stop, (H, W, C)) of ``image_obs`` in the env's flat observation."""
        from memrl.envs import make_env

        env = make_env(exp.env.id, exp.env.config)
        try:
            slices = dict(getattr(env.unwrapped, "obs_slices", {}) or {})
            shapes = dict(getattr(env.unwrapped, "obs_shapes", {}) or {})
        finally:
            env.close()
        if self.image_obs not in slices or self.image_obs not in shapes:
            raise ValueError(
                f"model.image_obs={self.image_obs!r}, but env {exp.env.id!r} names these "
                f"observation parts with a shape: {sorted(set(slices) & set(shapes))}; pick one "
                "or set model.image_obs to null"
            )
        part, shape = slices[self.image_obs], tuple(int(s) for s in shapes[self.image_obs])
        if len(shape) != 3:
            raise ValueError(
                f"model.image_obs={self.image_obs!r} has shape {shape}; an (H, W, C) one is needed"
            )
        return int(part.start), int(part.stop), shape

    def trial_len(self, exp: Any) -> int:
        if self.max_trial_len is not None:
            return self.max_trial_len
        from memrl.envs import make_env

        env = make_env(exp.env.id, exp.env.config)
        try:
            length = getattr(env.unwrapped, "trial_len", None)
        finally:
            env.close()
        if not isinstance(length, int):
            raise ValueError(
                f"model.max_trial_len is not set and env {exp.env.id!r} has no "
                "trial_len attribute; set model.max_trial_len to its longest trial"
            )
        return length

    def apply(self, algo_config: Any, exp: Any) -> None:
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec

        from memrl.methods.memo.batch import make_learner_connector
        from memrl.methods.memo.connectors import make_env_to_module
        from memrl.methods.memo.learner import GRAD_DIAGNOSTICS_EVERY, MemoPPOLearner

        algo_config.rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=MemoRLModule, model_config=self.model_config(exp)
            )
        )
        algo_config.env_runners(
            episode_lookback_horizon=self.trial_len(exp) + 1,
            env_to_module_connector=make_env_to_module,
        )
        if self.partial_update_steps is not None:
            algo_config.env_runners(rollout_fragment_length=self.partial_update_steps)
        algo_config.learners(
            learner_connector=functools.partial(
                make_learner_connector, gamma=algo_config.gamma, lambda_=algo_config.lambda_
            ),
            add_default_connectors_to_learner_pipeline=False,
            learner_config_dict={GRAD_DIAGNOSTICS_EVERY: self.grad_diagnostics_every},
        )
        algo_config.learners(learner_class=MemoPPOLearner)
        from memrl.rollout.select import apply_bulk, use_bulk

        if use_bulk(algo_config, exp, self.bulk_refusal()):
            from memrl.methods.memo.bulk_learner import MemoBulkLearner
            from memrl.methods.memo.bulk_runner import MemoBulkEnvRunner

            apply_bulk(algo_config, MemoBulkEnvRunner, MemoBulkLearner)
        if exp.resources.num_learners > 1:
            # DDP waits for a gradient of every parameter unless told some may have none.
            algo_config.framework(
                torch_ddp_kwargs={"find_unused_parameters": self.leaves_parameters_unused()}
            )

    def bulk_refusal(self) -> str | None:
        """Why this Memo cannot run on the bulk path (None: it can)."""
        if self.image_obs is not None:
            return "Memo's frozen image features (model.image_obs) are not on the bulk path"
        return None

    def leaves_parameters_unused(self) -> bool:
        """Whether a loss pass can leave parameters without a gradient: fct never reads the
        summary slots; layer drop skips whole layers."""
        return self.mode == "fct" or self.layer_drop > 0
