"""A stored board is shown only for exactly the sweep's runs, and confirmed by the float64 first steps of
a few of them: another processor's rounding passes that check, a change to the code does not."""

import dataclasses
import json
import lzma
import os
import subprocess
import sys

import pytest
import torch

import normlab
from normlab import TrainConfig
from normlab.replay import TOLERANCE, early_meta, fingerprint
from normlab.results import provenance, save_results

TINY = dict(d_model=16, n_heads=2, n_layers=2, max_seq_len=16, init="xavier")


def config(seed: int, **kw) -> TrainConfig:
    kw = {"lr": 3e-3, "warmup": 2, **kw}
    return TrainConfig(steps=8, batch_size=4, seq_len=16, eval_every=8, log_every=8, seed=seed, **kw)


JOBS = [(TINY, config(s)) for s in range(3)]


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


def make_board(path, jobs, corpus):
    results = normlab.run_many(jobs, corpus=corpus, workers=1)
    save_results(path, results, {"provenance": provenance(corpus), "early": early_meta(results, corpus)})
    return results


@pytest.fixture()
def board(tmp_path, corpus, monkeypatch):
    monkeypatch.delenv("NORMLAB_BOARDS", raising=False)
    path = tmp_path / "board.json.xz"
    return path, make_board(path, JOBS, corpus)


def test_a_board_ships_compressed_and_keeps_its_fingerprints_whole(board):
    path, trained = board
    payload = json.loads(lzma.decompress(path.read_bytes()))
    assert payload["results"][0]["losses"][0] == float(f"{trained[0].losses[0]:.5g}")  # the runs: 5 digits
    early = payload["meta"]["early"]
    assert early["dtype"] == "float64" and len(early["fingerprints"]) == 3
    assert len(early["fingerprints"][0]) == 1 + normlab.replay.EARLY_STEPS
    assert early["fingerprints"][0] == fingerprint(*JOBS[0])  # exact, not rounded


def test_a_board_confirmed_by_its_early_check_is_shown_and_says_how_it_was_checked(board, corpus):
    path, trained = board
    replay = normlab.replay_or_run(path, JOBS, check=[1], corpus=corpus, workers=1)
    assert replay.source == "stored" and replay.why.startswith("confirmed: 1 of its 3 runs")
    assert [r.final_val_loss for r in replay.results] == pytest.approx([r.final_val_loss for r in trained], abs=1e-4)
    assert replay.largest_difference <= TOLERANCE and replay.check.differences[0][0] == 1


def _fingerprint_elsewhere(job, env: dict) -> list:
    """The fingerprint computed in another process with other CPU kernels (a machine that rounds otherwise)."""
    code = (
        "import json, sys, normlab; from normlab import TrainConfig; from normlab.replay import fingerprint; "
        "m, c = json.loads(sys.argv[1]); c['betas'] = tuple(c['betas']); "
        "print(json.dumps(fingerprint(m, TrainConfig(**c))))"
    )
    arg = json.dumps([job[0], dataclasses.asdict(job[1])])
    out = subprocess.run([sys.executable, "-c", code, arg], env={**os.environ, **env}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isa", ["default", "avx2"])
def test_another_kernels_rounding_passes_the_check(isa):
    if isa == "avx2" and torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2")
    here = fingerprint(*JOBS[0])
    there = _fingerprint_elsewhere(JOBS[0], {"ATEN_CPU_CAPABILITY": isa, "MKL_ENABLE_INSTRUCTIONS": "AVX2" if
                                             isa == "avx2" else "SSE4_2", "ONEDNN_MAX_CPU_ISA": isa.upper() if isa ==
                                             "avx2" else "SSE41", "OMP_NUM_THREADS": "2"})  # fmt: skip
    assert max(abs(a - b) / abs(a) for a, b in zip(here, there)) <= TOLERANCE / 100


def _scaled_xavier(monkeypatch):
    real = torch.nn.init.xavier_normal_
    monkeypatch.setattr(torch.nn.init, "xavier_normal_", lambda w, gain=1.0: real(w, gain=gain * 1.001))


def _smaller_eps(monkeypatch):
    real = normlab.norms.make_norm
    monkeypatch.setattr(normlab.model, "make_norm", lambda kind, d, eps, bias: real(kind, d, eps / 10, bias))


def _warmup_off_by_one(monkeypatch):
    real = normlab.training.lr_multiplier

    def shifted(schedule, step, *, warmup, total, **kw):
        return real(schedule, step, warmup=warmup + 1, total=total, **kw)

    monkeypatch.setattr(normlab.training, "lr_multiplier", shifted)


def _tighter_clip(monkeypatch):
    real = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm, **kw: real(params, max_norm * 0.9))


# A clip that binds in some of the first steps and not others (the blocks' gradient norm moves between
# about 0.4 and 1.4 in them): only then can a clip change what Adam does, which is blind to a constant scale.
CLIPPED = [(TINY, config(s, clip=0.8)) for s in range(3)]


@pytest.mark.parametrize(
    "change, jobs",
    [(_scaled_xavier, JOBS), (_smaller_eps, JOBS), (_warmup_off_by_one, JOBS), (_tighter_clip, CLIPPED)],
    ids=["init std +0.1%", "norm eps / 10", "warmup one step longer", "clip 10% tighter"],
)
def test_a_change_to_the_code_fails_the_check_and_is_never_shown_as_current(
    tmp_path, corpus, monkeypatch, capsys, change, jobs
):
    monkeypatch.delenv("NORMLAB_BOARDS", raising=False)
    path = tmp_path / "board.json.xz"
    make_board(path, jobs, corpus)
    assert normlab.replay_or_run(path, jobs, check=[0, 2], corpus=corpus, workers=1).source == "stored"
    change(monkeypatch)
    replay = normlab.replay_or_run(path, jobs, check=[0, 2], corpus=corpus, workers=1)
    assert replay.source == "unconfirmed" and replay.why.startswith("NOT confirmed: 2 of the 2 runs")
    assert replay.largest_difference > 10 * TOLERANCE  # far outside what rounding does
    print(f"{change.__name__}: {replay.largest_difference:.1e}")
    assert "the code that made this board has changed" in capsys.readouterr().err
    monkeypatch.setenv("NORMLAB_BOARDS", "strict")  # the tests: such a board fails
    with pytest.raises(ValueError, match="make the boards again"):
        normlab.replay_or_run(path, jobs, check=[0], corpus=corpus, workers=1)


def test_live_trains_the_board_here_when_the_reader_asks(board, corpus, monkeypatch):
    path, trained = board
    monkeypatch.setenv("NORMLAB_BOARDS", "live")
    replay = normlab.replay_or_run(path, JOBS, check=[0], corpus=corpus, workers=1)
    assert replay.source == "live" and "NORMLAB_BOARDS=live" in replay.why
    assert [r.losses for r in replay.results] == [r.losses for r in trained]
    monkeypatch.setenv("NORMLAB_BOARDS", "fresh")
    with pytest.raises(ValueError, match="valid choices: stored, live, strict"):
        normlab.replay_or_run(path, JOBS, check=[0], corpus=corpus, workers=1)


def test_a_board_without_fingerprints_is_shown_but_not_confirmed(tmp_path, corpus, monkeypatch):
    monkeypatch.delenv("NORMLAB_BOARDS", raising=False)
    path = tmp_path / "old.json"
    save_results(path, normlab.run_many(JOBS, corpus=corpus, workers=1), {"provenance": provenance(corpus)})
    replay = normlab.replay_or_run(path, JOBS, check=[0], corpus=corpus, workers=1)
    assert replay.source == "unconfirmed" and "no early fingerprints" in replay.why


@pytest.mark.parametrize(
    "jobs, reason",
    [
        (JOBS[:2], "it holds 3 runs, the sweep has 2"),
        ([JOBS[0], (dict(TINY, norm="post"), config(1)), JOBS[2]], "run 1's model differs"),
        ([JOBS[0], (TINY, dataclasses.replace(config(1), lr=3e-2)), JOBS[2]], "training config differs in lr"),
    ],
)
def test_a_board_of_other_runs_is_never_read_as_this_sweep(board, corpus, jobs, reason):
    path, _ = board
    replay = normlab.replay_or_run(path, jobs, check=[0], corpus=corpus, workers=1)
    assert replay.source == "live" and reason in replay.why


def test_no_board_or_a_bad_check_list(tmp_path, corpus):
    assert normlab.replay_or_run(tmp_path / "none.json", JOBS[:1], check=[0], corpus=corpus, workers=1).source == "live"
    for check in ([], [3], [True]):
        with pytest.raises(ValueError, match="check"):
            normlab.replay_or_run(tmp_path / "none.json", JOBS, check=check, corpus=corpus, workers=1)


def test_the_check_can_be_chosen_from_the_stored_results(board, corpus):
    path, trained = board
    best = min(range(3), key=lambda i: trained[i].final_val_loss)
    replay = normlab.replay_or_run(
        path, JOBS, lambda stored: [min(range(3), key=lambda i: stored[i].final_val_loss)], corpus=corpus, workers=1
    )
    assert replay.source == "stored" and [i for i, _ in replay.check.differences] == [best]


def test_a_config_field_added_after_the_board_was_stored_matches_at_its_default(board, corpus):
    """A board stored before TrainConfig gained weight_decay_on was trained under its default."""
    path, _ = board
    payload = json.loads(lzma.decompress(path.read_bytes()))
    for r in payload["results"]:
        del r["config"]["weight_decay_on"]
    path.write_bytes(lzma.compress(json.dumps(payload).encode()))
    assert normlab.replay_or_run(path, JOBS, check=[0], corpus=corpus, workers=1).source == "stored"
    other = [(TINY, dataclasses.replace(c, weight_decay_on="all")) for _, c in JOBS]
    replay = normlab.replay_or_run(path, other, check=[0], corpus=corpus, workers=1)
    assert replay.source == "live" and "differs in weight_decay_on" in replay.why


def test_a_chapters_sweep_is_the_board_that_ships_with_normlab(board, corpus, tmp_path, monkeypatch):
    path, trained = board
    boards = tmp_path / "boards"
    boards.mkdir()
    here = lambda name, scale=None: boards / f"{name}-{scale or normlab.get_scale()}.json.xz"  # noqa: E731
    monkeypatch.setattr(normlab.replay, "board_path", here)
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    monkeypatch.delenv("NORMLAB_RESULTS_DIR", raising=False)
    live = normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1)
    assert live.source == "live" and "no stored board at grid-ci.json.xz" in live.why
    path.rename(boards / "grid-ci.json.xz")
    assert normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1).source == "stored"
    monkeypatch.setenv("NORMLAB_SCALE", "cpu")  # another scale's board is not this one, unless asked for
    assert normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1).source == "live"
    assert normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, scale="ci", workers=1).source == "stored"
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    monkeypatch.setenv("NORMLAB_RESULTS_DIR", str(tmp_path / "out"))  # a maintainer making boards
    made = normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1)
    assert made.source == "live" and "to be stored" in made.why
    saved = normlab.save_sweep("grid", made.results, {"provenance": provenance(corpus)})
    assert saved == tmp_path / "out" / "grid-ci.json.xz" and saved.exists()
    assert normlab.replay_or_run(saved, JOBS, [0], corpus=corpus, workers=1).source == "stored"
    monkeypatch.delenv("NORMLAB_RESULTS_DIR")
    assert normlab.save_sweep("grid", made.results, {}) is None


def test_the_shipped_boards_are_found_inside_the_installed_package():
    path = normlab.replay.board_path("warmup-grid", "ci")
    assert path.exists() and path.parent.name == "boards" and path.parent.parent.name == "normlab"
