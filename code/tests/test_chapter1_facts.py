"""Facts chapter 1 states that hold by construction: they are unit tests of the package, not findings.

The chapter measures what is left of them once LayerNorm's gains and biases are no longer 1 and 0.
"""

import pytest
import torch
from torch import nn

import normlab

EPS = 1e-5


def _post_ln_model(init: str, seed: int = 0, n_layers: int = 4, d_model: int = 32) -> normlab.TransformerLM:
    torch.manual_seed(seed)
    model = normlab.TransformerLM(normlab.VOCAB_SIZE, d_model, 4, n_layers, norm="post", init=init, eps=EPS)
    return model.double().eval()


def _trunk_norms_in_and_out(model: normlab.TransformerLM, idx: torch.Tensor) -> list:
    """(LayerNorm, its input, its output) for every trunk LayerNorm, in call order."""
    seen = []
    norms = [n for b in model.blocks for n in (b.attn_trunk, b.ffn_trunk)]
    hooks = [n.register_forward_hook(lambda m, args, out: seen.append((m, args[0], out))) for n in norms]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return seen


def _tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(normlab.VOCAB_SIZE, (4, 16), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("init", ["xavier", "gpt2"])
def test_post_ln_block_outputs_have_per_token_mean_0_and_variance_1_when_gamma_is_1_and_beta_is_0(init):
    # "Variance 1" up to the shortfall eps / (var_in + eps), var_in the variance of the norm's input.
    model = _post_ln_model(init)
    idx = _tokens()
    stream = normlab.probes.residual_stream(model, idx)[1:]  # block outputs x_1 .. x_L
    block_out_norms = _trunk_norms_in_and_out(model, idx)[1::2]  # each block's second trunk norm
    assert len(stream) == len(block_out_norms) == len(model.blocks)
    for x_l, (_, norm_in, norm_out) in zip(stream, block_out_norms):
        assert torch.equal(x_l, norm_out)
        var_in = norm_in.var(-1, unbiased=False)
        torch.testing.assert_close(x_l.mean(-1), torch.zeros_like(var_in), rtol=0, atol=1e-12)
        torch.testing.assert_close(x_l.var(-1, unbiased=False), var_in / (var_in + EPS), rtol=1e-12, atol=0)
        assert (1 - x_l.var(-1, unbiased=False)).max() < 1e-4


def test_with_any_gain_and_bias_a_post_ln_block_output_is_gamma_times_a_standardised_vector_plus_beta(
    randomise_norms,
):
    model = _post_ln_model("xavier")
    randomise_norms(model)
    for norm, norm_in, norm_out in _trunk_norms_in_and_out(model, _tokens(1)):
        z = (norm_out - norm.bias) / norm.weight
        var_in = norm_in.var(-1, unbiased=False)
        torch.testing.assert_close(z.mean(-1), torch.zeros_like(var_in), rtol=0, atol=1e-12)
        torch.testing.assert_close(z.var(-1, unbiased=False), var_in / (var_in + EPS), rtol=1e-10, atol=0)
        # ... while the output itself is no longer standardised per token.
        assert (norm_out.var(-1, unbiased=False) - 1).abs().max() > 0.05


@pytest.mark.parametrize("var", [1e-8, 1e-5, 1e-3, 1.0, 1e3])
def test_layer_norm_output_variance_falls_short_of_1_by_eps_over_var_plus_eps(var):
    e = torch.randn(8, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = 3.0 + var**0.5 * (e - e.mean(-1, keepdim=True)) / e.std(-1, unbiased=False, keepdim=True)
    var_in = x.var(-1, unbiased=False)
    var_out = nn.LayerNorm(64, eps=EPS, dtype=torch.float64)(x).var(-1, unbiased=False).detach()
    torch.testing.assert_close(1 - var_out, EPS / (var_in + EPS), rtol=1e-6, atol=0)
