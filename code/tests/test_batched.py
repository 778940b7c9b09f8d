"""K runs trained as one vmapped batch give each run's sequential curves, divergence and logs."""

import math
import warnings

import pytest

import normlab
from normlab import TrainConfig, run
from normlab.batched import batchable, train_batched

TINY = dict(d_model=16, n_heads=2, n_layers=2)
SHAPE = dict(steps=30, batch_size=4, seq_len=16, eval_every=10, eval_windows=64, log_every=5)
LOGGED = ("grad_norms", "grad_l2", "grad_l1_mean", "update_size")


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


def close(a, b, rtol: float) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, rtol) for x, y in zip(a, b))
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-9)


def assert_matches_sequential(model_kwargs, configs, corpus):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batched = train_batched(model_kwargs, configs, corpus=corpus)
    # SDPA's batching fallback on the CPU only costs speed; train_batched keeps it quiet.
    assert not [w for w in caught if "performance drop" in str(w.message)]
    assert len(batched) == len(configs)
    for got, config in zip(batched, configs):
        want = run(model_kwargs, config, corpus=corpus)
        assert (got.status, got.diverged_at, got.spikes) == (want.status, want.diverged_at, want.spikes), config
        assert got.config == want.config and got.model == want.model and got.unigram_val == want.unigram_val
        assert got.lrs == want.lrs
        assert close(got.losses, want.losses, 1e-4), config
        assert [s for s, _ in got.evals] == [s for s, _ in want.evals]
        assert close([v for _, v in got.evals], [v for _, v in want.evals], 1e-4), config
        assert [r["step"] for r in got.logs] == [r["step"] for r in want.logs]
        for key in LOGGED:
            assert close([r[key] for r in got.logs], [r[key] for r in want.logs], 1e-3), (config, key)
    return batched


def test_curves_match_sequential_runs_with_their_own_lr_schedule_and_seed(corpus):
    configs = [
        TrainConfig(**SHAPE, lr=3e-3, schedule="cosine", seed=0),
        TrainConfig(**SHAPE, lr=1e-3, warmup=5, schedule="wsd", decay_fraction=0.3, seed=1),
        TrainConfig(**SHAPE, lr=2e-3, warmup=4, schedule="inverse-sqrt", min_lr_ratio=0.2, seed=2),
    ]
    results = assert_matches_sequential(TINY, configs, corpus)
    assert all(r.status == "completed" and len(r.losses) == 30 for r in results)
    assert len({r.losses[0] for r in results}) == 3  # three inits, three batch streams


def test_a_diverging_run_stops_where_its_sequential_run_does_and_leaves_the_others_alone(corpus):
    configs = [
        TrainConfig(**SHAPE, lr=3e-3, seed=0),
        # A non-finite loss at step 3, before its update. (At lr 100 the loss stays finite, above ln V,
        # for 20 chaotic steps, where float differences between the two paths grow until spikes differ.)
        TrainConfig(**SHAPE, lr=1e5, schedule="constant", seed=1),
        TrainConfig(**SHAPE, lr=0.5, schedule="constant", diverge_window=3, seed=1),  # above ln V, after its update
        TrainConfig(**SHAPE, lr=0.05, schedule="constant", spike_threshold=0.3, seed=1),  # spikes, finishes
    ]
    results = assert_matches_sequential(TINY, configs, corpus)
    assert [r.status for r in results] == ["completed", "diverged", "diverged", "completed"]
    assert len(results[1].losses) == results[1].diverged_at - 1
    assert len(results[2].losses) == results[2].diverged_at
    assert results[3].spikes


def test_clipping_weight_decay_and_adam_constants_per_run(corpus):
    model = dict(TINY, norm="normformer", qk_norm=True)  # 1-d head scales and norms: no weight decay on them
    configs = [
        TrainConfig(**SHAPE, lr=3e-3, clip=0.05, weight_decay=0.1, seed=0),
        TrainConfig(**SHAPE, lr=3e-3, seed=0),
        TrainConfig(**SHAPE, lr=3e-3, clip=1.0, weight_decay=1e-4, weight_decay_mode="independent",
                    betas=(0.8, 0.95), eps=1e-6, seed=0),
    ]  # fmt: skip
    results = assert_matches_sequential(model, configs, corpus)
    assert results[0].losses != results[1].losses != results[2].losses  # one seed, and still three runs


def test_batchable_groups_jobs_with_one_model_and_one_shape():
    pre, post = dict(TINY), dict(TINY, norm=normlab.Placement.same(normlab.Wrap(norm_trunk=True)))
    jobs = [
        (pre, TrainConfig(**SHAPE, lr=1e-3)),
        (post, TrainConfig(**SHAPE, lr=1e-3)),
        (dict(TINY), TrainConfig(**SHAPE, lr=3e-3, seed=4, clip=1.0)),
        (pre, TrainConfig(**dict(SHAPE, steps=40))),
        (dict(post), TrainConfig(**SHAPE, weight_decay=0.1)),
        (pre, TrainConfig(**SHAPE, track_attention=True)),
        (dict(TINY, dropout=0.1), TrainConfig(**SHAPE)),
        (dict(TINY, dropout=0.1), TrainConfig(**SHAPE)),
        (pre, TrainConfig(**dict(SHAPE, grad_param="attn.o.weight"))),
        (pre, TrainConfig(**SHAPE, seed=9)),
    ]
    assert batchable(jobs) == [[0, 2, 9], [1, 4], [3], [5], [6], [7], [8]]
    assert batchable([]) == []


@pytest.mark.parametrize(
    "model_kwargs, changes, message",
    [
        (TINY, dict(seq_len=8), "seq_len"),
        (TINY, dict(eval_every=5), "eval_every"),
        (TINY, dict(grad_param="attn.o.weight"), "grad_param"),
        (TINY, dict(track_attention=True), "track_attention"),
        (TINY, dict(track_model_update=True), "track_model_update"),
        (dict(TINY, dropout=0.1), {}, "dropout"),
        (dict(TINY, attn_dropout=0.1), {}, "attn_dropout"),
    ],
)
def test_what_cannot_be_batched_is_a_value_error_that_names_it(corpus, model_kwargs, changes, message):
    configs = [TrainConfig(**SHAPE), TrainConfig(**dict(SHAPE, **changes), seed=1)]
    with pytest.raises(ValueError, match=message):
        train_batched(model_kwargs, configs, corpus=corpus)


def test_an_unknown_logged_parameter_is_a_value_error(corpus):
    with pytest.raises(ValueError, match="unknown block parameter"):
        train_batched(TINY, [TrainConfig(**dict(SHAPE, grad_param="nope"))], corpus=corpus)
    assert train_batched(TINY, [], corpus=corpus) == []


def test_weight_decay_on_every_parameter_matches_sequential(corpus):
    """fairseq's convention (decay on norm gains and head scales too), batched as run trains it."""
    model = dict(TINY, norm="normformer")
    configs = [TrainConfig(**SHAPE, lr=3e-3, weight_decay=0.1, weight_decay_on="all", seed=s) for s in (0, 1)]
    assert_matches_sequential(model, configs, corpus)
