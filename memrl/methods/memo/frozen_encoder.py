"""A frozen (never trained) convolutional encoder for small image-like observation patches.

The Memo paper's Habitat policy encodes each RGB frame with a frozen, pretrained visual encoder;
only the projection after it is trained. No pretrained weights can be downloaded here, so this is
the same arrangement with a fixed random conv net: two 3x3 convolutions (ReLU) and a fixed
linear projection of the flattened maps, all drawn from a seeded generator, so that every process
that builds it with the same seed and shape holds the same function.

The weights are buffers, not parameters: no optimizer ever sees them, and they still travel with
the module's state (checkpoints, weight syncs).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class FrozenImageEncoder(nn.Module):
    """(..., H*W*C) flat channels-last patches -> (..., features) fixed random conv features.

    Args:
        shape: (H, W, C) of one patch.
        channels: output channels of the conv layers (3x3, padding 1, ReLU).
        features: output width (a fixed random projection of the flattened conv maps).
        seed: seed of the weights.
    """

    def __init__(
        self, shape: tuple[int, int, int], channels: tuple[int, ...], features: int, seed: int
    ) -> None:
        super().__init__()
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"image shape must be (H, W, C) with positive sides, got {shape}")
        if not channels or min(channels) < 1 or features < 1:
            raise ValueError(
                f"image encoder needs >= 1 conv layer of >= 1 channel and features >= 1, "
                f"got channels={list(channels)}, features={features}"
            )
        self.shape = tuple(int(s) for s in shape)
        self.features = int(features)
        gen = torch.Generator().manual_seed(int(seed))
        height, width, c_in = self.shape
        self.n_convs = len(channels)
        for i, c_out in enumerate(channels):
            std = math.sqrt(2.0 / (c_in * 9))  # He init: ReLU maps keep their scale
            self.register_buffer(f"conv{i}", torch.randn(c_out, c_in, 3, 3, generator=gen) * std)
            c_in = c_out
        flat = c_in * height * width
        self.register_buffer("proj", torch.randn(flat, features, generator=gen) / math.sqrt(flat))

    @property
    def in_dim(self) -> int:
        """Flat size of one patch (H * W * C)."""
        return self.shape[0] * self.shape[1] * self.shape[2]

    @torch.no_grad()
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """(..., H*W*C) patches, row-major over (H, W, C) -> (..., features); no autograd graph."""
        if image.shape[-1] != self.in_dim:
            raise ValueError(
                f"image patches must have H*W*C = {self.in_dim} values for shape {self.shape}, "
                f"got a last dimension of {image.shape[-1]}"
            )
        lead = image.shape[:-1]
        x = image.reshape(-1, *self.shape).permute(0, 3, 1, 2).float()  # (N, C, H, W)
        for i in range(self.n_convs):
            x = F.relu(F.conv2d(x, getattr(self, f"conv{i}"), padding=1))
        return (x.flatten(1) @ self.proj).reshape(*lead, self.features)  # (..., features)
