"""The store never hands back a stale run: its key changes with everything that changes a result,
and a sweep loses nothing to a failed write, a truncated file or a writer killed mid-write."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import normlab
import normlab.sweep as sweep
from normlab import TrainConfig
from normlab.store import _source_hash, atomic_write_text, callable_key
from normlab.sweep import SweepError, run_many

TINY = dict(d_model=16, n_heads=2, n_layers=1, max_seq_len=16)
CONFIG = TrainConfig(steps=6, batch_size=4, seq_len=16, eval_every=3, log_every=3, seed=0)
JOBS = [(TINY, CONFIG), (TINY, TrainConfig(**{**CONFIG.__dict__, "seed": 1}))]


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


@pytest.fixture
def count_runs(monkeypatch):
    """How many runs the sweeps of a test actually train (stored ones are not trained)."""
    real, calls = sweep.run, {"n": 0}

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "run", counting)
    return calls


def stored(store: Path) -> list[Path]:
    return sorted(store.glob("run-*.json"))


def test_a_change_to_normlabs_source_changes_every_key(tmp_path, corpus, count_runs, monkeypatch):
    package = Path(normlab.__file__).parent
    copy = tmp_path / "normlab"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "corpus"))
    before = _source_hash.__wrapped__(str(copy))  # not the cached value
    init = copy / "init.py"
    init.write_text(init.read_text().replace("std=0.02 * gain", "std=0.021 * gain"))  # edit init_block_
    assert _source_hash.__wrapped__(str(copy)) != before
    # ... and a sweep keys its runs by that hash: changed code, no stored run comes back.
    store = tmp_path / "store"
    run_many(JOBS[:1], corpus=corpus, workers=1, store=store)
    monkeypatch.setattr(sweep, "source_hash", lambda: "a different normlab")
    run_many(JOBS[:1], corpus=corpus, workers=1, store=store)
    assert count_runs["n"] == 2 and len(stored(store)) == 2


def probe_with(scale: float):
    @torch.no_grad()
    def probe(model, x, y) -> dict:
        return {"scaled_loss": scale * float(torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()))}

    return probe


class CallableProbe:
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, model, x, y) -> dict:
        return {"scale": self.scale}


def scaled(model, x, y, *, scale: float) -> dict:
    return {"scale": scale}


def test_a_probes_closure_values_are_part_of_its_key(tmp_path, corpus):
    first = run_many(JOBS[:1], corpus=corpus, workers=1, final_probe=probe_with(1.0), store=tmp_path)
    second = run_many(JOBS[:1], corpus=corpus, workers=1, final_probe=probe_with(2.0), store=tmp_path)
    assert second[0].final["scaled_loss"] == pytest.approx(2 * first[0].final["scaled_loss"])
    assert len(stored(tmp_path)) == 2


@pytest.mark.parametrize(
    "make",
    [lambda s: functools.partial(scaled, scale=s), lambda s: CallableProbe(s)],
    ids=["partial", "callable object"],
)
def test_partial_and_callable_object_probes_resume_and_are_told_apart(tmp_path, corpus, count_runs, make):
    assert callable_key(make(1.0)) == callable_key(make(1.0))  # no memory address in the key
    assert callable_key(make(1.0)) != callable_key(make(2.0))
    run_many(JOBS[:1], corpus=corpus, workers=1, final_probe=make(1.0), store=tmp_path)
    again = run_many(JOBS[:1], corpus=corpus, workers=1, final_probe=make(1.0), store=tmp_path)
    other = run_many(JOBS[:1], corpus=corpus, workers=1, final_probe=make(2.0), store=tmp_path)
    assert count_runs["n"] == 2 and again[0].final["scale"] == 1.0 and other[0].final["scale"] == 2.0


def test_the_validation_split_is_part_of_the_corpus_fingerprint_and_the_key(tmp_path, corpus, count_runs):
    half = normlab.load_corpus(val_fraction=0.5)
    assert half.fingerprint != corpus.fingerprint
    a = run_many(JOBS[:1], corpus=corpus, workers=1, store=tmp_path)
    b = run_many(JOBS[:1], corpus=half, workers=1, store=tmp_path)
    assert count_runs["n"] == 2 and a[0].unigram_val != b[0].unigram_val


def test_device_path_and_optimizer_kernel_are_part_of_the_key(tmp_path, corpus, count_runs, monkeypatch):
    run_many(JOBS[:1], corpus=corpus, workers=1, store=tmp_path)
    run_many(JOBS[:1], corpus=corpus, workers=1, store=tmp_path, batched=True)  # another path: trained again
    monkeypatch.setattr(sweep, "_adamw_kernel", lambda device: "some other AdamW")
    run_many(JOBS[:1], corpus=corpus, workers=1, store=tmp_path)
    monkeypatch.setattr(sweep, "_device_key", lambda device: "another device")
    run_many(JOBS[:1], corpus=corpus, workers=1, store=tmp_path)
    assert len(stored(tmp_path)) == 4 and count_runs["n"] == 3  # the batched run trains outside sweep.run


def test_a_probe_that_cannot_be_keyed_warns_and_is_never_resumed(tmp_path, corpus, count_runs):
    handle = object()  # no stable description

    def probe(model, x, y) -> dict:
        return {"handle": id(handle) > 0}

    for _ in range(2):
        with pytest.warns(UserWarning, match="a probe cannot be keyed"):
            run_many(JOBS[:1], corpus=corpus, workers=1, final_probe=probe, store=tmp_path)
    assert count_runs["n"] == 2 and stored(tmp_path) == []


def test_a_probe_that_returns_a_tensor_and_a_mixed_placement_list_are_stored(tmp_path, corpus):
    mixed = dict(TINY, n_layers=2, norm=[normlab.VARIANTS["post"], "pre"])
    jobs = [(mixed, CONFIG)]
    first = run_many(jobs, corpus=corpus, workers=1, probe=normlab.probes.residual_norms_probe, store=tmp_path)
    (path,) = stored(tmp_path)
    again = run_many(jobs, corpus=corpus, workers=1, probe=normlab.probes.residual_norms_probe, store=tmp_path)
    assert first[0].logs == again[0].logs and isinstance(first[0].logs[0]["residual_norms"], list)
    assert again[0].model["norm"] == (normlab.VARIANTS["post"], "pre")


def test_a_store_that_cannot_be_written_fails_before_anything_trains(tmp_path, corpus, count_runs):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot be written"):
        run_many(JOBS, corpus=corpus, workers=1, store=blocker / "store")
    with pytest.raises(ValueError, match="job 0: its model kwargs cannot be stored as JSON"):
        run_many([(dict(TINY, norm_kind=object()), CONFIG)], corpus=corpus, workers=1, store=tmp_path)
    assert count_runs["n"] == 0


def test_a_failed_write_is_that_runs_failure_not_the_end_of_the_sweep(tmp_path, corpus, monkeypatch):
    real, writes = sweep.atomic_write_text, {"n": 0}

    def disk_full_once(path, text):
        writes["n"] += 1
        if writes["n"] == 1:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(sweep, "atomic_write_text", disk_full_once)
    with pytest.raises(SweepError, match="1 of 2 runs failed") as caught:
        run_many(JOBS, corpus=corpus, workers=1, store=tmp_path)
    assert "could not be stored" in caught.value.failures[0][3]
    assert all(r is not None for r in caught.value.results)  # both trained; the results are kept
    assert len(stored(tmp_path)) == 1


@pytest.mark.parametrize("damage", ["", '{"meta": {"provenance"', "not json at all"])
def test_a_truncated_or_empty_run_file_is_set_aside_and_trained_again(tmp_path, corpus, damage):
    first = run_many(JOBS, corpus=corpus, workers=1, store=tmp_path)
    broken = stored(tmp_path)[0]
    broken.write_text(damage)
    with pytest.warns(UserWarning, match="could not be read .* set aside"):
        again = run_many(JOBS, corpus=corpus, workers=1, store=tmp_path)
    assert [r.losses for r in again] == [r.losses for r in first]
    assert len(list(tmp_path.glob("*.unreadable-*"))) == 1 and len(stored(tmp_path)) == 2


def test_writes_are_atomic_with_a_temporary_file_of_their_own(tmp_path):
    target = tmp_path / "run.json"
    atomic_write_text(target, json.dumps({"a": 1}))
    assert json.loads(target.read_text()) == {"a": 1} and list(tmp_path.iterdir()) == [target]
    normlab.results.save_results(tmp_path / "results.json", [], {"provenance": {}})
    assert not list(tmp_path.glob("*.tmp"))


KILLED_WRITER = """
import os, sys, time
import normlab.store as store
real_fsync = os.fsync
def stall(fd):  # the data is written, not yet renamed: the moment a kill does most harm
    print("writing", flush=True)
    time.sleep(60)
os.fsync = stall
store.atomic_write_text(sys.argv[1], "{" + '"x": 1, ' * 200000 + '"y": 2}')
"""


def test_a_writer_killed_mid_write_leaves_the_store_readable_and_loses_nothing(tmp_path, corpus):
    first = run_many(JOBS, corpus=corpus, workers=1, store=tmp_path)
    victim = stored(tmp_path)[0]
    good = victim.read_text()
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(victim)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=10)
    assert victim.read_text() == good  # the old run, whole
    assert list(tmp_path.glob(".run-*.tmp"))  # the half-written temporary file, ignored by the store
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to set aside
        again = run_many(JOBS, corpus=corpus, workers=1, store=tmp_path)
    assert [r.losses for r in again] == [r.losses for r in first]


def test_two_sweeps_sharing_a_store_never_read_a_half_written_run(tmp_path, corpus):
    import threading

    target = tmp_path / "shared.json"
    texts = [json.dumps({"writer": w, "pad": "x" * 200000}) for w in range(2)]
    errors: list[str] = []

    def write(text: str) -> None:
        for _ in range(20):
            atomic_write_text(target, text)

    def read() -> None:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if target.exists():
                try:
                    json.loads(target.read_text())
                except json.JSONDecodeError as error:
                    errors.append(str(error))

    threads = [threading.Thread(target=write, args=(t,)) for t in texts] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not list(tmp_path.glob("*.tmp"))


def test_normlab_store_names_the_chapters_store_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("NORMLAB_STORE", raising=False)
    assert normlab.default_store("chapter-9") is None  # no variable: nothing is written
    monkeypatch.setenv("NORMLAB_STORE", str(tmp_path))
    assert normlab.default_store("chapter-9") == tmp_path / "chapter-9"
    with pytest.raises(ValueError, match="one plain directory name"):
        normlab.default_store("../elsewhere")


def test_run_task_is_self_contained(corpus):
    # What a Dask or Ray worker calls: it loads the corpus itself and sets its own thread count.
    result, error = sweep.run_task(TINY, CONFIG, corpus.spec())
    assert error is None and result.losses == normlab.run(TINY, CONFIG, corpus=corpus).losses
    assert os.environ.get("OMP_NUM_THREADS") in (None, "1") or torch.get_num_threads() == 1
    _, error = sweep.run_task(dict(TINY, n_heads=3), CONFIG, corpus.spec())
    assert "not divisible by n_heads" in error
