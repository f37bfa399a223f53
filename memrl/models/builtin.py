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
