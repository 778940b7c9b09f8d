"""Sweeps: worker processes give the sequential sweep's results, an interrupted sweep resumes from
its store to the same results, and a run that fails does not take the others down."""

import dataclasses
import json

import pytest
import torch

import normlab
from normlab import TrainConfig
from normlab.results import SweepError, default_workers, run_many

TINY = dict(d_model=16, n_heads=2, n_layers=2, max_seq_len=16)


def config(seed: int, **kw) -> TrainConfig:
    return TrainConfig(steps=12, batch_size=4, seq_len=16, eval_every=6, log_every=4, seed=seed, **kw)


JOBS = [
    (TINY, config(0)),
    (dict(TINY, norm="post"), config(1, lr=3e-3)),
    (TINY, config(2, warmup=4)),
    (TINY, config(3)),
]


def same(a: normlab.TrainResult, b: normlab.TrainResult) -> bool:
    """Equal in everything but the wall time."""
    return dataclasses.replace(a, seconds=0.0) == dataclasses.replace(b, seconds=0.0)


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


@pytest.fixture(scope="module")
def sequential(corpus):
    torch.set_num_threads(1)  # the workers' thread count, so the float arithmetic is the same
    return run_many(JOBS, corpus=corpus, workers=1, final_probe=output_spread)


def output_spread(model, x, y) -> dict:
    with torch.no_grad():
        return {"spread": float(model(x).std())}


def test_two_workers_give_the_sequential_results_in_job_order(corpus, sequential):
    parallel = run_many(JOBS, corpus=corpus, workers=2, final_probe=output_spread)
    assert [r.config["seed"] for r in parallel] == [0, 1, 2, 3]
    assert all(same(a, b) for a, b in zip(sequential, parallel))
    assert all("spread" in r.final for r in parallel)  # a probe defined here reached the workers


INTERRUPT_AFTER = {"calls": None}


def interruptible(model, x, y) -> dict:
    if INTERRUPT_AFTER["calls"] is not None:
        INTERRUPT_AFTER["calls"] -= 1
        if INTERRUPT_AFTER["calls"] < 0:
            raise KeyboardInterrupt  # what a disconnect or Ctrl-C does mid-sweep
    return output_spread(model, x, y)


def test_an_interrupted_sweep_resumes_from_its_store_with_the_same_results(corpus, sequential, tmp_path):
    INTERRUPT_AFTER["calls"] = 2
    with pytest.raises(KeyboardInterrupt):
        run_many(JOBS, corpus=corpus, workers=1, final_probe=interruptible, store=tmp_path)
    assert len(list(tmp_path.glob("run-*.json"))) == 2  # the two runs that finished are kept
    INTERRUPT_AFTER["calls"] = None
    resumed = run_many(JOBS, corpus=corpus, workers=2, final_probe=interruptible, store=tmp_path)
    assert len(list(tmp_path.glob("run-*.json"))) == 4
    assert all(same(a, b) for a, b in zip(sequential, resumed))
    # A third call trains nothing (a probe call would now raise): every run comes from the store.
    INTERRUPT_AFTER["calls"] = 0
    again = run_many(JOBS, corpus=corpus, workers=1, final_probe=interruptible, store=tmp_path)
    assert all(same(a, b) for a, b in zip(sequential, again))


def test_a_stored_run_is_strict_json_with_its_provenance(corpus, tmp_path):
    run_many(JOBS[:1], corpus=corpus, workers=1, store=tmp_path)
    (path,) = tmp_path.glob("run-*.json")
    payload = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert payload["meta"]["provenance"]["corpus_sha256"] == corpus.fingerprint[:12]


def test_a_failing_run_is_reported_with_its_configuration_and_the_others_finish(corpus, tmp_path):
    bad = (dict(TINY, n_heads=3), config(7))  # 16 is not divisible by 3
    jobs = [JOBS[0], bad, JOBS[2]]
    with pytest.raises(SweepError, match=r"1 of 3 runs failed") as caught:
        run_many(jobs, corpus=corpus, workers=2, store=tmp_path)
    ((index, model_kwargs, failed_config, tb),) = caught.value.failures
    assert index == 1 and model_kwargs["n_heads"] == 3 and failed_config.seed == 7
    assert "not divisible by n_heads" in tb and "seed 7" in str(caught.value)
    assert len(list(tmp_path.glob("run-*.json"))) == 2


def test_workers_must_be_a_positive_integer(corpus):
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="workers must be a positive integer"):
            run_many(JOBS[:1], corpus=corpus, workers=bad)


def test_the_default_uses_the_cores_there_are_on_a_linux_cpu_and_one_process_elsewhere(monkeypatch):
    import os
    import sys

    import normlab.results as results

    if sys.platform.startswith("linux"):
        assert default_workers() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(results, "get_device", lambda: torch.device("cuda"))
    assert default_workers() == 1  # a GPU: runs stay in-process (batched), never forked workers


def test_a_batched_sweep_gives_the_one_by_one_curves_to_float_tolerance(corpus):
    # What run_many does by default on a GPU, checked here on the CPU: K runs as one computation.
    jobs = [(TINY, config(seed, lr=lr)) for seed, lr in ((0, 1e-3), (1, 3e-3), (2, 1e-2))]
    one_by_one = run_many(jobs, corpus=corpus, workers=1)
    batched = run_many(jobs, corpus=corpus, workers=1, batched=True)
    for a, b in zip(one_by_one, batched):
        assert a.status == b.status and a.config == b.config
        torch.testing.assert_close(b.losses, a.losses, rtol=1e-5, atol=0)
        torch.testing.assert_close([v for _, v in b.evals], [v for _, v in a.evals], rtol=1e-5, atol=0)
