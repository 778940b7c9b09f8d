"""The closed-form norm Jacobians are exact, and LayerNorm's null space is span{1, z}."""

import pytest
import torch
from torch.func import jacrev, vmap

from normlab import layernorm_jacobian, rmsnorm_jacobian


def _layernorm(x, weight, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight=weight, eps=eps)


def _rmsnorm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@pytest.mark.parametrize("eps", [0.0, 1e-5])
@pytest.mark.parametrize("d", [4, 64])
def test_layernorm_jacobian_matches_autograd(d, eps):
    torch.manual_seed(0)
    x = torch.randn(3, 5, d, dtype=torch.float64) * 2 + 0.7  # a nonzero mean, where the seed's form is off
    w = torch.rand(d, dtype=torch.float64) + 0.5
    auto = vmap(vmap(jacrev(lambda v: _layernorm(v, w, eps))))(x)
    assert (layernorm_jacobian(x, w, eps) - auto).abs().max() < 1e-10


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_rmsnorm_jacobian_matches_autograd(eps):
    torch.manual_seed(0)
    x = torch.randn(4, 32, dtype=torch.float64)
    w = torch.rand(32, dtype=torch.float64) + 0.5
    auto = vmap(jacrev(lambda v: _rmsnorm(v, w, eps)))(x)
    assert (rmsnorm_jacobian(x, w, eps) - auto).abs().max() < 1e-10


def test_layernorm_null_space_is_ones_and_z():
    torch.manual_seed(0)
    x = torch.randn(16, dtype=torch.float64) + 3.0
    j = layernorm_jacobian(x, eps=0.0)
    z = (x - x.mean()) / x.std(unbiased=False)
    assert (j @ torch.ones(16, dtype=torch.float64)).abs().max() < 1e-12
    assert (j @ z).abs().max() < 1e-12
    assert torch.linalg.matrix_rank(j) == 16 - 2


def test_rmsnorm_null_space_is_x():
    x = torch.randn(16, dtype=torch.float64)
    j = rmsnorm_jacobian(x, eps=0.0)
    assert (j @ x).abs().max() < 1e-12
    assert torch.linalg.matrix_rank(j) == 16 - 1


def test_torchs_rmsnorm_gives_normlabs_numbers_forward_and_backward():
    # "rms" uses torch.nn.RMSNorm where this torch has it (2.4 and later), normlab's RMSNorm elsewhere.
    from torch import nn

    from normlab.norms import TORCH_RMS_NORM, RMSNorm, make_norm

    if TORCH_RMS_NORM is None:
        pytest.skip("this torch has no nn.RMSNorm")
    assert type(make_norm("rms", 64, 1e-5, True)) is nn.RMSNorm
    torch.manual_seed(0)
    x = torch.randn(4, 16, 64, requires_grad=True)
    ours, theirs = RMSNorm(64, eps=1e-5), nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        theirs.weight.copy_(ours.weight)
    torch.testing.assert_close(theirs(x), ours(x), rtol=0, atol=0)
    g_ours, g_theirs = (torch.autograd.grad(m(x).pow(2).sum(), (x, m.weight)) for m in (ours, theirs))
    for a, b in zip(g_theirs, g_ours):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
