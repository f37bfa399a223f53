"""PPO settings for the embodied envs (Dark-Key-To-Door, corridor, ObjNav), on RLlib's PPO."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig


@dataclass(frozen=True)
class PPOSettings:
    """PPO hyperparameters (RLlib's new-stack PPO; names follow its `training()` arguments)."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("name", "ppo")

    lr: float | list[list[float]] = 3e-4
    """Adam learning rate, or a schedule ``[[env_step, value], ...]`` (linear in between, the
    last value after it; RLlib's format), e.g. ``[[0, 5.0e-4], [5.0e6, 1.0e-4]]``."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_param: float = 0.2
    """PPO ratio clip."""
    vf_clip_param: float = 10.0
    """Value-loss clip (in return units)."""
    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""
    entropy_coeff: float | list[list[float]] = 0.01
    """Weight of the entropy bonus, or a schedule ``[[env_step, value], ...]`` like ``lr``'s
    (annealing it lets sampled actions get sure late in training)."""
    grad_clip: float | None = 0.5
    """Global gradient-norm clip (null: none)."""
    train_batch_size: int = 4000
    """Env steps per training iteration (per learner)."""
    minibatch_size: int = 500
    """SGD minibatch size in env steps."""
    num_epochs: int = 4
    """Passes over each train batch."""
    use_kl_loss: bool = False
    """Add an adaptive KL penalty to the loss."""
    kl_coeff: float = 0.2
    """Initial KL coefficient (with use_kl_loss)."""

    def validate(self, where: str) -> None:
        if self.minibatch_size > self.train_batch_size:
            raise ValueError(
                f"{where}.minibatch_size ({self.minibatch_size}) must not exceed "
                f"{where}.train_batch_size ({self.train_batch_size})"
            )
        if self.train_batch_size < 1 or self.num_epochs < 1:
            raise ValueError(f"{where}: train_batch_size and num_epochs must be >= 1")
        _check_schedule(self.lr, f"{where}.lr", positive=True)
        _check_schedule(self.entropy_coeff, f"{where}.entropy_coeff", positive=False)

    def make_algorithm_config(self, exp: Any) -> AlgorithmConfig:
        from ray.rllib.algorithms.ppo import PPOConfig

        return PPOConfig().training(
            lr=self.lr,
            gamma=self.gamma,
            lambda_=self.gae_lambda,
            clip_param=self.clip_param,
            vf_clip_param=self.vf_clip_param,
            vf_loss_coeff=self.vf_loss_coeff,
            entropy_coeff=self.entropy_coeff,
            grad_clip=self.grad_clip,
            train_batch_size_per_learner=self.train_batch_size,
            minibatch_size=self.minibatch_size,
            num_epochs=self.num_epochs,
            use_kl_loss=self.use_kl_loss,
            kl_coeff=self.kl_coeff,
        )


def _check_schedule(value: float | list[list[float]], key: str, *, positive: bool) -> None:
    """A number, or ``[[env_step, value], ...]`` with steps rising from 0 (RLlib's format)."""
    points = value if isinstance(value, list) else [[0, value]]
    ok = len(points) >= 2 if isinstance(value, list) else True
    ok = ok and all(isinstance(p, list) and len(p) == 2 for p in points)
    ok = ok and points[0][0] == 0
    ok = ok and all(a[0] < b[0] for a, b in zip(points, points[1:], strict=False))
    ok = ok and all((p[1] > 0) if positive else (p[1] >= 0) for p in points)
    if not ok:
        sign = "> 0" if positive else ">= 0"
        raise ValueError(
            f"{key} must be a number {sign} or a schedule [[env_step, value], ...] of two or "
            f"more points, starting at step 0, with rising steps and values {sign}; got {value!r}"
        )
