"""The probes measure what the theory chapters say they measure."""

import pytest
import torch

import normlab
from normlab import TransformerLM, grad_norms, residual_norms


def test_pre_ln_residual_stream_grows_linearly_and_post_ln_stays_put():
    """Xiong et al. Lemma 2: (1 + l/2) d <= E||x_l||^2 <= (1 + 3l/2) d for pre-LN at Xavier init."""
    torch.manual_seed(0)
    idx = torch.randint(0, 256, (8, 32))
    pre = residual_norms(TransformerLM(256, 64, 4, 8, norm="pre", init="xavier"), idx)
    post = residual_norms(TransformerLM(256, 64, 4, 8, norm="post", init="xavier"), idx)
    layers = torch.arange(9, dtype=torch.float32)
    slope = float(torch.linalg.lstsq(torch.stack([torch.ones(9), layers], 1), pre[:, None]).solution[1])
    assert 0.5 <= slope <= 1.5
    assert abs(float(pre[0]) - 1.0) < 0.15  # x_0 starts at unit variance per coordinate
    assert (post[1:] - 1.0).abs().max() < 0.05  # LN output with gamma = 1: unit variance


def test_grad_norms_has_one_value_per_layer_and_leaves_no_grads_behind():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 3)
    x = torch.randint(0, 256, (2, 8))
    g = grad_norms(model, x, x)
    assert g.shape == (3,) and (g > 0).all()
    assert all(p.grad is None for p in model.parameters())


def test_model_update_is_zero_for_the_same_model():
    model = TransformerLM(256, 32, 4, 2)
    x = torch.randint(0, 256, (2, 8))
    assert normlab.model_update(model, model, x) == 0.0


def test_max_activations_finds_a_planted_massive_activation():
    torch.manual_seed(0)
    model = normlab.TransformerLM(256, 32, 4, 3, max_seq_len=16)
    idx = torch.randint(0, 256, (2, 16))
    plain = normlab.probes.max_activations(model, idx)
    assert plain["max"].shape == (4,) and bool((plain["ratio"] > 1).all())

    def plant(module, args, out):  # one huge value at token 5, channel 7, after block 1
        out = out.clone()
        out[1, 5, 7] = 1e4
        return out

    hook = model.blocks[1].register_forward_hook(plant)
    try:
        stats = normlab.probes.max_activations(model, idx)
    finally:
        hook.remove()
    assert float(stats["max"][2]) == 1e4 and int(stats["position"][2]) == 5 and int(stats["channel"][2]) == 7
    assert float(stats["ratio"][2]) > 1e3 and float(stats["ratio"][1]) < 1e2  # x_2 only; x_1 untouched


def test_ffn_gradient_factors_split_normformers_statistic_and_measure_the_step():
    """mean |dL/dW_2| is the training loop's statistic; the FFN LN gives W_2 a unit-scale input;
    the weights' movement is reported from the second call on, and the model's .grad is untouched."""
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 3, norm="normformer", init="xavier", max_seq_len=16)
    x = torch.randint(0, 256, (4, 16))
    first = normlab.probes.ffn_gradient_factors(model, x, x)
    assert all(p.grad is None for p in model.parameters())
    assert set(first) == {"h_rms", "delta_rms", "grad_w1", "grad_w2", "grad_block", "grad_stream"}
    assert all(len(v) == 3 and min(v) > 0 for v in first.values())
    torch.testing.assert_close(torch.tensor(first["grad_w2"]), grad_norms(model, x, x, stat="l1_mean"))
    torch.testing.assert_close(torch.tensor(first["h_rms"]), torch.ones(3), atol=1e-3, rtol=0)
    unmoved = normlab.probes.ffn_gradient_factors(model, x, x)
    assert unmoved["update_w2"] == [0.0] * 3 and unmoved["update_block"] == [0.0] * 3
    with torch.no_grad():
        model.blocks[1].mlp.fc2.weight.mul_(1.1)  # W_2 of block 1 moves by a tenth of its size
    moved = normlab.probes.ffn_gradient_factors(model, x, x)
    assert moved["update_w2"][1] == pytest.approx(0.1, rel=1e-4) and moved["update_w2"][0] == 0.0
    assert 0 < moved["update_block"][1] < 0.1 and moved["update_block"][2] == 0.0


def test_position_similarity_is_one_for_identical_positions_and_near_zero_for_random_ones():
    torch.manual_seed(0)
    same = torch.randn(3, 1, 64).expand(3, 16, 64)
    assert normlab.probes.position_similarity(same) == pytest.approx(1.0, abs=1e-6)
    # adding a constant to every channel of a position changes nothing: channel means are removed
    shifted = same + torch.arange(16.0)[None, :, None]
    assert normlab.probes.position_similarity(shifted) == pytest.approx(1.0, abs=1e-6)
    assert abs(normlab.probes.position_similarity(torch.randn(4, 16, 256))) < 0.02
