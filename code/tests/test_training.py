"""The training loop learns, reports a blow-up as "diverged" instead of raising, and repeats itself."""

import math

import pytest
import torch

import normlab
from normlab import TrainConfig, classify_outcome, lr_multiplier, run

TINY = dict(d_model=32, n_heads=4, n_layers=2)


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


def test_a_tiny_run_learns_past_the_unigram_level(corpus):
    result = run(TINY, TrainConfig(steps=150, lr=3e-3, warmup=10, eval_every=50), corpus=corpus, progress=False)
    assert result.status == "completed"
    assert result.losses[0] > math.log(256) - 0.3  # starts near uniform over bytes
    assert result.final_val_loss < result.unigram_val - 0.1
    assert classify_outcome(result) == "trained"


def test_an_absurd_learning_rate_ends_as_diverged_not_as_an_exception(corpus):
    result = run(
        dict(TINY, norm="post", init="torch"),
        TrainConfig(steps=60, lr=1e4, schedule="constant", eval_every=20),
        corpus=corpus,
        progress=False,
    )
    assert result.status == "diverged" and result.diverged_at is not None
    assert all(math.isfinite(v) for v in result.losses)  # the curve stops; it never holds a NaN
    assert math.isnan(result.final_val_loss)
    assert classify_outcome(result) == "diverged"


def test_one_seed_gives_identical_losses_twice(corpus):
    cfg = TrainConfig(
        steps=20, lr=1e-3, eval_every=10, seed=7, log_every=5, track_attention=True, track_model_update=True
    )
    a = run(TINY, cfg, corpus=corpus, progress=False)
    b = run(TINY, cfg, corpus=corpus, progress=False)
    assert a.losses == b.losses and a.evals == b.evals
    c = run(TINY, TrainConfig(steps=20, lr=1e-3, eval_every=10, seed=8), corpus=corpus, progress=False)
    assert c.losses != a.losses


def test_probes_are_recorded_at_log_steps(corpus):
    cfg = TrainConfig(steps=20, log_every=10, eval_every=10, track_attention=True, track_model_update=True)
    result = run(TINY, cfg, corpus=corpus, progress=False)
    assert [r["step"] for r in result.logs] == [1, 10, 20]
    first = result.logs[0]
    assert len(first["grad_norms"]) == 2 and first["update_size"] > 0
    assert len(first["max_logit"]) == 2 and min(first["max_logit"]) > 0  # per layer
    assert first["model_update"] > 0


def test_schedules_start_small_peak_at_one_and_decay():
    kw = dict(warmup=10, total=100, min_ratio=0.1)
    for name in normlab.SCHEDULES:
        assert lr_multiplier(name, 1, **kw) == pytest.approx(0.1)
        assert lr_multiplier(name, 10, **kw) == pytest.approx(1.0)
    assert lr_multiplier("constant", 100, **kw) == 1.0
    assert lr_multiplier("cosine", 100, **kw) == pytest.approx(0.1)
    assert lr_multiplier("wsd", 80, **kw) == 1.0 and lr_multiplier("wsd", 100, **kw) == pytest.approx(0.1)
    # Vaswani et al.: d^-0.5 min(s^-0.5, s w^-1.5), normalised to peak 1 at s = w.
    assert lr_multiplier("inverse-sqrt", 40, **kw) == pytest.approx(math.sqrt(10 / 40))


def test_corpus_is_offline_fixed_and_splits_every_file(corpus):
    assert len(corpus.files) >= len(normlab.STDLIB_FILES) // 2
    assert 0.85 < len(corpus.train) / (len(corpus.train) + len(corpus.val)) < 0.95
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    x1, y1 = corpus.batch("train", 4, 16, g1)
    x2, _ = corpus.batch("train", 4, 16, g2)
    assert torch.equal(x1, x2) and torch.equal(x1[:, 1:], y1[:, :-1])
    assert 2.5 < corpus.unigram_entropy() < math.log(256)


def test_per_scale_values(monkeypatch):
    sizes = normlab.PerScale(ci=2, cpu=6, gpu=24)
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    assert sizes.get() == 2 and sizes.get("gpu") == 24
    monkeypatch.delenv("NORMLAB_SCALE")
    assert normlab.get_scale() == ("gpu" if torch.cuda.is_available() else "cpu")


def test_seed_base_shifts_every_experiments_seeds(monkeypatch):
    assert list(normlab.seeds(3)) == [0, 1, 2]
    monkeypatch.setenv("NORMLAB_SEED_BASE", "100")
    assert list(normlab.seeds(3)) == [100, 101, 102]
    monkeypatch.setenv("NORMLAB_SEED_BASE", "-1")
    with pytest.raises(ValueError, match="non-negative integer"):
        normlab.seeds(3)


def test_results_round_trip_with_provenance(corpus, tmp_path):
    from normlab.results import load_results, provenance, run_many, save_results

    results = run_many([(TINY, TrainConfig(steps=5, eval_every=5))], corpus=corpus, progress=False)
    save_results(tmp_path / "r.json", results, {"provenance": provenance(corpus)})
    loaded, meta = load_results(tmp_path / "r.json")
    assert loaded[0].losses == pytest.approx(results[0].losses, rel=1e-4)  # stored to 5 significant digits
    assert loaded[0].final_val_loss == pytest.approx(results[0].final_val_loss, rel=1e-4)
    assert {"date", "device", "torch", "revision", "scale", "corpus_sha256"} <= set(meta["provenance"])


def test_probe_callback_adds_to_the_log_records(corpus):
    probe = lambda model, x, y: {"ln": list(normlab.norm_input_scale(model, x).values()), "y": y.shape[0]}  # noqa: E731
    cfg = TrainConfig(steps=4, log_every=2, eval_every=4)
    result = run(dict(TINY, norm="post"), cfg, corpus=corpus, progress=False, probe=probe)
    assert len(result.logs[0]["ln"]) == 2 * TINY["n_layers"]  # two trunk norms per post-LN block
    assert result.logs[0]["y"] == cfg.batch_size  # the probe sees the targets too


def test_adamw_is_fused_where_available_and_falls_back_cleanly(monkeypatch):
    from normlab.training import make_adamw

    param = torch.nn.Parameter(torch.randn(4, 4))
    assert make_adamw([{"params": [param]}], TrainConfig()).param_groups[0]["fused"]
    real = torch.optim.AdamW

    def no_fused_kernel(*args, fused=None, **kwargs):
        if fused:
            real(*args, fused=fused, **kwargs)  # touches the groups as a failing constructor would
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", no_fused_kernel)
    opt = make_adamw([{"params": [param], "weight_decay": 0.0}], TrainConfig())
    assert not opt.param_groups[0]["fused"]
    param.grad = torch.ones_like(param)
    opt.step()  # the fallback really steps


@pytest.mark.parametrize("norm", ["pre", "admin"])
def test_initial_val_loss_is_the_loss_the_run_starts_from(norm):
    # At a learning rate of 1e-12 a run barely moves its weights (AdamW's step is about lr per
    # entry), so its final validation loss is the loss at initialisation; Admin's data-dependent
    # omegas are part of that start.
    config = TrainConfig(steps=2, batch_size=4, seq_len=16, lr=1e-12, warmup=0, eval_windows=8, seed=3)
    kwargs = dict(d_model=16, n_heads=2, n_layers=2, max_seq_len=16, norm=norm, init="xavier")
    result = run(kwargs, config)
    assert normlab.initial_val_loss(kwargs, config) == pytest.approx(result.initial_val, rel=1e-6)
    assert normlab.initial_val_loss(kwargs, config) == pytest.approx(result.evals[-1][1], rel=1e-6)


def test_weight_decay_on_all_shrinks_the_norm_gains_too(corpus):
    """torch's AdamW decays what its group says: matrices only by default, every parameter with "all"."""
    gains = {}
    for on in ("matrices", "all"):
        torch.manual_seed(0)
        model = normlab.TransformerLM(corpus.vocab_size, 16, 2, 1, max_seq_len=16)
        config = TrainConfig(steps=3, batch_size=2, seq_len=16, lr=1e-2, weight_decay=10.0, weight_decay_on=on,
                             eval_every=3, eval_windows=8)  # fmt: skip
        normlab.train(model, corpus, config, device=torch.device("cpu"))
        gains[on] = model.final_norm.weight.detach().clone()
    # decay shrinks by lr * wd = 0.1 per step: the gains end clearly below the undecayed ones
    assert float(gains["all"].mean()) < float(gains["matrices"].mean()) - 0.1
