"""normlab's post-LN and pre-LN blocks are PyTorch's own TransformerEncoderLayer, weight for weight."""

import itertools

import pytest
import torch
from torch import nn

import normlab
from normlab.interop import block_from_torch

D, H, FF = 32, 4, 64


@pytest.fixture(autouse=True)
def _no_fastpath():
    # The fused "fastpath" kernel skips the Python code path we compare against.
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(True)


CASES = list(itertools.product([False, True], ["relu", "gelu"], [True, False], [1e-5, 1e-6], [False, True]))


@pytest.mark.parametrize("norm_first,activation,bias,eps,causal", CASES)
def test_block_equals_torch_encoder_layer(norm_first, activation, bias, eps, causal, randomise_norms):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=activation, layer_norm_eps=eps,
        batch_first=True, norm_first=norm_first, bias=bias,
    )  # fmt: skip
    randomise_norms(ref)
    block = block_from_torch(ref, causal=causal)
    assert block.placement == normlab.VARIANTS["pre" if norm_first else "post"]
    x = torch.randn(3, 10, D)
    x_ref, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    mask = nn.Transformer.generate_square_subsequent_mask(10) if causal else None
    y_ref = ref(x_ref, src_mask=mask, is_causal=causal)
    y_ours = block(x_ours)
    torch.testing.assert_close(y_ours, y_ref, rtol=0, atol=0)  # bit for bit, on the CPU
    g = torch.randn_like(y_ref)
    y_ref.backward(g)
    y_ours.backward(g)
    torch.testing.assert_close(x_ours.grad, x_ref.grad, rtol=0, atol=1e-5)
    torch.testing.assert_close(block.mlp.fc1.weight.grad, ref.linear1.weight.grad, rtol=0, atol=1e-5)
    torch.testing.assert_close(block.attn.qkv.weight.grad, ref.self_attn.in_proj_weight.grad, rtol=0, atol=1e-5)


def test_swapped_norms_would_be_caught(randomise_norms):
    """The randomised norms make the comparison sensitive to which LN is which."""
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=True)
    randomise_norms(ref)
    block = block_from_torch(ref)
    with torch.no_grad():
        block.attn_in.weight.copy_(ref.norm2.weight)
        block.ffn_in.weight.copy_(ref.norm1.weight)
    x = torch.randn(2, 6, D)
    assert not torch.allclose(block(x), ref(x), atol=1e-3)


def test_pre_ln_stack_with_final_norm_equals_torch_encoder(randomise_norms):
    torch.manual_seed(0)
    n_layers = 4
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=True)
    ref = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(D), enable_nested_tensor=False)
    for r in ref.layers:
        randomise_norms(r)
    blocks = [block_from_torch(r) for r in ref.layers]
    final = nn.LayerNorm(D)
    randomise_norms(ref.norm)
    final.load_state_dict(ref.norm.state_dict())
    x = torch.randn(2, 7, D)
    y = x
    for b in blocks:
        y = b(y)
    torch.testing.assert_close(final(y), ref(x), rtol=0, atol=0)
