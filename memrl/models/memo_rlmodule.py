"""Memo as an RLlib RLModule (new API stack), and the ``model: {type: memo}`` settings.

MemoRLModule = observation encoder (MLP) + MemoTransformer + linear actor and critic heads.

Data path (why it is not RLlib's stateful-module path): RLlib's stateful batching cuts episodes
into ``max_seq_len`` rows that start from a STATE_OUT stored at every timestep, with no backprop
across rows. Memo must instead train on trials from their first step, with gradients through
every summary, and a per-timestep copy of a KV cache would be absurd. So the module declares no
RLlib state (``get_initial_state`` is empty) and:

- Acting (env runners): the env-to-module connector ``MemoTrialStep``
  (memrl/runners/memo_connectors.py) adds ``memo_trial_t``, each row's step within its trial.
  ``_forward_inference``/``_forward_exploration`` hand the rows to a ``MemoCacheKeeper``
  (memrl/runners/memo_cache.py) that this module owns on the env runner: one KV cache row per
  vector-env slot, reset when a trial starts, plus the trial's raw observations. Fixed l_seg.
- KV refresh: ``set_state`` (how an env runner receives new weights) loads the weights, then
  rebuilds every ongoing trial's cache from its stored observations with them.
- Training (learner): ``episode_lookback_horizon`` >= the trial length makes every sampled chunk
  carry its trial's earlier observations; ``MemoTrialBatch`` (memrl/learners/memo_batch.py) turns
  each chunk into one (T,) row from trial step 0 with the loss mask on the chunk's own steps
  (partial updates), computes GAE, and ``MemoPPOLearner`` (memrl/learners/memo_ppo.py) packs whole
  rows into minibatches. ``_forward_train`` runs the segment loop over (B, T) with a segment length
  drawn once per minibatch (+-20%, ``seg_randomization``).
"""

from __future__ import annotations

import functools
import random
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from memrl.models.memo import MODES, MemoConfig, MemoTransformer
from memrl.runners.memo_cache import MemoCacheKeeper
from memrl.runners.memo_connectors import MEMO_TRIAL_T

_NET_KEYS = (
    "d_model",
    "n_layers",
    "n_heads",
    "l_seg",
    "l_sum",
    "mode",
    "d_mlp",
    "fct_window",
    "max_summaries",
    "layer_drop",
)


class MemoRLModule(TorchRLModule, ValueFunctionAPI):
    """Encoder + MemoTransformer + actor/critic heads; see the module docstring for the data path.

    model_config keys: the MemoConfig fields, ``encoder_hiddens`` (list[int]) and
    ``seg_randomization`` (bool).
    """

    def setup(self) -> None:
        mc = dict(self.model_config or {})
        self.memo_cfg = MemoConfig(**{k: mc[k] for k in _NET_KEYS if k in mc})
        self.seg_randomization = bool(mc.get("seg_randomization", True))
        obs_dim = int(self.observation_space.shape[0])
        layers: list[nn.Module] = []
        width = obs_dim
        for hidden in mc.get("encoder_hiddens", [64]):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, self.memo_cfg.d_model))
        self.encoder = nn.Sequential(*layers)
        self.net = MemoTransformer(self.memo_cfg)
        self.pi = nn.Linear(self.memo_cfg.d_model, int(self.action_space.n))
        self.vf = nn.Linear(self.memo_cfg.d_model, 1)
        self._keeper: MemoCacheKeeper | None = None

    # ------------------------------------------------------------- acting
    @property
    def keeper(self) -> MemoCacheKeeper:
        """The env-runner-side caches (created on first use; never used by a learner)."""
        if self._keeper is None:
            self._keeper = MemoCacheKeeper(self.encoder, self.net)
        return self._keeper

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if MEMO_TRIAL_T not in batch:
            raise KeyError(
                f"MemoRLModule needs the {MEMO_TRIAL_T!r} column to act; add "
                "memrl.runners.memo_connectors.MemoTrialStep to the env-to-module "
                "pipeline (MemoModelSettings.apply does)"
            )
        features = self.keeper.step(batch[Columns.OBS].float(), batch[MEMO_TRIAL_T])
        return {Columns.ACTION_DIST_INPUTS: self.pi(features)}

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward(batch, **kwargs)

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward(batch, **kwargs)

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if self._keeper is not None:
            self._keeper.refresh()

    # ------------------------------------------------------------ training
    def train_seg_len(self) -> int:
        """Segment length of one loss pass: l_seg * (0.8 + 0.4 U) when randomized."""
        if not self.seg_randomization or self.memo_cfg.mode == "fct":
            return self.memo_cfg.l_seg
        return max(1, int(self.memo_cfg.l_seg * (0.8 + 0.4 * random.random())))

    def features(
        self, obs: torch.Tensor, seg_len: int | None = None, layer_drop: bool | None = None
    ) -> torch.Tensor:
        """(B, T, obs_dim) whole trials from their first step -> (B, T, d_model)."""
        return self.net(self.encoder(obs.float()), seg_len=seg_len, layer_drop=layer_drop)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        features = self.features(batch[Columns.OBS], seg_len=self.train_seg_len())
        return {Columns.ACTION_DIST_INPUTS: self.pi(features), Columns.EMBEDDINGS: features}

    def compute_values(
        self, batch: dict[str, Any], embeddings: Any = None, fixed_segments: bool = False
    ) -> torch.Tensor:
        """Values (B, T) of whole-trial rows (from the loss pass's features when given)."""
        if embeddings is None:
            seg = self.memo_cfg.l_seg if fixed_segments else self.train_seg_len()
            embeddings = self.features(
                batch[Columns.OBS], seg_len=seg, layer_drop=False if fixed_segments else None
            )
        return self.vf(embeddings).squeeze(-1)


@dataclass(frozen=True)
class MemoModelSettings:
    """Memo / FCT / RMT transformer policy (specs/memo.md), trained on whole trials with PPO."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "memo")

    mode: str = "memo"
    """memo (accumulated summaries), fct (full causal context) or rmt (newest summary only)."""
    d_model: int = 64
    """Transformer width (paper: 256)."""
    n_layers: int = 2
    """Decoder layers (paper: 4)."""
    n_heads: int = 4
    """Attention heads (paper: 8)."""
    d_mlp: int | None = None
    """Gated-MLP hidden width (null: 4 * d_model)."""
    l_seg: int = 16
    """Segment length in env steps (paper: 256)."""
    l_sum: int = 4
    """Summary tokens per segment (paper: 32)."""
    fct_window: int | None = None
    """fct only: FIFO window of steps attended (streaming FCT; null: the whole trial)."""
    max_summaries: int | None = None
    """memo only: summary blocks kept, oldest evicted first (streaming Memo; null: all)."""
    seg_randomization: bool = True
    """Draw the loss passes' segment length in l_seg * [0.8, 1.2) once per minibatch."""
    layer_drop: float = 0.0
    """Probability of skipping a layer in loss passes (paper: 0.1)."""
    encoder_hiddens: list[int] = field(default_factory=lambda: [64])
    """Hidden layers of the observation encoder MLP (GELU)."""
    max_trial_len: int | None = None
    """Longest trial in env steps, the lookback kept per chunk (null: the env's trial_len)."""
    partial_update_steps: int | None = None
    """Env steps per env between updates within long trials (paper: 256 of 4096); each
    update's loss covers those steps, its context the trial so far (null: the resources'
    rollout_fragment_length)."""

    def validate(self, where: str) -> None:
        if self.mode not in MODES:
            raise ValueError(f"{where}.mode must be one of {list(MODES)}, got {self.mode!r}")
        try:
            self.memo_config()
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from err
        if any(h < 1 for h in self.encoder_hiddens):
            raise ValueError(
                f"{where}.encoder_hiddens must be positive, got {self.encoder_hiddens}"
            )
        for name in ("max_trial_len", "partial_update_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{where}.{name} must be null or >= 1, got {value}")

    def memo_config(self) -> MemoConfig:
        return MemoConfig(**{k: getattr(self, k) for k in _NET_KEYS})

    def model_config(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k in _NET_KEYS}
        out.update(
            encoder_hiddens=list(self.encoder_hiddens), seg_randomization=self.seg_randomization
        )
        return out

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

        from memrl.learners.memo_batch import make_learner_connector
        from memrl.learners.memo_ppo import MemoPPOLearner
        from memrl.runners.memo_connectors import make_env_to_module

        algo_config.rl_module(
            rl_module_spec=RLModuleSpec(module_class=MemoRLModule, model_config=self.model_config())
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
        )
        algo_config.learners(learner_class=MemoPPOLearner)
