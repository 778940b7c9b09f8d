"""Sweeps: every executor gives the sequential sweep's results bit for bit, an interrupted sweep
resumes from its store to the same results, a failing run does not take the others down, and the
workers train on one thread each and die with their parent."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import normlab
from normlab import TrainConfig
from normlab.sweep import SweepError, default_workers, run_many

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


def output_spread(model, x, y) -> dict:
    with torch.no_grad():
        return {"spread": float(model(x).std())}


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


@pytest.fixture(scope="module")
def sequential(corpus):
    torch.set_num_threads(1)  # the workers' thread count, so the float arithmetic is the same
    return run_many(JOBS, corpus=corpus, workers=1, final_probe=output_spread)


def test_two_loky_workers_give_the_sequential_results_in_job_order(corpus, sequential):
    parallel = run_many(JOBS, corpus=corpus, workers=2, final_probe=output_spread)
    assert [r.config["seed"] for r in parallel] == [0, 1, 2, 3]
    assert all(same(a, b) for a, b in zip(sequential, parallel))
    assert all("spread" in r.final for r in parallel)  # a probe defined here reached the workers


def test_a_dask_cluster_gives_the_sequential_results(corpus, sequential):
    distributed = pytest.importorskip("distributed")
    # A real cluster on the loopback address: two worker processes of one thread each.
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:  # fmt: skip
        executor = client.get_executor()
        results = run_many(JOBS, corpus=corpus, executor=executor, final_probe=normlab.probes.residual_norms_probe)
    plain = run_many(JOBS, corpus=corpus, workers=1, final_probe=normlab.probes.residual_norms_probe)
    assert all(same(a, b) for a, b in zip(plain, results))
    assert [r.losses for r in results] == [r.losses for r in sequential]


def test_an_interrupted_sweep_resumes_from_its_store_with_the_same_results(corpus, sequential, tmp_path, monkeypatch):
    import normlab.sweep as sweep

    real, calls = sweep.run, {"n": 0}

    def interrupt_after_two(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt  # what a disconnect or Ctrl-C does mid-sweep
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "run", interrupt_after_two)
    with pytest.raises(KeyboardInterrupt):
        run_many(JOBS, corpus=corpus, workers=1, final_probe=output_spread, store=tmp_path)
    assert len(list(tmp_path.glob("run-*.json"))) == 2  # the two runs that finished are kept
    monkeypatch.setattr(sweep, "run", real)
    resumed = run_many(JOBS, corpus=corpus, workers=2, final_probe=output_spread, store=tmp_path)
    assert len(list(tmp_path.glob("run-*.json"))) == 4
    assert all(same(a, b) for a, b in zip(sequential, resumed))
    monkeypatch.setattr(sweep, "run", lambda *a, **k: pytest.fail("a stored run was trained again"))
    again = run_many(JOBS, corpus=corpus, workers=1, final_probe=output_spread, store=tmp_path)
    assert all(same(a, b) for a, b in zip(sequential, again))


def test_a_stored_run_is_strict_json_with_the_threads_its_workers_used(corpus, tmp_path):
    torch.set_num_threads(2)
    try:
        run_many(JOBS[:2], corpus=corpus, workers=2, store=tmp_path)
    finally:
        torch.set_num_threads(1)
    for path in tmp_path.glob("run-*.json"):
        payload = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
        p = payload["meta"]["provenance"]
        assert p["corpus_sha256"] == corpus.fingerprint[:12] and p["torch_threads"] == 1  # the workers', not 2


def test_a_failing_run_is_reported_with_its_configuration_and_the_others_finish(corpus, tmp_path):
    bad = (dict(TINY, n_heads=3), config(7))  # 16 is not divisible by 3
    jobs = [JOBS[0], bad, JOBS[2]]
    with pytest.raises(SweepError, match=r"1 of 3 runs failed") as caught:
        run_many(jobs, corpus=corpus, workers=2, store=tmp_path)
    ((index, model_kwargs, failed_config, tb),) = caught.value.failures
    assert index == 1 and model_kwargs["n_heads"] == 3 and failed_config.seed == 7
    assert "not divisible by n_heads" in tb and "seed 7" in str(caught.value)
    assert len(list(tmp_path.glob("run-*.json"))) == 2
    kept = caught.value.results
    assert kept[1] is None and kept[0] is not None and kept[2] is not None


def test_the_default_uses_the_cores_there_are_on_a_cpu_and_one_process_on_a_gpu(monkeypatch):
    import normlab.sweep as sweep

    if hasattr(os, "sched_getaffinity"):
        assert default_workers() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(sweep, "get_device", lambda: torch.device("cuda"))
    assert default_workers() == 1  # a GPU: runs stay in-process (batched)


def test_a_batched_sweep_gives_the_one_by_one_curves_to_float_tolerance(corpus):
    # What run_many does by default on a GPU, checked here on the CPU: K runs as one computation.
    jobs = [(TINY, config(seed, lr=lr)) for seed, lr in ((0, 1e-3), (1, 3e-3), (2, 1e-2))]
    one_by_one = run_many(jobs, corpus=corpus, workers=1)
    batched = run_many(jobs, corpus=corpus, workers=1, batched=True)
    for a, b in zip(one_by_one, batched):
        assert a.status == b.status and a.config == b.config
        torch.testing.assert_close(b.losses, a.losses, rtol=1e-5, atol=0)
        torch.testing.assert_close([v for _, v in b.evals], [v for _, v in a.evals], rtol=1e-5, atol=0)
        assert b.initial_val == pytest.approx(a.initial_val, rel=1e-5)


def test_a_batched_group_that_fails_warns_and_trains_one_by_one(corpus, monkeypatch):
    import normlab.batched

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(normlab.batched, "train_batched", out_of_memory)
    with pytest.warns(UserWarning, match="batched training of 2 runs failed .*CUDA out of memory"):
        results = run_many(JOBS[2:], corpus=corpus, workers=1, batched=True)
    assert [r.config["seed"] for r in results] == [2, 3]


def test_a_job_that_cannot_be_batched_trains_as_a_single_run_without_a_warning(corpus, recwarn):
    # Tracking the model update is per-run work that batching does not do: such a job is trained
    # one by one straight away, beside the batched group of the others.
    tracked = (TINY, dataclasses.replace(config(5), track_model_update=True))
    jobs = [(TINY, config(0)), tracked, (TINY, config(1))]
    results = run_many(jobs, corpus=corpus, workers=1, batched=True)
    assert not [w for w in recwarn if "batched training" in str(w.message)]
    alone = run_many([tracked], corpus=corpus, workers=1)[0]
    assert results[1].losses == alone.losses and results[1].config["seed"] == 5


def test_progress_goes_to_the_output_stream_with_runs_finished_of_runs_to_go(corpus, capfd, monkeypatch):
    import normlab.sweep as sweep

    monkeypatch.setattr(sweep, "REPORT_EVERY", 0.0)
    run_many(JOBS[:3], corpus=corpus, workers=1, desc="test sweep")
    err = capfd.readouterr().err
    assert "normlab: test sweep: 3 of 3 runs to train (0 from the store) on this process" in err
    assert "normlab: test sweep: 2/3 runs finished" in err and "3/3 runs finished in" in err
    run_many(JOBS[:1], corpus=corpus, workers=1, progress=False)
    assert "normlab" not in capfd.readouterr().err


WORKER_SCRIPT = """
import os, sys, time
import normlab
from normlab import TrainConfig
from normlab.sweep import default_executor, run_many

jobs = [(dict(d_model=16, n_heads=2, n_layers=2), TrainConfig(steps=100000, batch_size=4, seq_len=16, seed=s))
        for s in range(2)]
pool = default_executor(2)
pids = [f.result() for f in [pool.submit(os.getpid) for _ in range(8)]]  # the workers, started
print(" ".join(map(str, sorted(set(pids)))), flush=True)
run_many(jobs, workers=2)  # hours of training; the test kills this process
"""


def _session(_: int) -> int:
    return os.getsid(0)


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="sessions are a POSIX notion")
def test_default_workers_run_in_a_session_of_their_own():
    # So that the scheduler gives them their own share under load, not a part of the kernel's.
    from normlab.sweep import default_executor

    sessions = set(default_executor(2).map(_session, range(4)))
    assert os.getsid(0) not in sessions


def test_workers_exit_when_their_parent_is_killed_mid_sweep(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(WORKER_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert pids, "the sweep never started its workers"
        time.sleep(2.0)  # the workers are now training
        assert all(_alive(p) for p in pids)
        parent.send_signal(signal.SIGKILL)  # a Colab "restart runtime", a killed build
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "orphaned workers kept training"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return True


def test_a_worker_killed_mid_run_loses_no_finished_run(corpus, tmp_path, sequential):
    marker = tmp_path / "kill-once"
    marker.write_text("")
    store = tmp_path / "store"

    def kill_once(model, x, y) -> dict:
        if os.path.exists(str(marker)):
            os.remove(str(marker))
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies (out of memory, say) mid-sweep
        return output_spread(model, x, y)

    with pytest.raises(SweepError) as caught:
        run_many(JOBS, corpus=corpus, workers=2, final_probe=kill_once, store=store)
    assert "a worker process failed" in str(caught.value)
    finished = [r for r in caught.value.results if r is not None]
    assert len(list(store.glob("run-*.json"))) == len(finished)  # every finished run was stored
    resumed = run_many(JOBS, corpus=corpus, workers=2, final_probe=kill_once, store=store)
    assert [r.losses for r in resumed] == [r.losses for r in sequential]


def test_a_sweep_run_from_a_script_needs_no_main_guard_for_its_workers(tmp_path):
    # loky's workers never re-import the calling script, so a plain script (and a notebook) works.
    script = tmp_path / "plain.py"
    script.write_text(
        textwrap.dedent(
            """
            import normlab
            from normlab import TrainConfig
            jobs = [(dict(d_model=16, n_heads=2, n_layers=1), TrainConfig(steps=3, batch_size=2, seq_len=8, seed=s))
                    for s in range(2)]
            print(len(normlab.run_many(jobs, workers=2, progress=False)))
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
