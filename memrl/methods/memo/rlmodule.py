"""Memo as an RLlib RLModule (new API stack).

MemoRLModule = observation encoder (MLP) + MemoTransformer + linear actor and critic heads.

Data path (why it is not RLlib's stateful-module path): RLlib's stateful batching cuts episodes
into ``max_seq_len`` rows that start from a STATE_OUT stored at every timestep, with no backprop
across rows. Memo must instead train on trials from their first step, with gradients through
every summary, and a per-timestep copy of a KV cache would be absurd. So the module declares no
RLlib state (``get_initial_state`` is empty) and:

- Acting (env runners): the env-to-module connector ``MemoTrialStep``
  (memrl/methods/memo/connectors.py) adds ``memo_trial_t``, each row's step within its trial.
  ``_forward_inference``/``_forward_exploration`` hand the rows to a ``MemoCacheKeeper``
  (memrl/methods/memo/cache_keeper.py) that this module owns on the env runner: one KV cache row per
  vector-env slot, reset when a trial starts, plus the trial's per-step encoder inputs. Fixed l_seg.
- KV refresh: ``set_state`` (how an env runner receives new weights) loads the weights, then
  rebuilds every ongoing trial's cache from its stored encoder inputs with them.
- Frozen image encoder (``image_slice``/``image_shape``, from ``model.image_obs``): the image
  part of each observation is encoded once, on the env runner, by a fixed FrozenImageEncoder.
  The keeper stores those features (not the image) for the refresh, and the module returns them
  as the extra model output ``memo_frozen_features``, which the episode keeps with the step; the
  learner connector passes them on, so neither the refresh nor the learner re-encodes images.
- Training (learner): ``episode_lookback_horizon`` >= the trial length makes every sampled chunk
  carry its trial's earlier observations; ``MemoTrialBatch`` (batch.py) turns each chunk into one
  (T,) row from trial step 0 with the loss mask on the chunk's own steps (partial updates),
  computes GAE, and ``MemoPPOLearner`` (learner.py) packs whole rows into minibatches.
  ``_forward_train`` runs the segment loop over (B, T) with a segment length drawn once per
  minibatch (+-20%, ``seg_randomization``).
"""

from __future__ import annotations

import random
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from memrl.methods.memo.cache_keeper import MemoCacheKeeper
from memrl.methods.memo.columns import MEMO_FROZEN_FEATURES, MEMO_TRIAL_T
from memrl.methods.memo.frozen_encoder import FrozenImageEncoder
from memrl.methods.memo.network import MemoConfig, MemoTransformer

NET_KEYS = (
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
        self.memo_cfg = MemoConfig(**{k: mc[k] for k in NET_KEYS if k in mc})
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
                "memrl.methods.memo.connectors.MemoTrialStep to the env-to-module "
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
