"""The probes measure what the theory chapters say they measure."""

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
