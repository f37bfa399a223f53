"""The critic's output layer with PopArt value normalization (plain torch).

Returns in a Memo trial grow as the agent improves (Dark-Key-To-Door: value targets from ~3 early
to ~12 later), so an unnormalized value loss changes scale during training and, on a shared trunk,
drowns the policy's gradient. ``PopArtHead`` learns values in normalized units instead: targets
are standardized with running statistics, and whenever the statistics move, the layer's weight and
bias are rescaled so that its de-normalized outputs stay exactly what they were (PopArt: van
Hasselt et al. 2016, "Learning values across many orders of magnitude").
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class PopArtHead(nn.Linear):
    """A (in, 1) linear value layer whose output is in normalized units.

    The statistics are exponential moving averages of the targets' first and second moments
    (``decay`` per update, debiased), kept as buffers so they travel with the weights (to env
    runners, into checkpoints). Weights saved by a plain ``nn.Linear`` load unchanged: missing
    statistics mean the identity normalization.
    """

    def __init__(self, in_features: int, *, normalize: bool = True, decay: float = 0.99) -> None:
        super().__init__(in_features, 1)
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"value normalization decay must be in [0, 1), got {decay}")
        self.normalize_values = normalize
        self.decay = decay
        self.register_buffer("moment1", torch.zeros(()))
        self.register_buffer("moment2", torch.zeros(()))
        self.register_buffer("debias", torch.zeros(()))

    def stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of the targets, as scalars; (0, 1) before the first update."""
        ready = self.debias > 0  # tensors throughout: no read-back from a GPU
        debias = torch.where(ready, self.debias, torch.ones_like(self.debias))
        mean = torch.where(ready, self.moment1 / debias, torch.zeros_like(self.moment1))
        var = (self.moment2 / debias - mean**2).clamp(min=1e-4)
        return mean, torch.where(ready, var.sqrt(), torch.ones_like(var))

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats()
        return (values - mean) / std

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats()
        return values * std + mean

    @torch.no_grad()
    def update(self, targets: torch.Tensor) -> None:
        """Moves the statistics towards a batch of value targets (1-D, in return units) and
        rescales weight and bias so the de-normalized outputs do not change. With several
        learners (torch.distributed initialized) the batch moments are averaged over all of them,
        so every learner keeps the same statistics."""
        if not self.normalize_values or targets.numel() == 0:
            return
        t = targets.detach().double()
        moments = torch.stack([t.sum(), (t * t).sum(), t.new_tensor(float(t.numel()))])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(moments)
        batch_m1, batch_m2 = moments[0] / moments[2], moments[1] / moments[2]
        old_mean, old_std = self.stats()
        b = self.decay
        self.moment1.copy_(b * self.moment1 + (1 - b) * batch_m1.to(self.moment1.dtype))
        self.moment2.copy_(b * self.moment2 + (1 - b) * batch_m2.to(self.moment2.dtype))
        self.debias.copy_(b * self.debias + (1 - b))
        new_mean, new_std = self.stats()
        self.weight.mul_(old_std / new_std)
        self.bias.copy_((old_std * self.bias + old_mean - new_mean) / new_std)
