"""RLlib's own default networks as memrl model settings: a memoryless MLP and an LSTM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class MLPModel:
    """RLlib's default MLP policy and value networks (no memory)."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "mlp")

    hiddens: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes."""
    activation: str = "tanh"
    """tanh, relu or linear."""
    vf_share_layers: bool = False
    """Share the trunk between policy and value function."""
    lean_connectors: bool = True
    """Module-to-env connectors that keep the module's outputs as arrays over envs (sample
    actions, to numpy) instead of RLlib's default, which splits every output into one item per
    env and then lists them again: ~10% of sampling time. Used only where that is exact: a
    stateless single-agent module with actions that need no unsquashing (env.normalize_actions
    and clip_actions off, the default for memrl's envs)."""

    def validate(self, where: str) -> None:
        if self.activation not in ("tanh", "relu", "linear", "swish", "elu"):
            raise ValueError(
                f"{where}.activation must be tanh, relu, linear, swish or elu, "
                f"got {self.activation!r}"
            )

    def apply(self, algo: Any, exp: Any) -> None:
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

        algo.rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=list(self.hiddens),
                fcnet_activation=self.activation,
                vf_share_layers=self.vf_share_layers,
            )
        )
        if self.lean_connectors and not (algo.normalize_actions or algo.clip_actions):
            algo.env_runners(
                add_default_connectors_to_module_to_env_pipeline=False,
                module_to_env_connector=lean_module_to_env,
            )
        from memrl.rollout.select import apply_bulk, use_bulk

        if use_bulk(algo, exp):
            apply_bulk(algo)


def lean_module_to_env(env: Any = None, spaces: Any = None) -> list[Any]:
    """The module-to-env pieces a stateless single-agent module needs: sample actions from the
    action distribution inputs, then tensors to numpy. RLlib's env runner indexes every output
    by env slot (``value[env_index]``), which works on arrays as it does on lists."""
    from ray.rllib.connectors.module_to_env import GetActions, TensorToNumpy

    return [GetActions(), TensorToNumpy()]


@dataclass(frozen=True)
class LSTMModel:
    """RLlib's default LSTM policy: MLP encoder, LSTM, heads; trained on max_seq_len chunks."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "lstm")

    lstm_cell_size: int = 128
    """LSTM hidden size."""
    max_seq_len: int = 50
    """Length of the sequences the LSTM is trained on (no backprop across them)."""
    hiddens: list[int] = field(default_factory=lambda: [64])
    """Encoder layers before the LSTM."""
    activation: str = "tanh"
    """Activation of the encoder layers."""
    vf_share_layers: bool = True
    """Share the LSTM between policy and value function."""

    def apply(self, algo: Any, exp: Any) -> None:
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

        algo.rl_module(
            model_config=DefaultModelConfig(
                use_lstm=True,
                lstm_cell_size=self.lstm_cell_size,
                max_seq_len=self.max_seq_len,
                fcnet_hiddens=list(self.hiddens),
                fcnet_activation=self.activation,
                vf_share_layers=self.vf_share_layers,
            )
        )
        from memrl.rollout.select import apply_bulk, use_bulk

        if use_bulk(algo, exp):
            from memrl.rollout.recurrent_learner import RecurrentBulkPPOLearner
            from memrl.rollout.recurrent_runner import RecurrentBulkEnvRunner

            apply_bulk(algo, RecurrentBulkEnvRunner, RecurrentBulkPPOLearner)
