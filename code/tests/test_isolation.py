"""Runs do not leak into each other or into their caller, and an outcome means what its word says."""

import math

import pytest
import torch

import normlab
from normlab import TrainConfig, TrainResult, classify_outcome, run

TINY = dict(d_model=16, n_heads=2, n_layers=2, max_seq_len=16)
CONFIG = TrainConfig(steps=12, batch_size=4, seq_len=16, eval_every=6, log_every=4, seed=0)


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


def test_a_probe_that_edits_its_windows_in_place_changes_no_later_run(corpus):
    before = run(TINY, CONFIG, corpus=corpus)

    def vandal(model, x, y) -> dict:
        x.fill_(0)  # every byte a NUL
        y.fill_(0)
        return {}

    run(TINY, CONFIG, corpus=corpus, probe=vandal, final_probe=vandal)
    after = run(TINY, CONFIG, corpus=corpus)
    assert after.evals == before.evals and after.initial_val == before.initial_val


def test_a_probe_that_draws_random_numbers_leaves_the_run_it_measures_alone(corpus):
    model = dict(TINY, dropout=0.1)  # the run itself draws dropout masks from torch's global stream

    def sampling(m, x, y) -> dict:
        return {"grads": normlab.grad_norms(m, x, y, train=True)}  # dropout on: samples masks

    plain = run(model, CONFIG, corpus=corpus)
    probed = run(model, CONFIG, corpus=corpus, probe=sampling)
    assert probed.losses == plain.losses and probed.evals == plain.evals


def test_run_leaves_the_callers_random_stream_as_it_was(corpus):
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    run(dict(TINY, dropout=0.1), CONFIG, corpus=corpus)
    normlab.initial_val_loss(TINY, CONFIG, corpus)
    normlab.batched.train_batched(TINY, [CONFIG], corpus=corpus)
    assert torch.equal(torch.rand(3), expected)


def finished(final: float, initial: float = 5.545, unigram: float = 3.04) -> TrainResult:
    return TrainResult(config={}, status="completed", evals=[(100, 3.0), (200, final)], unigram_val=unigram,
                       initial_val=initial)  # fmt: skip


@pytest.mark.parametrize("final", [12.5, 9.0, 5.6])
def test_a_finished_run_worse_than_uniform_guessing_is_diverged(final):
    assert classify_outcome(finished(final)) == "diverged"


def test_a_finished_run_worse_than_its_own_start_is_diverged_and_one_between_is_not():
    assert classify_outcome(finished(5.3, initial=5.2)) == "diverged"  # above its start, below ln V
    assert classify_outcome(finished(3.0)) == "stalled"  # within 0.1 of the unigram level
    assert classify_outcome(finished(2.5)) == "trained"


def test_the_loop_marks_a_run_that_ends_above_uniform_as_diverged(corpus):
    # pre-LN at lr 1.0 with warmup over the whole run: the loss climbs late, to about 45 nats.
    config = TrainConfig(steps=60, batch_size=16, seq_len=32, lr=1.0, warmup=60, eval_every=20, seed=0)
    result = run(dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=32), config, corpus=corpus)
    assert result.evals[-1][1] > math.log(256)
    assert result.status == "diverged" and classify_outcome(result) == "diverged"
    assert math.isnan(result.final_val_loss)  # drawn as diverged, never as a loss


def test_every_run_records_its_loss_at_initialisation(corpus):
    result = run(TINY, CONFIG, corpus=corpus)
    assert result.initial_val == pytest.approx(normlab.initial_val_loss(TINY, CONFIG, corpus), rel=1e-6)
    assert abs(result.initial_val - math.log(256)) < 0.05  # GPT-2's small init: near uniform guessing
