"""Memo as an RLlib RLModule (new API stack).

MemoRLModule = observation encoder (MLP) + MemoTransformer + a linear actor head and a critic.
The critic (``critic``) reads the policy trunk's features with gradients into it (``shared``),
reads them without (``detached``), or has its own encoder and transformer (``separate``); its
last layer is a ``PopArtHead`` (values learnt in normalized units, ``value_norm``).

Data path (why it is not RLlib's stateful-module path): RLlib's stateful batching cuts episodes
into ``max_seq_len`` rows that start from a STATE_OUT stored at every timestep, with no backprop
across rows. Memo must instead train on trials from their first step, with gradients through
every summary, and a per-timestep copy of a KV cache would be absurd. So the module declares no
RLlib state (``get_initial_state`` is empty) and:

- Acting (env runners): the env-to-module connector ``MemoTrialStep``
  (memrl/methods/memo/connectors.py) adds ``memo_trial_t``, each row's step within its trial.
  ``_forward_inference``/``_forward_exploration`` hand the rows to a ``MemoCacheKeeper``
  (memrl/methods/memo/cache_keeper.py) that this module owns on the env runner: one KV cache row per
  vector-env slot, reset when a trial starts, plus the trial's per-step encoder inputs.
- Segment lengths: with ``seg_randomization`` the env runner draws the segment length it acts
  with (l_seg * [0.8, 1.2)) anew at each weight sync and records it with every step
  (``memo_seg_len``); the learner's loss pass uses the recorded length of each row, so acting
  and learning run the same computation (the PPO ratio is 1 before an update). Greedy acting
  (``explore=False``) uses l_seg.
- KV refresh: ``set_state`` (how an env runner receives new weights) loads the weights, then
  rebuilds every ongoing trial's cache from its stored encoder inputs with them (and the newly
  drawn segment length).
- Frozen image encoder (``image_slice``/``image_shape``, from ``model.image_obs``): the image
  part of each observation is encoded once, on the env runner, by a fixed FrozenImageEncoder.
  The keeper stores those features (not the image) for the refresh, and the module returns them
  as the extra model output ``memo_frozen_features``, which the episode keeps with the step; the
  learner connector passes them on, so neither the refresh nor the learner re-encodes images.
- Training (learner): ``episode_lookback_horizon`` >= the trial length makes every sampled chunk
  carry its trial's earlier observations; ``MemoTrialBatch`` (batch.py) turns each chunk into one
  (T,) row from trial step 0 with the loss mask on the chunk's own steps (partial updates),
  computes GAE, and ``MemoPPOLearner`` (learner.py) packs whole rows of one segment length into
  minibatches. ``_forward_train`` runs the segment loop over (B, T).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from memrl.methods.memo.cache_keeper import MemoCacheKeeper
from memrl.methods.memo.columns import MEMO_FROZEN_FEATURES, MEMO_SEG_LEN, MEMO_TRIAL_T, VF_PREDS
from memrl.methods.memo.frozen_encoder import FrozenImageEncoder
from memrl.methods.memo.network import MemoConfig, MemoTransformer
from memrl.methods.memo.value_head import PopArtHead

CRITICS = ("shared", "detached", "separate")
PRECISIONS = ("float32", "bfloat16")


@dataclass(frozen=True)
class MemoModuleConfig(MemoConfig):
    """MemoRLModule's model_config: the network's fields (MemoConfig) and the module's own.

    ``MemoModelSettings`` (settings.py, ``model: {type: memo}``) extends this class, so each
    setting and its default is declared once; its ``model_config`` is this class's fields.
    """

    encoder_hiddens: list[int] = field(default_factory=lambda: [64])
    """Hidden layers of the observation encoder MLP (GELU)."""
    seg_randomization: bool = True
    """Act and learn with a segment length drawn in l_seg * [0.8, 1.2) anew at every weight
    sync (the same length in the loss pass as when acting; greedy evaluation uses l_seg)."""
    critic: Literal["shared", "detached", "separate"] = "shared"
    """The critic's trunk: the policy's features with gradients into them (shared), the same
    features without (detached), or its own encoder and transformer (separate: twice the
    learner's compute)."""
    vf_hiddens: list[int] = field(default_factory=list)
    """Hidden layers (GELU) of the critic's MLP between its trunk and its output."""
    value_norm: bool = True
    """Learn values in normalized units (PopArt: running mean and std of the value targets, the
    output layer rescaled so de-normalized values never jump); metrics report return units."""
    value_norm_decay: float = 0.99
    """Decay per update of the value normalization's running moments."""
    image_channels: list[int] = field(default_factory=lambda: [16, 32])
    """Conv channels of the frozen image encoder (3x3 convolutions, ReLU)."""
    image_features: int = 64
    """Output width of the frozen image encoder (a fixed random projection)."""
    image_seed: int = 0
    """Seed of the frozen image encoder's weights."""
    seg_seed: int = 0
    """Seed of the segment-length draws (the run's seed)."""
    image_slice: list[int] | None = None
    """[start, stop) of the image part in the flat observation (None: no image encoder)."""
    image_shape: list[int] | None = None
    """(H, W, C) of the image part, row-major channels-last."""
    compile_learner: bool = False
    """torch.compile the transformer's training forward on learners (not on env runners): a
    faster learner after about a minute of compiling per learner process (a C++ compiler is
    needed on CPUs; ``memrl bench scaling --memo-compile``); results equal eager ones to float
    rounding, not bit for bit."""

    learner_precision: Literal["float32", "bfloat16"] = "float32"
    """The learner's transformer matmuls: float32, or bfloat16 under autocast (weights, the
    optimizer, the heads and, on CPUs, attention stay float32). Env runners act in float32.
    bfloat16 pays where the hardware multiplies it natively (recent GPUs; CPUs with AVX512-BF16
    or AMX: ``memrl bench scaling --memo-precision bfloat16``); where it is emulated it can be
    slower than float32."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.critic not in CRITICS:
            raise ValueError(f"critic must be one of {list(CRITICS)}, got {self.critic!r}")
        if self.learner_precision not in PRECISIONS:
            raise ValueError(
                f"learner_precision must be one of {list(PRECISIONS)}, "
                f"got {self.learner_precision!r}"
            )

    @classmethod
    def from_model_config(cls, model_config: dict[str, Any] | None) -> MemoModuleConfig:
        """The config of a model_config dict; absent keys take their defaults (a checkpoint's
        dict may predate a setting); keys of other classes are left aside."""
        known = {f.name for f in dataclasses.fields(MemoModuleConfig)}
        return MemoModuleConfig(**{k: v for k, v in (model_config or {}).items() if k in known})

    def network(self) -> MemoConfig:
        """The MemoTransformer's part of this config."""
        return MemoConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(MemoConfig)})

    def model_config(self) -> dict[str, Any]:
        """This config as an RLModule model_config dict (lists copied)."""
        out = {}
        for f in dataclasses.fields(MemoModuleConfig):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, list) else value
        return out


def _mlp(width: int, hiddens: list[int], out: int | None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for hidden in hiddens:
        layers += [nn.Linear(width, hidden), nn.GELU()]
        width = hidden
    if out is not None:
        layers.append(nn.Linear(width, out))
    return nn.Sequential(*layers)


class MemoRLModule(TorchRLModule, ValueFunctionAPI):
    """Encoder + MemoTransformer + actor head + critic; see the module docstring for the data path.

    model_config keys: the fields of ``MemoModuleConfig`` (absent ones take its defaults).
    """

    def setup(self) -> None:
        cfg = MemoModuleConfig.from_model_config(self.model_config)
        self.memo_cfg = cfg.network()
        self.seg_randomization = bool(cfg.seg_randomization)
        self.critic = str(cfg.critic)
        obs_dim = int(self.observation_space.shape[0])
        self.visual: FrozenImageEncoder | None = None
        width = obs_dim
        if cfg.image_slice is not None:
            if cfg.image_shape is None:
                raise ValueError("model_config has image_slice but no image_shape [H, W, C]")
            start, stop = (int(i) for i in cfg.image_slice)
            self.visual = FrozenImageEncoder(
                tuple(cfg.image_shape),
                tuple(cfg.image_channels),
                int(cfg.image_features),
                int(cfg.image_seed),
            )
            if not 0 <= start < stop <= obs_dim or stop - start != self.visual.in_dim:
                raise ValueError(
                    f"image_slice [{start}, {stop}) must lie in the {obs_dim}-dim observation "
                    f"and hold image_shape {list(self.visual.shape)} = {self.visual.in_dim} "
                    "values; fix model.image_obs or the env's obs_slices"
                )
            self._image = slice(start, stop)
            width = obs_dim - self.visual.in_dim + self.visual.features
        d = self.memo_cfg.d_model
        hiddens = list(cfg.encoder_hiddens)
        self.encoder = _mlp(width, hiddens, d)
        self.net = MemoTransformer(self.memo_cfg)
        self.pi = nn.Linear(d, int(self.action_space.n))
        if self.critic == "separate":
            self.critic_encoder = _mlp(width, hiddens, d)
            self.critic_net = MemoTransformer(self.memo_cfg)
        vf_hiddens = list(cfg.vf_hiddens)
        self.vf_mlp = _mlp(d, vf_hiddens, None)
        self.vf = PopArtHead(
            vf_hiddens[-1] if vf_hiddens else d,
            normalize=bool(cfg.value_norm),
            decay=float(cfg.value_norm_decay),
        )
        self._keeper: MemoCacheKeeper | None = None
        # Compiled trunks by ``critic`` (torch.compile compiles on first call); a plain dict, not
        # submodules, so the state dict is unchanged.
        self._compiled: dict[bool, Any] | None = None
        if cfg.compile_learner and not self.inference_only:
            self._compiled = {False: torch.compile(self.net)}
            if self.critic == "separate":
                self._compiled[True] = torch.compile(self.critic_net)
            # The learner's gradient diagnostics take a backward pass that keeps the graph
            # (retain_graph), which compiled backwards refuse while they donate their buffers.
            import torch._functorch.config as functorch_config

            functorch_config.donated_buffer = False
        # bfloat16 autocast of the learner's trunk passes (None: float32).
        self._autocast = (
            torch.bfloat16
            if cfg.learner_precision == "bfloat16" and not self.inference_only
            else None
        )
        self._seg_rng = random.Random(int(cfg.seg_seed))
        self._acting_seg = self.draw_seg_len(self._seg_rng)
        if self.inference_only:
            self.eval()

    def train(self, mode: bool = True) -> MemoRLModule:
        """Set training mode; an env runner's module (``inference_only``) stays in eval mode.

        RLlib puts the module into eval mode and back around every acting call: two walks over
        all submodules per env step (measured ~0.1 ms of a ~3.4 ms acting call for 40 envs). A
        module that only acts never needs training mode.
        """
        if self.inference_only:
            if not self.training:
                return self
            mode = False
        return super().train(mode)

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
    def draw_seg_len(self, rng: random.Random) -> int:
        """A segment length to act and learn with: l_seg * (0.8 + 0.4 U) when randomized."""
        if not self.seg_randomization or self.memo_cfg.mode == "fct":
            return self.memo_cfg.l_seg
        return max(1, int(self.memo_cfg.l_seg * (0.8 + 0.4 * rng.random())))

    @property
    def keeper(self) -> MemoCacheKeeper:
        """The env-runner-side caches (created on first use; never used by a learner)."""
        if self._keeper is None:
            self._keeper = MemoCacheKeeper(self.encoder, self.net)
        return self._keeper

    def _act(self, batch: dict[str, Any], seg_len: int) -> dict[str, Any]:
        if MEMO_TRIAL_T not in batch:
            raise KeyError(
                f"MemoRLModule needs the {MEMO_TRIAL_T!r} column to act; add "
                "memrl.methods.memo.connectors.MemoTrialStep to the env-to-module "
                "pipeline (MemoModelSettings.apply does)"
            )
        inputs = self.memo_inputs(batch[Columns.OBS])  # (B, in_dim)
        features = self.keeper.step(inputs, batch[MEMO_TRIAL_T], seg_len)
        B = inputs.shape[0]
        out = {
            Columns.ACTION_DIST_INPUTS: self.pi(features),
            # Kept in the episode (an extra model output): the loss pass uses the same length.
            MEMO_SEG_LEN: torch.full((B,), seg_len, dtype=torch.long, device=inputs.device),
        }
        if self.visual is not None:
            # Kept in the episode (an extra model output) so the learner reuses it.
            out[MEMO_FROZEN_FEATURES] = inputs[:, : self.visual.features]
        return out

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._act(batch, self.memo_cfg.l_seg)

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._act(batch, self._acting_seg)

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._acting_seg = self.draw_seg_len(self._seg_rng)
        if self._keeper is not None:
            self._keeper.refresh(self._acting_seg)

    # ------------------------------------------------------------ training
    def features(
        self,
        obs: torch.Tensor,
        seg_len: int | torch.Tensor | None = None,
        layer_drop: bool | None = None,
        frozen: torch.Tensor | None = None,
        *,
        critic: bool = False,
    ) -> torch.Tensor:
        """(B, T, obs_dim) whole trials from their first step -> (B, T, d_model).

        ``seg_len``: the segment length of every row, or one per row (B,) (rows are independent:
        each group of equal length runs on its own); None: l_seg. ``frozen`` (B, T,
        image_features): the frozen image features of those steps when already computed (the
        learner batch's ``memo_frozen_features``). ``critic``: the separate critic's trunk.
        """
        encoder = self.critic_encoder if critic else self.encoder
        net = self.critic_net if critic else self.net
        if self._compiled is not None:
            net = self._compiled[critic]
        tokens = encoder(self.memo_inputs(obs, frozen))  # (B, T, d_model)
        if self._autocast is not None:
            with torch.autocast(tokens.device.type, dtype=self._autocast):
                return self._trunk(net, tokens, seg_len, layer_drop).float()
        return self._trunk(net, tokens, seg_len, layer_drop)

    @staticmethod
    def _trunk(
        net: Any,
        tokens: torch.Tensor,
        seg_len: int | torch.Tensor | None,
        layer_drop: bool | None,
    ) -> torch.Tensor:
        """``net`` over (B, T, d_model) tokens, one call per segment length in ``seg_len``."""
        if not isinstance(seg_len, torch.Tensor):
            return net(tokens, seg_len=seg_len, layer_drop=layer_drop)
        lengths = seg_len.cpu()
        if bool((lengths == lengths[0]).all()):
            return net(tokens, seg_len=int(lengths[0]), layer_drop=layer_drop)
        out = torch.zeros_like(tokens)
        for length in lengths.unique().tolist():
            rows = (lengths == length).nonzero().flatten().to(tokens.device)
            part = net(tokens[rows], seg_len=length, layer_drop=layer_drop)
            out = out.index_copy(0, rows, part.to(out.dtype))
        return out

    def value_preds(
        self,
        batch: dict[str, Any],
        policy_features: torch.Tensor | None,
        layer_drop: bool | None = None,
    ) -> torch.Tensor:
        """The critic's values (B, T) in normalized units (``policy_features``: the policy
        trunk's output for these rows, when the loss pass computed it already)."""
        seg = batch.get(MEMO_SEG_LEN)
        frozen = batch.get(MEMO_FROZEN_FEATURES)
        if self.critic == "separate":
            trunk = self.features(batch[Columns.OBS], seg, layer_drop, frozen, critic=True)
        else:
            if policy_features is None:
                policy_features = self.features(batch[Columns.OBS], seg, layer_drop, frozen)
            trunk = policy_features.detach() if self.critic == "detached" else policy_features
        return self.vf(self.vf_mlp(trunk)).squeeze(-1)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        features = self.features(
            batch[Columns.OBS], batch.get(MEMO_SEG_LEN), frozen=batch.get(MEMO_FROZEN_FEATURES)
        )
        return {
            Columns.ACTION_DIST_INPUTS: self.pi(features),
            Columns.EMBEDDINGS: features,
            VF_PREDS: self.value_preds(batch, features),
        }

    def values_and_logits(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (B, T) in return units and action logits (B, T, A) of whole-trial rows from
        one trunk pass, without layer-drop."""
        seg, frozen = batch.get(MEMO_SEG_LEN), batch.get(MEMO_FROZEN_FEATURES)
        features = self.features(batch[Columns.OBS], seg, False, frozen)
        values = self.value_preds(batch, features, layer_drop=False)
        return self.vf.denormalize(values), self.pi(features)

    def compute_values(
        self, batch: dict[str, Any], embeddings: Any = None, normalized: bool = False
    ) -> torch.Tensor:
        """Values (B, T) of whole-trial rows, in return units (``normalized``: the critic's own
        units), from the loss pass's policy features when given, without layer-drop otherwise."""
        values = self.value_preds(batch, embeddings, layer_drop=False)
        return values if normalized else self.vf.denormalize(values)
