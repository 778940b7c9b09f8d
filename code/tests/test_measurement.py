"""The measurement core: probes observe without perturbing, a run never raises, outcomes mean what
they say, results round-trip as strict JSON, and the data are the same bytes on every Python."""

import hashlib
import json
import math
import sys

import numpy as np
import pytest
import torch

import normlab
from normlab import VARIANTS, Block, TrainConfig, TrainResult, TransformerLM, classify_outcome, probes, run
from normlab.record import LossMonitor
from normlab.results import load_results, provenance, save_results
from normlab.training import adamw_weight_decay

TINY = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=32)
SHORT = dict(steps=20, seq_len=32, eval_every=10, log_every=5, eval_windows=32)


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


# --- measuring does not change what is measured ---------------------------------------------


def test_tracking_attention_and_model_update_leaves_the_run_bit_identical(corpus):
    kw = dict(TINY, dropout=0.1)
    plain = run(kw, TrainConfig(**SHORT, seed=3), corpus=corpus)
    tracked = run(kw, TrainConfig(**SHORT, seed=3, track_attention=True, track_model_update=True), corpus=corpus)
    assert tracked.losses == plain.losses and tracked.evals == plain.evals
    assert len(tracked.logs[-1]["max_logit"]) == TINY["n_layers"]


def test_model_update_is_zero_for_equal_weights_even_with_dropout():
    model = TransformerLM(256, 32, 4, 2, dropout=0.3).train()
    x = torch.randint(0, 256, (2, 8))
    assert normlab.model_update(model, model, x) == 0.0
    assert model.training  # the probe restored the mode it found


@pytest.mark.parametrize("measure", ["grad_norms", "residual_norms", "norm_input_scale", "attention_stats"])
def test_probes_are_deterministic_in_their_stated_eval_mode_and_restore_the_mode(measure):
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 2, dropout=0.3, attn_dropout=0.2).train()
    x = torch.randint(0, 256, (2, 8))
    args = (model, x, x) if measure == "grad_norms" else (model, x)
    first, second = getattr(probes, measure)(*args), getattr(probes, measure)(*args)
    assert str(first) == str(second)
    assert all(m.training for m in model.modules())


def test_stack_jacobian_ignores_dropout():
    torch.manual_seed(0)
    blocks = [Block(8, 2, norm="post", dropout=0.5).train() for _ in range(2)]
    x = torch.randn(3, 8)
    torch.testing.assert_close(probes.stack_jacobian(blocks, x), probes.stack_jacobian(blocks, x), rtol=0, atol=0)
    assert all(b.training for b in blocks)


def test_logged_gradients_are_taken_before_clipping_and_agree_with_the_probe(corpus):
    cfg = TrainConfig(**dict(SHORT, steps=1, log_every=1), clip=1e-6, seed=5)
    result = run(TINY, cfg, corpus=corpus)
    torch.manual_seed(cfg.seed)
    model = TransformerLM(corpus.vocab_size, **TINY)
    x, y = corpus.batch("train", cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(cfg.seed))
    for stat in ("l2", "l1_mean"):
        probe = probes.grad_norms(model, x, y, stat=stat, train=True)
        np.testing.assert_allclose(result.logs[0][f"grad_{stat}"], probe.numpy(), rtol=1e-5)
    assert min(result.logs[0]["grad_l2"]) > 1e3 * cfg.clip  # unclipped


def test_attention_statistics_per_layer_and_entropy_independent_of_length():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 3, max_seq_len=64)
    for block in model.blocks:  # W_q = W_k = 0: uniform attention over the allowed positions
        torch.nn.init.zeros_(block.attn.qkv.weight[:64]), torch.nn.init.zeros_(block.attn.qkv.bias[:64])
    for t in (4, 16, 64):
        stats = normlab.attention_stats(model, torch.randint(0, 256, (2, t)))
        assert stats["entropy"].shape == (3,) and stats["max_logit"].shape == (3,)
        torch.testing.assert_close(stats["entropy"], torch.ones(3))  # uniform is 1 at every length
        assert float(stats["max_logit"].max()) == 0.0


def test_recording_path_is_causal_and_equals_the_fast_path():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 2, qk_norm=True).eval()
    x = torch.randint(0, 256, (2, 12))
    fast = model(x)
    probes.record_attention_logits(model, True)
    try:
        slow = model(x)
        x2 = x.clone()
        x2[:, -1] = (x2[:, -1] + 1) % 256
        changed = model(x2)
    finally:
        probes.record_attention_logits(model, False)
    torch.testing.assert_close(slow, fast, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(changed[:, :-1], slow[:, :-1], rtol=0, atol=0)  # the past ignores the future


def test_norm_input_scale_is_in_forward_order_and_is_sigma_for_layernorm():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 4, 1, norm="sandwich", qk_norm=True)
    scales = normlab.norm_input_scale(model, torch.randint(0, 256, (2, 8)))
    assert list(scales) == [
        "blocks.0.attn_in", "blocks.0.attn.q_norm", "blocks.0.attn.k_norm", "blocks.0.attn_out",
        "blocks.0.ffn_in", "blocks.0.ffn_out",
    ]  # fmt: skip
    block = Block(16, 2, norm="post")
    x = 5.0 + 2.0 * torch.randn(1, 4, 16)  # mean 5, std 2: rms ~5.4, sigma ~2
    seen = {}
    block.attn_trunk.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0]))
    with torch.no_grad():
        block(x)
    sigma = float((seen["x"].var(-1, unbiased=False) + 1e-5).sqrt().mean())
    assert sigma < 0.5 * float(seen["x"].pow(2).mean().sqrt())  # far from the rms here
    assert probes._norm_scale(block.attn_trunk, seen["x"]) == pytest.approx(sigma)


# --- a run never raises --------------------------------------------------------------------


@pytest.mark.parametrize("fill", [float("nan"), float("inf")])
def test_a_model_that_is_already_broken_ends_diverged_with_tracking_on(corpus, fill):
    def break_it(model, x, y):
        with torch.no_grad():
            model.blocks[0].attn.w_q.fill_(fill)
        return {}

    cfg = TrainConfig(**dict(SHORT, log_every=1), track_attention=True, track_model_update=True)
    result = run(TINY, cfg, corpus=corpus, probe=break_it, keep_model=True)
    assert result.status == "diverged" and result.diverged_at is not None
    assert all(math.isfinite(v) for v in result.losses)
    assert not any(a.record_logits for a in probes.record_attention_logits(result.trained_model, False))
    stats = normlab.attention_stats(result.trained_model, torch.zeros(1, 8, dtype=torch.long))
    assert not torch.isfinite(stats["max_logit"]).all()  # reported, not raised


def test_a_blow_up_at_validation_time_ends_diverged(corpus, monkeypatch):
    monkeypatch.setattr(normlab.training, "_val_loss", lambda *a, **k: float("nan"))
    result = run(TINY, TrainConfig(**SHORT), corpus=corpus)
    assert result.status == "diverged" and result.diverged_at == SHORT["eval_every"] and result.evals == []


def test_a_probe_value_that_is_not_finite_ends_diverged_and_is_not_logged(corpus):
    result = run(TINY, TrainConfig(**SHORT), corpus=corpus, probe=lambda m, x, y: {"bad": [1.0, float("inf")]})
    assert result.status == "diverged" and result.diverged_at == 1 and result.logs == []


def test_loss_monitor_separates_divergence_stall_and_spikes():
    uniform = math.log(256)
    spike = LossMonitor(256)
    for v in [5.6] * 3 + [3.1] * 20 + [8.5, 6.0] + [3.1] * 30:
        spike.update(v)
        assert not spike.diverged
    slow = LossMonitor(256)
    for v in np.linspace(5.9, 5.0, 200):  # starts above ln V (a large init) and descends slowly
        slow.update(float(v))
    assert not slow.diverged and not slow.spiked
    blown = LossMonitor(256, window=20)
    seq = [5.5] + [3.0] * 10 + [uniform + 0.5] * 19
    for v in seq:
        blown.update(v)
    assert not blown.diverged
    blown.update(uniform + 0.5)  # the 20th step in a row worse than uniform guessing
    assert blown.diverged
    nan = LossMonitor(256)
    nan.update(float("nan"))
    assert nan.diverged


def test_spikes_are_flagged_once_the_curve_has_a_baseline():
    m, flagged = LossMonitor(256), []
    for step, v in enumerate([5.5] * 5 + [3.0] * 10 + [4.5] + [3.0] * 5, start=1):
        m.update(v)
        if m.spiked:
            flagged.append(step)
    assert flagged == [16]


def test_outcome_thresholds():
    base = dict(config={}, unigram_val=3.05)
    assert classify_outcome(TrainResult(**base, evals=[(300, 3.0)])) == "stalled"  # 0.05 under unigram
    assert classify_outcome(TrainResult(**base, evals=[(300, 2.94)])) == "trained"  # 0.11 under
    assert classify_outcome(TrainResult(**base, evals=[(300, 3.3)])) == "stalled"  # above it
    assert classify_outcome(TrainResult(**base, status="diverged", diverged_at=3)) == "diverged"


def test_validation_set_is_fixed_spans_every_file_and_the_unigram_level_is_on_it(corpus):
    a = run(TINY, TrainConfig(**SHORT, seed=1), corpus=corpus)
    b = run(TINY, TrainConfig(**SHORT, seed=2), corpus=corpus)
    assert a.unigram_val == b.unigram_val  # same validation windows for every seed
    x, y = corpus.eval_set(32, SHORT["eval_windows"])
    assert torch.equal(x[:, 1:], y[:, :-1])
    starts = [int(s) for s in torch.linspace(0, len(corpus.val) - 33, 256).long()]
    assert starts[0] == 0 and starts[-1] == len(corpus.val) - 33
    assert a.unigram_val == pytest.approx(corpus.unigram_loss(y))


# --- definitions: schedules, weight decay, statistics ---------------------------------------


@pytest.mark.parametrize("warmup, total", [(90, 100), (0, 3), (5, 24), (10, 100), (100, 100)])
def test_wsd_never_jumps_and_ends_at_the_floor(warmup, total):
    lr = [normlab.lr_multiplier("wsd", s, warmup=warmup, total=total, min_ratio=0.1) for s in range(1, total + 1)]
    steps = np.abs(np.diff([0.0] + lr))
    decay_len = total - max(warmup, total - math.ceil(0.2 * total))  # the decay starts after the warmup
    assert steps.max() <= max(1 / max(warmup, 1), 0.9 / max(decay_len, 1)) + 1e-12
    assert lr[-1] == pytest.approx(0.1 if warmup < total else 1.0)


def test_wsd_decay_fraction_is_configurable():
    kw = dict(warmup=0, total=100, min_ratio=0.0)
    assert normlab.lr_multiplier("wsd", 50, decay_fraction=0.5, **kw) == 1.0
    assert normlab.lr_multiplier("wsd", 75, decay_fraction=0.5, **kw) == pytest.approx(0.5)


def test_independent_weight_decay_does_not_scale_with_the_peak_rate():
    for lr in (1e-3, 1e-2):
        coupled = TrainConfig(lr=lr, weight_decay=0.1)
        independent = TrainConfig(lr=lr, weight_decay=1e-4, weight_decay_mode="independent")
        assert lr * adamw_weight_decay(coupled) == pytest.approx(lr * 0.1)  # sweeps with lr
        assert lr * adamw_weight_decay(independent) == pytest.approx(1e-4)  # does not


def test_spearman_averages_ties_and_refuses_nan():
    spearman = normlab.stats.spearman
    assert spearman([1, 1, 1, 2, 2, 2]) == pytest.approx(0.8783100656536799)
    assert spearman([3, 1, 2]) == pytest.approx(-0.5)
    assert spearman([10, 20, 30, 40]) == pytest.approx(1.0)
    assert math.isnan(spearman([2.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match="NaN"):
        spearman([1.0, float("nan"), 2.0])


# --- variants and dropout -----------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_dropout_is_the_last_step_of_every_branch(variant):
    """The branch a block adds to its trunk is eval-branch * mask / (1 - p): its train-mode mean is
    the eval-mode branch, whatever norms the placement puts on the branch."""
    torch.manual_seed(0)
    p = 0.3
    block = Block(16, 2, norm=variant, dropout=p)
    x = torch.randn(1, 6, 16)
    seen: dict = {}
    for name in ("attn_drop", "ffn_drop"):
        getattr(block, name).register_forward_hook(lambda m, a, out, n=name: seen.setdefault(n, []).append((a[0], out)))
    block.eval()(x)
    block.train()
    for _ in range(400):
        block(x)
    for name, calls in seen.items():
        eval_in, eval_out = calls[0]
        torch.testing.assert_close(eval_out, eval_in, rtol=0, atol=0)  # no dropout in eval mode
        outs = torch.stack([out for _, out in calls[1:]])
        if name == "attn_drop":  # the attention branch sees the same input each time: compare its mean
            torch.testing.assert_close(outs.mean(0), eval_in, rtol=0.1, atol=0.1 * float(eval_in.detach().abs().mean()))
        for branch_in, out in calls[1:]:  # each element is dropped or scaled by 1 / (1 - p)
            kept = out != 0
            torch.testing.assert_close(out[kept], branch_in[kept] / (1 - p))


def test_sandwich_branch_mean_matches_eval_at_p_0_3():
    """Dropout before the output norm would let the norm undo its rescaling (0.84x here before)."""
    torch.manual_seed(0)
    block = Block(32, 4, norm="sandwich", dropout=0.3)
    h = torch.randn(1, 8, 32)
    block.eval()
    with torch.no_grad():
        branch_eval = block.ffn_drop(block.ffn_out(block.mlp(block.ffn_in(h))))
    block.train()
    with torch.no_grad():
        branch_train = torch.stack([block.ffn_sublayer(h) - h for _ in range(3000)]).mean(0)
    ratio = float((branch_train * branch_eval).sum() / branch_eval.pow(2).sum())
    assert abs(ratio - 1) < 0.03


@pytest.mark.parametrize("scheme", normlab.INIT_SCHEMES)
def test_deepnorm_beta_scales_v_o_fc1_fc2_in_every_init_scheme(scheme):
    beta = 0.37
    torch.manual_seed(0)
    plain = Block(32, 4, norm="deepnorm", init=scheme, n_layers=6, deepnorm_beta=1.0)
    torch.manual_seed(0)
    scaled = Block(32, 4, norm="deepnorm", init=scheme, n_layers=6, deepnorm_beta=beta)
    for name in ("attn.o", "mlp.fc1", "mlp.fc2"):
        for part in ("weight", "bias"):
            torch.testing.assert_close(
                scaled.get_parameter(f"{name}.{part}"), beta * plain.get_parameter(f"{name}.{part}")
            )
    # Q, K, V share one fused weight: beta must reach its V rows and only those (xformers #219).
    d = 32
    v_rows = slice(2 * d, 3 * d)
    torch.testing.assert_close(scaled.attn.qkv.weight[v_rows], beta * plain.attn.qkv.weight[v_rows])
    torch.testing.assert_close(scaled.attn.qkv.bias[v_rows], beta * plain.attn.qkv.bias[v_rows])
    assert torch.equal(scaled.attn.qkv.weight[: 2 * d], plain.attn.qkv.weight[: 2 * d])
    assert torch.equal(scaled.attn.qkv.bias[: 2 * d], plain.attn.qkv.bias[: 2 * d])


def test_gpt2_init_uses_beta_instead_of_the_residual_factor_for_deepnorm():
    torch.manual_seed(0)
    deep = Block(256, 4, norm="deepnorm", init="gpt2", n_layers=8, deepnorm_beta=1.0)
    torch.manual_seed(0)
    post = Block(256, 4, norm="post", init="gpt2", n_layers=8)
    assert float(deep.attn.o.weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    assert float(post.attn.o.weight.detach().std()) == pytest.approx(0.02 / 4, rel=0.05)  # 1/sqrt(2 * 8)


def test_deepnorm_constants_reach_every_block_of_the_lm():
    torch.manual_seed(0)
    deep = TransformerLM(256, 32, 4, 3, norm="deepnorm", init="xavier", deepnorm_alpha=1.0, deepnorm_beta=1.0)
    torch.manual_seed(0)
    post = TransformerLM(256, 32, 4, 3, norm="post", init="xavier")
    x = torch.randint(0, 256, (2, 8))
    torch.testing.assert_close(deep(x), post(x), rtol=0, atol=0)
    glm = TransformerLM(256, 32, 4, 3, norm="deepnorm", deepnorm_alpha=math.sqrt(6))
    assert all(float(b.alpha) == pytest.approx(math.sqrt(6)) for b in glm.blocks)
    result = run(dict(TINY, norm="deepnorm", deepnorm_alpha=1.0), TrainConfig(steps=2, seq_len=8, eval_windows=4))
    assert result.model["deepnorm_alpha"] == 1.0


# --- reproducible results -----------------------------------------------------------------


def test_corpus_is_the_shipped_snapshot_on_every_python(corpus):
    assert corpus.fingerprint.startswith(normlab.CORPUS_SHA256)
    assert len(corpus.train) == 1_421_397 and len(corpus.val) == 157_951
    assert hashlib.sha256(corpus.val.numpy().tobytes()).hexdigest()[:12] == "0dc8a0399caf"


def test_train_and_val_are_disjoint_per_file():
    files = normlab.data._snapshot_files()
    tails = b"".join(files[n][int(len(files[n]) * 0.9) :] for n in normlab.STDLIB_FILES)
    heads = b"".join(files[n][: int(len(files[n]) * 0.9)] for n in normlab.STDLIB_FILES)
    corpus = normlab.load_corpus()
    assert bytes(corpus.val.numpy()) == tails and bytes(corpus.train.numpy()) == heads


def test_results_round_trip_as_strict_json_including_a_diverged_run(corpus, tmp_path):
    ok = run(dict(TINY, norm=VARIANTS["sandwich"]), TrainConfig(**SHORT, betas=[0.9, 0.95]), corpus=corpus)
    bad = run(dict(TINY, norm="post", init="torch"), TrainConfig(**dict(SHORT, steps=60), lr=1e4), corpus=corpus)
    assert bad.status == "diverged"
    save_results(tmp_path / "r.json", [ok, bad], {"provenance": provenance(corpus)})
    text = (tmp_path / "r.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    (ok2, bad2), meta = load_results(tmp_path / "r.json")
    assert isinstance(ok2.model["norm"], normlab.Placement)
    TransformerLM(256, **ok2.model)  # buildable again
    assert ok2.config["betas"] == (0.9, 0.95) and TrainConfig(**ok2.config).betas == (0.9, 0.95)
    assert ok2.lrs == pytest.approx(ok.lrs, rel=1e-4) and len(ok2.lrs) == SHORT["steps"]
    assert classify_outcome(ok2) == classify_outcome(ok) and classify_outcome(bad2) == "diverged"
    assert bad2.diverged_at == bad.diverged_at and math.isnan(bad2.final_val_loss)
    assert {"dirty", "seed_base", "corpus_sha256"} <= set(meta["provenance"])


def test_loading_results_from_another_corpus_is_refused(corpus, tmp_path):
    result = run(TINY, TrainConfig(steps=2, seq_len=8, eval_windows=4), corpus=corpus)
    meta = {"provenance": dict(provenance(corpus), corpus_sha256="b4fac4510000")}
    save_results(tmp_path / "r.json", [result], meta)
    with pytest.raises(ValueError, match="b4fac4510000"):
        load_results(tmp_path / "r.json")
    assert len(load_results(tmp_path / "r.json", check_corpus=False)[0]) == 1


def test_run_hands_back_the_model_and_a_final_probe(corpus, tmp_path):
    result = run(
        TINY, TrainConfig(steps=3, seq_len=8, eval_windows=4), corpus=corpus, keep_model=True,
        final_probe=lambda m, x, y: {"residual": normlab.residual_norms(m, x).tolist()},
    )  # fmt: skip
    assert isinstance(result.trained_model, TransformerLM)
    assert len(result.final["residual"]) == TINY["n_layers"] + 1
    save_results(tmp_path / "r.json", [result], {"provenance": provenance(corpus)})
    assert "trained_model" not in (tmp_path / "r.json").read_text()


def test_provenance_names_an_apple_gpu_as_such(monkeypatch):
    monkeypatch.setattr(sys.modules["normlab.results"], "get_device", lambda: torch.device("mps"))
    assert provenance()["device"].startswith("Apple MPS")


def test_lr_sensitivity_is_the_mean_distance_from_the_sweeps_best():
    lr_sensitivity, terms = normlab.stats.lr_sensitivity, normlab.stats.lr_sensitivity_terms
    # every rate reaches the best loss: 0
    assert lr_sensitivity([2.5, 2.5, 2.5], initial_loss=5.5) == 0.0
    # (0 + 0.5 + 1.0) / 3
    assert lr_sensitivity([2.0, 2.5, 3.0], initial_loss=5.5) == pytest.approx(0.5)
    # a diverged run (NaN) counts as the loss at initialisation, and no run counts above it
    np.testing.assert_allclose(terms([2.0, float("nan"), 7.0], initial_loss=5.5), [0.0, 3.5, 3.5])


def test_lr_sensitivity_rewards_a_model_that_learns_nothing():
    # Exercise 9.3's point: relative to its own best, a model stalled at every rate scores 0, the
    # best possible, so the sensitivity must be read next to the best loss.
    stalled, tolerant = [3.05, 3.05, 3.05], [2.3, 2.4, 2.5]
    assert normlab.stats.lr_sensitivity(stalled, 5.5) < normlab.stats.lr_sensitivity(tolerant, 5.5)


def test_lr_sensitivity_refuses_bad_input():
    with pytest.raises(ValueError, match="one final loss per learning rate"):
        normlab.stats.lr_sensitivity([[2.0, 2.1]], 5.5)
    with pytest.raises(ValueError, match="loss at initialisation must be finite"):
        normlab.stats.lr_sensitivity([2.0, 2.1], float("nan"))
