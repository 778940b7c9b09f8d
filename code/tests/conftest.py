"""Shared test helpers."""

from typing import Callable

import pytest
import torch
from torch import nn

import normlab


def _randomise_norms(module: nn.Module) -> None:
    # gamma = 1, beta = 0 would let a block that swaps or drops a norm pass a comparison.
    for m in module.modules():
        if isinstance(m, (nn.LayerNorm, *normlab.norms.RMS_NORMS)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.uniform_(-0.5, 0.5)


@pytest.fixture
def randomise_norms() -> Callable[[nn.Module], None]:
    """Give every LayerNorm/RMSNorm in a module random gains (and biases)."""
    return _randomise_norms
