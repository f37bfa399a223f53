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
  vector-env slot, reset when a trial starts, plus the trial's per-step encoder inputs. Fixed l_seg.
- KV refresh: ``set_state`` (how an env runner receives new weights) loads the weights, then
  rebuilds every ongoing trial's cache from its stored encoder inputs with them.
- Frozen image encoder (``image_slice``/``image_shape``, from ``model.image_obs``): the image
  part of each observation is encoded once, on the env runner, by a fixed FrozenImageEncoder.
  The keeper stores those features (not the image) for the refresh, and the module returns them
  as the extra model output ``memo_frozen_features``, which the episode keeps with the step; the
  learner connector passes them on, so neither the refresh nor the learner re-encodes images.
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

from memrl.models.frozen_encoder import FrozenImageEncoder
from memrl.models.memo import MODES, MemoConfig, MemoTransformer
from memrl.runners.memo_cache import MemoCacheKeeper
from memrl.runners.memo_connectors import MEMO_FROZEN_FEATURES, MEMO_TRIAL_T

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

    model_config keys: the MemoConfig fields, ``encoder_hiddens`` (list[int]),
    ``seg_randomization`` (bool), and for a frozen image encoder ``image_slice`` ([start, stop)
    of the flat observation), ``image_shape`` ([H, W, C], row-major channels-last),
    ``image_channels``, ``image_features`` and ``image_seed`` (see FrozenImageEncoder).
    """

    def setup(self) -> None:
        mc = dict(self.model_config or {})
        self.memo_cfg = MemoConfig(**{k: mc[k] for k in _NET_KEYS if k in mc})
        self.seg_randomization = bool(mc.get("seg_randomization", True))
        obs_dim = int(self.observation_space.shape[0])
        self.visual: FrozenImageEncoder | None = None
        width = obs_dim
        if mc.get("image_slice") is not None:
            start, stop = (int(i) for i in mc["image_slice"])
            self.visual = FrozenImageEncoder(
                tuple(mc["image_shape"]),
                tuple(mc.get("image_channels", [16, 32])),
                int(mc.get("image_features", 64)),
                int(mc.get("image_seed", 0)),
            )
            if not 0 <= start < stop <= obs_dim or stop - start != self.visual.in_dim:
                raise ValueError(
                    f"image_slice [{start}, {stop}) must lie in the {obs_dim}-dim observation "
                    f"and hold image_shape {list(self.visual.shape)} = {self.visual.in_dim} "
                    "values; fix model.image_obs or the env's obs_slices"
                )
            self._image = slice(start, stop)
            width = obs_dim - self.visual.in_dim + self.visual.features
        layers: list[nn.Module] = []
        for hidden in mc.get("encoder_hiddens", [64]):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, self.memo_cfg.d_model))
        self.encoder = nn.Sequential(*layers)
        self.net = MemoTransformer(self.memo_cfg)
        self.pi = nn.Linear(self.memo_cfg.d_model, int(self.action_space.n))
        self.vf = nn.Linear(self.memo_cfg.d_model, 1)
        self._keeper: MemoCacheKeeper | None = None

    def image_features(self, obs: torch.Tensor) -> torch.Tensor:
        """(..., obs_dim) observations -> (..., image_features) of the frozen image encoder."""
        if self.visual is None:
            raise ValueError("this MemoRLModule has no image encoder (model.image_obs is null)")
        return self.visual(obs.float()[..., self._image])

    def memo_inputs(self, obs: torch.Tensor, frozen: torch.Tensor | None = None) -> torch.Tensor:
        """The trainable encoder's inputs: (..., obs_dim) -> (..., in_dim).

        Without an image encoder these are the observations. With one, the frozen image features
        (given as ``frozen`` (..., image_features) when already computed, else computed here)
        followed by the observation without its image part.
        """
        obs = obs.float()
        if self.visual is None:
            return obs
        if frozen is None:
            frozen = self.image_features(obs)
        rest = (obs[..., : self._image.start], obs[..., self._image.stop :])
        return torch.cat([frozen.float(), *rest], dim=-1)

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
        inputs = self.memo_inputs(batch[Columns.OBS])  # (B, in_dim)
        features = self.keeper.step(inputs, batch[MEMO_TRIAL_T])
        out = {Columns.ACTION_DIST_INPUTS: self.pi(features)}
        if self.visual is not None:
            # Kept in the episode (an extra model output) so the learner reuses it.
            out[MEMO_FROZEN_FEATURES] = inputs[:, : self.visual.features]
        return out

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
        self,
        obs: torch.Tensor,
        seg_len: int | None = None,
        layer_drop: bool | None = None,
        frozen: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T, obs_dim) whole trials from their first step -> (B, T, d_model).

        ``frozen`` (B, T, image_features): the frozen image features of those steps when already
        computed (the learner batch's ``memo_frozen_features``).
        """
        tokens = self.encoder(self.memo_inputs(obs, frozen))  # (B, T, d_model)
        return self.net(tokens, seg_len=seg_len, layer_drop=layer_drop)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        features = self.features(
            batch[Columns.OBS], seg_len=self.train_seg_len(), frozen=batch.get(MEMO_FROZEN_FEATURES)
        )
        return {Columns.ACTION_DIST_INPUTS: self.pi(features), Columns.EMBEDDINGS: features}

    def compute_values(
        self, batch: dict[str, Any], embeddings: Any = None, fixed_segments: bool = False
    ) -> torch.Tensor:
        """Values (B, T) of whole-trial rows (from the loss pass's features when given)."""
        if embeddings is None:
            seg = self.memo_cfg.l_seg if fixed_segments else self.train_seg_len()
            embeddings = self.features(
                batch[Columns.OBS],
                seg_len=seg,
                layer_drop=False if fixed_segments else None,
                frozen=batch.get(MEMO_FROZEN_FEATURES),
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
    image_obs: str | None = None
    """Name of the env's image-like observation part (its ``obs_slices`` entry, with the shape in
    its ``obs_shapes``; ObjNav-lite: "view") to encode with a frozen conv net; null: none."""
    image_channels: list[int] = field(default_factory=lambda: [16, 32])
    """Conv channels of the frozen image encoder (3x3 convolutions, ReLU)."""
    image_features: int = 64
    """Output width of the frozen image encoder (a fixed random projection)."""
    image_seed: int = 0
    """Seed of the frozen image encoder's weights."""
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
        if any(c < 1 for c in self.image_channels) or not self.image_channels:
            raise ValueError(
                f"{where}.image_channels must be a non-empty list of positive ints, "
                f"got {self.image_channels}"
            )
        if self.image_features < 1:
            raise ValueError(f"{where}.image_features must be >= 1, got {self.image_features}")
        for name in ("max_trial_len", "partial_update_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{where}.{name} must be null or >= 1, got {value}")

    def memo_config(self) -> MemoConfig:
        return MemoConfig(**{k: getattr(self, k) for k in _NET_KEYS})

    def model_config(self, exp: Any = None) -> dict[str, Any]:
        """The RLModule's model_config; ``exp`` (the experiment) resolves ``image_obs``."""
        out = {k: v for k, v in asdict(self).items() if k in _NET_KEYS}
        out.update(
            encoder_hiddens=list(self.encoder_hiddens), seg_randomization=self.seg_randomization
        )
        if self.image_obs is not None:
            if exp is None:
                raise ValueError("model.image_obs needs the experiment's env to resolve it")
            start, stop, shape = self.image_layout(exp)
            out.update(
                image_slice=[start, stop],
                image_shape=list(shape),
                image_channels=list(self.image_channels),
                image_features=self.image_features,
                image_seed=self.image_seed,
            )
        return out

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

        from memrl.learners.memo_batch import make_learner_connector
        from memrl.learners.memo_ppo import MemoPPOLearner
        from memrl.runners.memo_connectors import make_env_to_module

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
        )
        algo_config.learners(learner_class=MemoPPOLearner)
