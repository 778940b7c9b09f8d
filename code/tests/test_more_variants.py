"""The placements beyond the seed (ReZero, Admin, Mix-LN, LayerNorm Scaling) and the DyT norm kind
are what their papers say, fill the same `Block`, train, and draw."""

import dataclasses
import math
import warnings

import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

import normlab
from normlab import (
    LAYERWISE,
    NORM_KINDS,
    VARIANTS,
    Block,
    DyT,
    Placement,
    RMSNorm,
    TrainConfig,
    TransformerLM,
    Wrap,
    admin_init,
    data_init_,
    layernorm_scaling,
    mix_ln,
    plot,
    run,
)
from normlab.batched import batchable, train_batched
from normlab.results import run_many

D, H = 32, 4
NEW = ("rezero", "admin", "mixln", "lnscaled")
NORMS = (nn.LayerNorm, *normlab.norms.RMS_NORMS, DyT)
KIND_CLASS = {"layer": nn.LayerNorm, "rms": normlab.norms.RMS_NORMS[-1], "gemma_rms": RMSNorm, "dyt": DyT}


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


def norms_of(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, NORMS)]


def randomise(module: nn.Module) -> None:
    # Unit gains and zero biases would let a model that drops or moves a norm pass a comparison.
    with torch.no_grad():
        for m in norms_of(module):
            m.weight.uniform_(0.5, 1.5)
            if isinstance(getattr(m, "bias", None), nn.Parameter):
                m.bias.uniform_(-0.5, 0.5)


# --- every norm kind in every slot ------------------------------------------------------------


@pytest.mark.parametrize("kind", NORM_KINDS)
@pytest.mark.parametrize("variant", [*VARIANTS, *LAYERWISE])
@pytest.mark.parametrize("qk_norm", [False, True, "full"])
def test_every_norm_of_every_variant_is_of_the_chosen_kind(kind, variant, qk_norm):
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 4, norm=variant, norm_kind=kind, qk_norm=qk_norm)
    reference = TransformerLM(256, D, H, 4, norm=variant, norm_kind="layer", qk_norm=qk_norm)
    norms = norms_of(model)
    assert len(norms) == len(norms_of(reference))  # the same slots filled, none left a LayerNorm
    assert all(type(m) is KIND_CLASS[kind] for m in norms), variant
    if kind == "gemma_rms":
        assert all(m.offset == 1.0 for m in norms)  # the gain is 1 + weight
    if variant == "rezero" and not qk_norm:
        assert norms == []  # ReZero's own blocks have none


# --- DyT ----------------------------------------------------------------------------------------


def test_dyt_is_gamma_tanh_alpha_x_plus_beta():
    dyt = DyT(D)
    assert dyt.alpha.item() == 0.5 and dyt.alpha.shape == ()  # one learned scalar, the paper's 0.5
    assert torch.equal(dyt.weight, torch.ones(D)) and torch.equal(dyt.bias, torch.zeros(D))
    torch.manual_seed(0)
    with torch.no_grad():
        dyt.alpha.fill_(0.7)
        dyt.weight.uniform_(0.5, 1.5)
        dyt.bias.uniform_(-0.5, 0.5)
    x = 5 * torch.randn(3, 7, D)
    torch.testing.assert_close(dyt(x), dyt.weight * torch.tanh(0.7 * x) + dyt.bias, rtol=0, atol=0)
    with torch.no_grad():  # tanh bounds it, however large x is
        assert float(dyt(x).abs().max()) <= float(dyt.weight.max() + dyt.bias.abs().max())


def test_dyt_without_biases_has_no_beta_to_learn():
    dyt = DyT(D, bias=False)
    assert [n for n, _ in dyt.named_parameters()] == ["alpha", "weight"]
    x = torch.randn(2, D)
    torch.testing.assert_close(dyt(x), torch.tanh(0.5 * x), rtol=0, atol=0)
    model = TransformerLM(256, D, H, 2, norm="normformer", norm_kind="dyt", bias=False)
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())


def test_dyt_takes_the_place_of_normformers_wide_mid_norm_and_of_qk_norm():
    block = Block(D, H, norm="normformer", norm_kind="dyt", qk_norm=True, d_ff=96)
    assert isinstance(block.mlp.mid_norm, DyT) and block.mlp.mid_norm.weight.shape == (96,)
    assert isinstance(block.attn.q_norm, DyT) and block.attn.q_norm.weight.shape == (D // H,)
    full = Block(D, H, norm_kind="dyt", qk_norm="full")
    assert isinstance(full.attn.k_proj_norm, DyT) and full.attn.k_proj_norm.weight.shape == (D,)


# --- ReZero -------------------------------------------------------------------------------------


def test_rezero_at_init_every_block_is_the_identity():
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 4, norm="rezero")
    x = torch.randn(2, 8, D)
    for block in model.blocks:
        assert block.branch[-1].weight.item() == 0.0 and block.branch[-1].weight.shape == ()
        torch.testing.assert_close(block(x), x, rtol=0, atol=0)


def test_rezero_stack_output_is_the_embeddings_pathway():
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 4, norm="rezero")
    assert norms_of(model) == [] and isinstance(model.final_norm, nn.Identity)  # no norm, final one included
    idx = torch.randint(0, 256, (2, 12))
    torch.testing.assert_close(model.hidden(idx), model.embed(idx), rtol=0, atol=0)
    torch.testing.assert_close(model(idx), model.head(model.embed(idx)), rtol=0, atol=0)


def test_rezero_gates_get_a_gradient_at_init_and_the_branches_inside_them_do_not():
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 4, norm="rezero")
    idx = torch.randint(0, 256, (2, 12))
    loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.roll(-1, 1).flatten())
    loss.backward()
    for block in model.blocks:
        assert float(block.branch[-1].weight.grad.abs()) > 0
        assert all(float(p.grad.abs().max()) == 0.0 for p in block.attn.parameters())  # a = 0 closes them
        assert all(float(p.grad.abs().max()) == 0.0 for p in block.mlp.parameters())


def test_rezero_has_one_gate_per_block_shared_by_its_two_sub_layers():
    count = lambda v: sum(p.numel() for p in Block(D, H, norm=v).parameters())  # noqa: E731
    assert count("rezero") - count(Placement.same(Wrap())) == 1
    block = Block(D, H, norm="rezero")
    with torch.no_grad():
        block.branch[-1].weight.fill_(0.3)
    x = torch.randn(2, 8, D)
    h = x + 0.3 * block.attn(x)
    torch.testing.assert_close(block(x), h + 0.3 * block.mlp(h), rtol=0, atol=1e-6)


# --- Mix-LN -------------------------------------------------------------------------------------


def test_mix_ln_puts_post_ln_in_the_first_quarter_and_pre_ln_after():
    post, pre = VARIANTS["post"], VARIANTS["pre"]
    assert mix_ln(8) == (post,) * 2 + (pre,) * 6
    assert mix_ln(12) == (post,) * 3 + (pre,) * 9  # the paper's 71M model: 3 of 12
    assert mix_ln(3) == (pre,) * 3  # floor(0.75) = 0: too shallow for a post-LN block
    assert mix_ln(4, post_fraction=0.5) == (post, post, pre, pre)
    model = TransformerLM(256, D, H, 8, norm="mixln")
    assert model.placements == mix_ln(8) and model.placement is None


def test_mix_ln_blocks_compute_exactly_post_ln_then_pre_ln_blocks():
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 8, norm="mixln")
    randomise(model)
    x = torch.randn(2, 8, D)
    for i, block in enumerate(model.blocks):
        twin = Block(D, H, norm="post" if i < 2 else "pre", n_layers=8)
        twin.load_state_dict(block.state_dict())  # strict: the same slots, the same names
        torch.testing.assert_close(block(x), twin(x), rtol=0, atol=0)


def test_mix_ln_keeps_the_final_norm_of_its_last_block():
    assert isinstance(TransformerLM(256, D, H, 8, norm="mixln").final_norm, nn.LayerNorm)  # ends in pre-LN
    assert isinstance(TransformerLM(256, D, H, 2, norm=["pre", "post"]).final_norm, nn.Identity)


def test_per_layer_probes_of_a_mix_ln_stack_take_only_the_parameters_every_block_has():
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 4, norm="mixln")  # block 1 post-LN, blocks 2-4 pre-LN
    idx = torch.randint(0, 256, (2, 8))
    assert normlab.grad_norms(model, idx, idx).shape == (4,)  # W^2 of the FFN: in every block
    with pytest.raises(ValueError, match="mlp.fc2.weight"):
        normlab.grad_norms(model, idx, idx, param="attn_in.weight")  # pre-LN blocks only


def test_the_name_mixln_is_its_explicit_sequence():
    idx = torch.randint(0, 256, (2, 8))
    outputs = []
    for norm in ("mixln", mix_ln(8), list(mix_ln(8))):
        torch.manual_seed(0)
        outputs.append(TransformerLM(256, D, H, 8, norm=norm)(idx))
    assert all(torch.equal(outputs[0], y) for y in outputs[1:])


def test_per_block_placements_of_the_wrong_length_or_kind_raise():
    with pytest.raises(ValueError, match="3 placements for n_layers=4: it needs one per block"):
        TransformerLM(256, D, H, 4, norm=mix_ln(3))
    with pytest.raises(ValueError, match="post, pre, sandwich, deepnorm, normformer, reordered"):
        TransformerLM(256, D, H, 2, norm=["pre", "peri"])
    with pytest.raises(ValueError, match="rezero, admin, mixln, lnscaled"):
        TransformerLM(256, D, H, 2, norm="peri")
    with pytest.raises(ValueError, match="pass it to TransformerLM"):
        Block(D, H, norm="mixln")
    with pytest.raises(ValueError, match=r"post_fraction must be a number in \[0, 1\]"):
        mix_ln(8, post_fraction=1.5)
    with pytest.raises(ValueError, match="one of them per block"):
        TransformerLM(256, D, H, 2, norm=3)


# --- LayerNorm Scaling --------------------------------------------------------------------------


def test_layernorm_scaling_divides_block_ls_in_norms_by_sqrt_l():
    scales = [p.in_scale for p in layernorm_scaling(4)]
    assert scales == [1.0, 1 / math.sqrt(2), 1 / math.sqrt(3), 0.5]
    assert all(dataclasses.replace(p, in_scale=None) == VARIANTS["pre"] for p in layernorm_scaling(4))
    assert isinstance(TransformerLM(256, D, H, 4, norm="lnscaled").final_norm, nn.LayerNorm)  # as pre-LN


def test_layernorm_scaling_is_pre_ln_with_in_norm_gains_and_biases_divided_by_sqrt_depth():
    torch.manual_seed(0)
    scaled = TransformerLM(256, D, H, 4, norm="lnscaled")
    randomise(scaled)
    pre = TransformerLM(256, D, H, 4, norm="pre")
    pre.load_state_dict(scaled.state_dict())  # strict: the scale is a constant, not a weight
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(scaled.blocks[0](x), pre.blocks[0](x), rtol=0, atol=0)  # block 1 unchanged
    assert (scaled.blocks[3](x) - pre.blocks[3](x)).abs().max() > 1e-3
    with torch.no_grad():
        for depth, block in enumerate(pre.blocks, start=1):
            for norm in (block.attn_in, block.ffn_in):
                norm.weight.div_(math.sqrt(depth))
                norm.bias.div_(math.sqrt(depth))
    idx = torch.randint(0, 256, (2, 12))
    torch.testing.assert_close(scaled(idx), pre(idx), rtol=1e-5, atol=1e-5)


def test_in_norm_scale_needs_an_in_norm_and_a_positive_number():
    with pytest.raises(ValueError, match="it needs norm_in in both sub-layers"):
        Placement.same(Wrap(norm_trunk=True), in_scale=0.5)
    with pytest.raises(ValueError, match="finite number > 0"):
        Placement.same(Wrap(norm_in=True), in_scale=-1.0)


# --- Admin --------------------------------------------------------------------------------------


def test_admin_with_omega_one_is_post_ln():
    torch.manual_seed(0)
    admin = Block(D, H, norm="admin", init="xavier")
    torch.manual_seed(0)
    post = Block(D, H, norm="post", init="xavier")
    shared = dict(post.named_parameters())
    for name, p in admin.named_parameters():
        assert name in ("attn_shortcut.1.weight", "ffn_shortcut.1.weight") or torch.equal(p, shared[name]), name
    assert admin.attn_shortcut[-1].weight.shape == (D,)  # omega is per channel
    x = torch.randn(2, 8, D)
    torch.testing.assert_close(admin(x), post(x), rtol=0, atol=0)


def test_admin_init_follows_the_authors_recurrence():
    """omega_1 = 1, omega_{i+1} = sqrt(Var[omega_i * x_i] + Var[f_i(x_i)]) over the sub-layers."""
    torch.manual_seed(0)
    model = TransformerLM(256, D, H, 3, norm="admin", init="xavier")
    idx = torch.randint(0, 256, (4, 16))
    omegas = admin_init(model, idx)
    assert len(omegas) == 6 and omegas[0] == 1.0
    var = lambda t: float(t.double().var(unbiased=False))  # noqa: E731
    expected, x = [1.0], model.embed(idx)
    with torch.no_grad():
        for block in model.blocks:
            for f, trunk, omega in ((block.attn, block.attn_trunk, block.attn_shortcut),
                                    (block.mlp, block.ffn_trunk, block.ffn_shortcut)):  # fmt: skip
                torch.testing.assert_close(omega[-1].weight, torch.full((D,), expected[-1]), rtol=1e-5, atol=0)
                branch = f(x)
                expected.append(math.sqrt(var(expected[-1] * x) + var(branch)))
                x = trunk(expected[-2] * x + branch)
    assert omegas == pytest.approx(expected[:-1], rel=1e-5)
    assert all(b > a for a, b in zip(omegas[1:], omegas[2:]))  # each branch adds its variance
    torch.testing.assert_close(model.hidden(idx), x, rtol=1e-5, atol=1e-5)


def test_admin_init_leaves_the_modes_and_asks_for_omegas():
    model = TransformerLM(256, D, H, 2, norm="admin", dropout=0.1).train()
    admin_init(model, torch.randint(0, 256, (2, 8)))
    assert all(m.training for m in model.modules())
    with pytest.raises(ValueError, match="VARIANTS\\['admin'\\]"):
        admin_init(TransformerLM(256, D, H, 2, norm="post"), torch.randint(0, 256, (2, 8)))


def test_a_run_profiles_admins_omega_on_its_first_batch_and_nothing_else(corpus):
    config = TrainConfig(steps=4, batch_size=4, seq_len=16, seed=3)
    torch.manual_seed(0)
    model = TransformerLM(corpus.vocab_size, D, H, 2, norm="admin", init="xavier")
    torch.manual_seed(0)
    twin = TransformerLM(corpus.vocab_size, D, H, 2, norm="admin", init="xavier")
    data_init_(model, corpus, config)
    first, _ = corpus.batch("train", 4, 16, torch.Generator().manual_seed(3))  # the run's own first batch
    admin_init(twin, first)
    assert torch.equal(model.blocks[1].ffn_shortcut[-1].weight, twin.blocks[1].ffn_shortcut[-1].weight)
    assert model.blocks[1].ffn_shortcut[-1].weight[0].item() > 1.0
    post = TransformerLM(corpus.vocab_size, D, H, 2, norm="post")
    before = {k: v.clone() for k, v in post.state_dict().items()}
    data_init_(post, corpus, config)
    assert all(torch.equal(v, before[k]) for k, v in post.state_dict().items())


# --- training: one loop for all -----------------------------------------------------------------

TINY = dict(d_model=16, n_heads=2, n_layers=4, max_seq_len=16)
SHAPE = dict(steps=6, batch_size=4, seq_len=16, eval_every=3, eval_windows=32, log_every=3)
JOBS = [dict(TINY, norm=v) for v in NEW] + [dict(TINY, norm="pre", norm_kind="dyt"), dict(TINY, norm=mix_ln(4))]


def test_every_new_variant_trains_a_few_steps_through_run_many(corpus, tmp_path):
    jobs = [(kw, TrainConfig(**SHAPE, lr=3e-3, seed=i)) for i, kw in enumerate(JOBS)]
    results = run_many(jobs, corpus=corpus, workers=1, store=tmp_path)
    for (kw, _), r in zip(jobs, results):
        assert r.status == "completed" and len(r.losses) == 6, kw
        assert all(math.isfinite(v) for v in r.losses) and [s for s, _ in r.evals] == [3, 6]
        assert r.losses[-1] < r.losses[0], kw
    again = run_many(jobs, corpus=corpus, workers=1, store=tmp_path)  # read back, per-block tuples included
    untimed = lambda rs: [dataclasses.replace(r, seconds=0.0) for r in rs]  # noqa: E731
    assert untimed(again) == untimed(results)


def test_batchable_groups_the_new_variants_like_any_other():
    jobs = [(kw, TrainConfig(**SHAPE, seed=s)) for kw in JOBS for s in (0, 1)]
    assert batchable(jobs) == [[2 * i, 2 * i + 1] for i in range(len(JOBS))]


@pytest.mark.parametrize(
    "model_kwargs",
    [kw for kw in JOBS if isinstance(kw["norm"], str)],  # the tuple job is the "mixln" stack again
    ids=lambda kw: f"{kw['norm']}-{kw.get('norm_kind', 'layer')}",
)
def test_batched_training_of_the_new_variants_matches_their_sequential_runs(corpus, model_kwargs):
    configs = [TrainConfig(**SHAPE, lr=3e-3, seed=s) for s in (0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batched = train_batched(model_kwargs, configs, corpus=corpus)
    for got, config in zip(batched, configs):
        want = run(model_kwargs, config, corpus=corpus)
        assert got.status == want.status == "completed"
        assert got.losses == pytest.approx(want.losses, rel=1e-4)
        assert [v for _, v in got.evals] == pytest.approx([v for _, v in want.evals], rel=1e-4)


# --- plots --------------------------------------------------------------------------------------


def test_the_seed_variants_keep_their_colours_and_every_new_one_has_its_own():
    seed = {"post": "#D55E00", "pre": "#0072B2", "sandwich": "#009E73", "deepnorm": "#CC79A7",
            "normformer": "#E69F00", "reordered": "#56B4E9"}  # fmt: skip
    assert {k: plot.VARIANT_COLORS[k] for k in seed} == seed
    names = [*VARIANTS, *LAYERWISE]
    assert len({plot.color(v) for v in names}) == len(names)
    assert [plot.label(v) for v in NEW] == ["ReZero", "Admin", "Mix-LN", "LayerNorm Scaling"]


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _norms_at(ax) -> set[float]:
    """Where the norm boxes sit: on the trunk (x = 0.12) or on the branch (x = 0.62)."""
    return {round(t.get_position()[0], 2) for t in ax.texts if t.get_text() == "LN"}


def test_draw_block_draws_the_new_slots_from_the_placement():
    fig = Figure()
    for name in [*VARIANTS, *LAYERWISE]:
        plot.draw_block(fig.add_subplot(), name)
    ax = fig.add_subplot()
    plot.draw_block(ax, "admin")
    assert "ω⊙x +" in _texts(ax) and "LN" in _texts(ax)
    ax = fig.add_subplot()
    plot.draw_block(ax, "rezero")
    assert "+ α·" in _texts(ax) and "LN" not in _texts(ax)
    ax = fig.add_subplot()
    plot.draw_block(ax, "lnscaled", layer=3, n_layers=4)
    assert "LN/√3" in _texts(ax) and ax.get_title() == "LayerNorm Scaling, block 3 of 4"
    for layer, where in ((2, 0.12), (3, 0.62)):  # Mix-LN at 8 blocks: 2 post-LN (trunk), then pre-LN (branch)
        ax = fig.add_subplot()
        plot.draw_block(ax, "mixln", layer=layer, n_layers=8)
        assert _texts(ax).count("LN") == 2 and _norms_at(ax) == {where}
    with pytest.raises(ValueError, match="layer must be a block number in 1..8"):
        plot.draw_block(fig.add_subplot(), "mixln", layer=9, n_layers=8)
