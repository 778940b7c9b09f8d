"""Each variant is what its paper says, and differs from its neighbours only where it should."""

import dataclasses
import math

import pytest
import torch
from torch import nn

import normlab
from normlab import VARIANTS, Block, Branch, Placement, Shortcut, TransformerLM, Wrap, deepnorm_coefficients

D, H = 32, 4


def _same_weights(src: nn.Module, dst: nn.Module) -> None:
    """Copy every parameter ``dst`` shares by name with ``src`` (extra slots keep their init)."""
    dst.load_state_dict(src.state_dict(), strict=False)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("qk_norm", [False, True])
def test_every_variant_runs_forward_and_backward(variant, qk_norm):
    torch.manual_seed(0)
    model = TransformerLM(256, 64, 4, 6, norm=variant, qk_norm=qk_norm)
    idx = torch.randint(0, 256, (2, 16))
    logits = model(idx)
    assert logits.shape == (2, 16, 256)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_final_norm_exactly_when_the_trunk_is_never_normed():
    for v in VARIANTS:
        has_final = not isinstance(TransformerLM(256, 32, 4, 2, norm=v).final_norm, nn.Identity)
        assert has_final == (v in {"pre", "sandwich", "normformer", "reordered"}), v


def both(**fields) -> Placement:
    """Both sub-layers wrapped alike."""
    return Placement.same(Wrap(**fields))


def test_variants_differ_in_their_telltale_fields_only():
    assert both(norm_trunk=True) == VARIANTS["post"] and both(norm_in=True) == VARIANTS["pre"]
    assert both(norm_trunk=True, shortcut=Shortcut.ALPHA) == VARIANTS["deepnorm"]  # post-LN + alpha
    assert both(norm_in=True, norm_out=True) == VARIANTS["sandwich"]  # pre-LN + output norms
    assert both(norm_out=True) == VARIANTS["reordered"]  # sandwich without its input norms
    assert both(norm_trunk=True, shortcut=Shortcut.OMEGA) == VARIANTS["admin"]  # post-LN + omega
    nf = VARIANTS["normformer"]
    assert nf.ffn == VARIANTS["pre"].ffn and nf.attn == VARIANTS["sandwich"].attn  # plus what sits inside
    assert (nf.head_scale, nf.ffn_mid_norm) == ("before_o", True)


def test_deepnorm_with_alpha_and_beta_one_is_post_ln(randomise_norms):
    torch.manual_seed(0)
    post = Block(D, H, norm="post", init="xavier")
    torch.manual_seed(0)
    deep = Block(D, H, norm="deepnorm", init="xavier", deepnorm_alpha=1.0, deepnorm_beta=1.0)
    for (n1, p1), (n2, p2) in zip(post.named_parameters(), deep.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1  # same init, draw for draw
    randomise_norms(post)
    _same_weights(post, deep)
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(deep(x), post(x), rtol=0, atol=0)


def test_deepnorm_scales_the_shortcut_not_the_branch(randomise_norms):
    """x <- LN(alpha * x + G(x)); an implementation computing LN(x + alpha * G(x)) fails here."""
    torch.manual_seed(0)
    block = Block(D, H, norm="deepnorm", n_layers=6)
    randomise_norms(block)
    alpha = deepnorm_coefficients(decoder_layers=6)[1].alpha
    x = torch.randn(2, 8, D)
    h = block.attn_trunk(alpha * x + block.attn(x))
    expected = block.ffn_trunk(alpha * h + block.mlp(h))
    torch.testing.assert_close(block(x), expected, rtol=0, atol=1e-6)
    h_wrong = block.attn_trunk(x + alpha * block.attn(x))
    wrong = block.ffn_trunk(h_wrong + alpha * block.mlp(h_wrong))
    assert (block(x) - wrong).abs().max() > 1e-2


def test_deepnorm_init_gains_follow_the_paper():
    """Xavier-normal with gain beta on W_v, W_o, fc1, fc2 and gain 1 on W_q, W_k."""
    torch.manual_seed(0)
    d = 256
    beta = deepnorm_coefficients(decoder_layers=12)[1].beta
    block = Block(d, 8, norm="deepnorm", init="xavier", n_layers=12)
    xavier_std = math.sqrt(2.0 / (d + d))
    a = block.attn
    for name, weight, gain in [("q", a.w_q, 1.0), ("k", a.w_k, 1.0), ("v", a.w_v, beta), ("o", a.o.weight, beta)]:
        std = float(weight.detach().std())
        assert std == pytest.approx(gain * xavier_std, rel=0.05), name
    fc1_std = math.sqrt(2.0 / (d + 4 * d))
    assert float(block.mlp.fc1.weight.detach().std()) == pytest.approx(beta * fc1_std, rel=0.05)
    assert float(block.mlp.fc2.weight.detach().std()) == pytest.approx(beta * fc1_std, rel=0.05)


def test_deepnorm_coefficients_match_the_paper_table():
    enc, dec = deepnorm_coefficients(encoder_layers=6)
    assert dec is None and enc.alpha == pytest.approx(1.8612, abs=1e-4) and enc.beta == pytest.approx(0.3799, abs=1e-4)
    enc, dec = deepnorm_coefficients(decoder_layers=6)
    assert enc is None and dec == pytest.approx((12**0.25, 48**-0.25))
    enc, dec = deepnorm_coefficients(encoder_layers=6, decoder_layers=6)
    assert enc.alpha == pytest.approx(1.4179, abs=1e-4) and enc.beta == pytest.approx(0.4970, abs=1e-4)
    assert dec.alpha == pytest.approx(2.0598, abs=1e-4) and dec.beta == pytest.approx(0.3433, abs=1e-4)
    # GLM-130B's DeepNorm (2210.02414) is alpha = (2N)^(1/2): not the DeepNet table, so not here.
    with pytest.raises(ValueError):
        deepnorm_coefficients()


def test_sandwich_without_its_output_norms_is_pre_ln(randomise_norms):
    torch.manual_seed(0)
    sandwich = Block(D, H, norm="sandwich")
    randomise_norms(sandwich)
    bare = Block(D, H, norm=both(norm_in=True))
    pre = Block(D, H, norm="pre")
    _same_weights(sandwich, bare)
    _same_weights(sandwich, pre)
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(bare(x), pre(x), rtol=0, atol=0)
    assert (sandwich(x) - pre(x)).abs().max() > 1e-2  # the output norms do change the block


def test_normformer_with_its_additions_switched_off_is_pre_ln(randomise_norms):
    torch.manual_seed(0)
    nf = Block(D, H, norm="normformer")
    randomise_norms(nf)
    with torch.no_grad():
        nf.attn.head_scale.weight.uniform_(0.5, 1.5)
    nf_p = VARIANTS["normformer"]
    attn = dataclasses.replace(nf_p.attn, norm_out=False)
    off = dataclasses.replace(nf_p, attn=attn, head_scale=None, ffn_mid_norm=False)
    assert off == VARIANTS["pre"]
    pre = Block(D, H, norm="pre")
    _same_weights(nf, pre)
    x = torch.randn(2, 8, D)
    # Undo the three additions by hand on the NormFormer block: the result must be pre-LN.
    nf.attn_out, nf.attn.head_scale, nf.mlp.mid_norm = nn.Identity(), nn.Identity(), nn.Identity()
    torch.testing.assert_close(nf(x), pre(x), rtol=0, atol=0)


def test_normformer_head_scale_acts_before_the_output_projection():
    """Scaling head h by g must equal scaling W_o's columns for head h by g (not its rows)."""
    torch.manual_seed(0)
    nf = Block(D, H, norm="normformer")
    gains = torch.tensor([0.5, 2.0, 1.0, 3.0])
    x = torch.randn(2, 8, D)
    with torch.no_grad():
        nf.attn.head_scale.weight.copy_(gains)
    scaled = nf.attn(x)
    with torch.no_grad():
        nf.attn.head_scale.weight.fill_(1.0)
        nf.attn.o.weight.mul_(gains.repeat_interleave(D // H)[None, :])
    torch.testing.assert_close(nf.attn(x), scaled, rtol=1e-5, atol=1e-6)


def test_normformer_parameter_overhead_is_2d_plus_2dff_plus_h_per_layer():
    d, h, ff = 64, 4, 256
    count = lambda v: sum(p.numel() for p in Block(d, h, norm=v, d_ff=ff).parameters())  # noqa: E731
    assert count("normformer") - count("pre") == 2 * d + 2 * ff + h


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("qk", [True, "full", "l2"])
def test_qk_norm_makes_attention_invariant_to_the_scale_of_wq_and_wk(variant, kind, qk):
    torch.manual_seed(0)
    block = Block(D, H, norm=variant, qk_norm=qk, norm_kind=kind, eps=1e-8)
    x = torch.randn(2, 8, D)
    before = block(x)
    with torch.no_grad():
        block.attn.qkv.weight[: 2 * D].mul_(3.0)  # W_q and W_k, with their biases
        block.attn.qkv.bias[: 2 * D].mul_(3.0)
    torch.testing.assert_close(block(x), before, rtol=1e-4, atol=1e-5)


def test_without_qk_norm_scaling_wq_changes_the_output():
    torch.manual_seed(0)
    block = Block(D, H, norm="pre", qk_norm=False)
    x = torch.randn(2, 8, D)
    before = block(x)
    with torch.no_grad():
        block.attn.w_q.mul_(30.0)
    assert (block(x) - before).abs().max() > 1e-3


def test_rms_variant_uses_rmsnorm_everywhere():
    model = TransformerLM(256, 32, 4, 2, norm="sandwich", norm_kind="rms", qk_norm=True)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())


def test_attention_recording_path_matches_sdpa():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 3, norm="pre")
    idx = torch.randint(0, 256, (2, 12))
    fast = model(idx)
    stats = normlab.attention_stats(model, idx)
    assert stats["max_logit"].shape == (3,) and (stats["entropy"] > 0).all()
    normlab.probes.record_attention_logits(model, True)
    torch.testing.assert_close(model(idx), fast, rtol=1e-5, atol=1e-5)
    normlab.probes.record_attention_logits(model, False)


def test_causal_attention_ignores_the_future():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 2)
    idx = torch.randint(0, 256, (1, 10))
    changed = idx.clone()
    changed[0, 7:] = (changed[0, 7:] + 1) % 256
    torch.testing.assert_close(model(idx)[0, :7], model(changed)[0, :7])


def test_reordered_without_its_output_norms_is_the_block_with_no_norm(randomise_norms):
    """OLMo 2's x + Norm(F(x)): take its output norms away and nothing normalises the block."""
    torch.manual_seed(0)
    reordered = Block(D, H, norm="reordered")
    randomise_norms(reordered)
    bare = Block(D, H, norm=both())
    assert bare.placement == Placement.same(Wrap())  # every slot empty
    assert not any(isinstance(m, (nn.LayerNorm, *normlab.norms.RMS_NORMS)) for m in bare.modules())
    _same_weights(reordered, bare)
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(bare(x), x + bare.attn(x) + bare.mlp(x + bare.attn(x)), rtol=0, atol=1e-6)
    h = x + reordered.attn_out(reordered.attn(x))
    torch.testing.assert_close(reordered(x), h + reordered.ffn_out(reordered.mlp(h)), rtol=0, atol=1e-6)


def test_the_labml_bug_scales_the_branch_and_is_a_different_block(randomise_norms):
    """labml's DeepNorm (their issue #145) computes LN(x + alpha * G(x)): one field away from DeepNorm."""
    buggy_placement = Placement.same(Wrap(norm_trunk=True), branch=Branch.ALPHA)
    torch.manual_seed(0)
    buggy = Block(D, H, norm=buggy_placement, init="xavier", n_layers=6)
    torch.manual_seed(0)
    deep = Block(D, H, norm="deepnorm", init="xavier", n_layers=6)
    for (n1, p1), (n2, p2) in zip(buggy.named_parameters(), deep.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1  # the same beta-scaled init
    randomise_norms(buggy)
    alpha = deepnorm_coefficients(decoder_layers=6)[1].alpha
    x = torch.randn(2, 8, D)
    h = buggy.attn_trunk(x + alpha * buggy.attn(x))
    torch.testing.assert_close(buggy(x), buggy.ffn_trunk(h + alpha * buggy.mlp(h)), rtol=0, atol=1e-5)


def test_chatglm_shortcut_carries_the_normed_input_scaled_by_alpha(randomise_norms):
    """ChatGLM-6B's GLMBlock: h = alpha * LN(x) + Attn(LN(x)), with alpha = (2N)^(1/2)."""
    glm = both(norm_in=True, shortcut=Shortcut.ALPHA, shortcut_normed=True)
    n = 4
    torch.manual_seed(0)
    block = Block(D, H, norm=glm, n_layers=n, deepnorm_alpha=math.sqrt(2 * n), deepnorm_beta=1.0)
    randomise_norms(block)
    assert block.attn_skip is block.attn_in  # one norm, read by both the shortcut and the branch
    x = torch.randn(2, 8, D)
    a = block.attn_in(x)
    h = math.sqrt(2 * n) * a + block.attn(a)
    f = block.ffn_in(h)
    torch.testing.assert_close(block(x), math.sqrt(2 * n) * f + block.mlp(f), rtol=0, atol=1e-5)


def test_gemma_rmsnorm_is_rmsnorm_with_gain_one_plus_weight():
    torch.manual_seed(0)
    x = torch.randn(3, 5, D)
    gemma, plain = normlab.RMSNorm(D, unit_offset=True), normlab.RMSNorm(D)
    assert torch.equal(gemma.weight, torch.zeros(D))  # Gemma initialises the weight at 0 ...
    torch.testing.assert_close(gemma(x), plain(x), rtol=0, atol=0)  # ... so the gain starts at 1
    with torch.no_grad():
        gemma.weight.fill_(1.0)  # the porting bug: a weight initialised like an ordinary RMSNorm's
    torch.testing.assert_close(gemma(x), 2 * plain(x), rtol=0, atol=0)
    model = TransformerLM(256, D, H, 2, norm="sandwich", norm_kind="gemma_rms")
    norms = [m for m in model.modules() if isinstance(m, normlab.norms.RMS_NORMS)]
    assert len(norms) == 2 * 4 + 1 and all(m.offset == 1.0 for m in norms)


def test_qk_norm_true_is_the_per_head_kind():
    torch.manual_seed(0)
    a = Block(D, H, qk_norm=True)
    torch.manual_seed(0)
    b = Block(D, H, qk_norm="head")
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)
    assert isinstance(a.attn.q_norm, nn.LayerNorm) and a.attn.q_norm.normalized_shape == (D // H,)


def test_full_qk_norm_normalises_across_heads_and_per_head_does_not():
    """OLMo 2 normalises the whole projection: scaling one head's W_q changes the other heads' q."""
    x = torch.randn(2, 8, D)
    changed = {}
    for qk in ("head", "full"):
        torch.manual_seed(0)
        block = Block(D, H, norm="pre", qk_norm=qk, eps=1e-8, bias=False)
        before = block(x)
        with torch.no_grad():
            block.attn.w_q[: D // H].mul_(5.0)  # head 0's rows of W_q only
        changed[qk] = float((block(x) - before).abs().max().detach())
    assert changed["head"] < 1e-5 and changed["full"] > 1e-3
    assert Block(D, H, qk_norm="full").attn.q_proj_norm.normalized_shape == (D,)


def test_l2_qk_norm_bounds_every_logit_by_the_learned_scale():
    """Henry et al.: unit q and k make |q.k| <= 1, so the logit g q.k is at most g in size."""
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 2, qk_norm="l2")
    g = math.sqrt(D // H)
    assert all(float(b.attn.q_scale.weight.detach()) == pytest.approx(g) for b in model.blocks)
    with torch.no_grad():
        for b in model.blocks:
            b.attn.w_q.mul_(100.0)  # would make ordinary attention's logits huge
    stats = normlab.attention_stats(model, torch.randint(0, 256, (2, 16)))
    assert bool((stats["max_logit"] <= g * (1 + 1e-5)).all())


def test_normformer_resid_scale_multiplies_the_ffn_shortcut_only(randomise_norms):
    """--scale-resids: x <- lambda * x + FFN(LN(x)) in the FFN sub-layer; lambda = 1 at init."""
    nf = VARIANTS["normformer"]
    nf_plus = dataclasses.replace(nf, ffn=dataclasses.replace(nf.ffn, shortcut=Shortcut.LAMBDA))
    torch.manual_seed(0)
    block = Block(D, H, norm=nf_plus)
    torch.manual_seed(0)
    plain = Block(D, H, norm="normformer")
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(block(x), plain(x), rtol=0, atol=0)  # lambda = 1: the same block
    randomise_norms(block)
    lam = torch.rand(D) + 0.5
    with torch.no_grad():
        block.ffn_shortcut[1].weight.copy_(lam)
    h = block.attn_sublayer(x)
    torch.testing.assert_close(block(x), lam * h + block.mlp(block.ffn_in(h)), rtol=0, atol=1e-6)
    extra = sum(p.numel() for p in block.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == D


def test_head_scale_before_or_after_w_o_are_two_reparametrisations_of_w_o():
    """The paper scales head h's output before W_o (= W_o's columns of head h); fairseq scales the
    h-th chunk of W_o's output (= W_o's rows and bias of chunk h). Fold each into W_o: same outputs."""
    gains = torch.tensor([0.5, 2.0, 1.0, 3.0]).repeat_interleave(D // H)
    x = torch.randn(2, 8, D)
    fairseq = dataclasses.replace(VARIANTS["normformer"], head_scale="after_o")
    for placement, fold in ((VARIANTS["normformer"], "columns"), (fairseq, "rows")):
        torch.manual_seed(0)
        block = Block(D, H, norm=placement)
        scale = block.attn.head_scale_out if fold == "rows" else block.attn.head_scale
        with torch.no_grad():
            scale.weight.copy_(gains[:: D // H])
        scaled = block.attn(x)
        with torch.no_grad():
            scale.weight.fill_(1.0)
            if fold == "rows":
                block.attn.o.weight.mul_(gains[:, None])
                block.attn.o.bias.mul_(gains)
            else:
                block.attn.o.weight.mul_(gains[None, :])
        torch.testing.assert_close(block.attn(x), scaled, rtol=1e-5, atol=1e-6)
