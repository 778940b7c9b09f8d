"""A stored board is used only if it holds exactly the sweep's runs and a live subset reproduces it;
otherwise the sweep is trained live, with the reason."""

import dataclasses
import json

import pytest

import normlab
from normlab import TrainConfig
from normlab.results import provenance, save_results

TINY = dict(d_model=16, n_heads=2, n_layers=1, max_seq_len=16)


def config(seed: int, **kw) -> TrainConfig:
    return TrainConfig(steps=8, batch_size=4, seq_len=16, eval_every=8, log_every=8, seed=seed, **kw)


JOBS = [(TINY, config(s)) for s in range(3)]


@pytest.fixture(scope="module")
def corpus():
    return normlab.load_corpus()


@pytest.fixture()
def board(tmp_path, corpus):
    results = normlab.run_many(JOBS, corpus=corpus, workers=1)
    path = tmp_path / "board.json"
    save_results(path, results, {"provenance": provenance(corpus)})
    return path, results


def test_a_stored_board_that_reproduces_is_used_and_says_how_it_was_checked(board, corpus):
    path, trained = board
    replay = normlab.replay_or_run(path, JOBS, check=[1], corpus=corpus, workers=1)
    assert replay.source == "stored" and "1 of its 3 runs trained again" in replay.why
    assert [r.final_val_loss for r in replay.results] == pytest.approx([r.final_val_loss for r in trained], abs=1e-4)
    assert replay.largest_difference < 1e-4 and replay.checked[0][0] == 1


def test_a_board_that_does_not_reproduce_is_trained_live(board, corpus, capsys):
    path, trained = board
    payload = json.loads(path.read_text())
    payload["results"][1]["evals"][-1][1] += 0.5  # what a numerical change in the code would do
    path.write_text(json.dumps(payload))
    replay = normlab.replay_or_run(path, JOBS, check=[1], corpus=corpus, workers=1)
    assert replay.source == "live" and "does not reproduce" in replay.why
    assert "training all 3 runs live" in capsys.readouterr().err
    assert [r.final_val_loss for r in replay.results] == [r.final_val_loss for r in trained]


@pytest.mark.parametrize(
    "jobs, reason",
    [
        (JOBS[:2], "it holds 3 runs, the sweep has 2"),
        ([JOBS[0], (dict(TINY, norm="post"), config(1)), JOBS[2]], "run 1's model differs"),
        ([JOBS[0], (TINY, dataclasses.replace(config(1), lr=3e-3)), JOBS[2]], "training config differs in lr"),
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
    assert replay.source == "stored" and [i for i, _, _ in replay.checked] == [best]


def test_a_config_field_added_after_the_board_was_stored_matches_at_its_default(board, corpus):
    """A board stored before TrainConfig gained weight_decay_on was trained under its default."""
    path, _ = board
    payload = json.loads(path.read_text())
    for r in payload["results"]:
        del r["config"]["weight_decay_on"]
    path.write_text(json.dumps(payload))
    assert normlab.replay_or_run(path, JOBS, check=[0], corpus=corpus, workers=1).source == "stored"
    other = [(TINY, dataclasses.replace(c, weight_decay_on="all")) for _, c in JOBS]
    replay = normlab.replay_or_run(path, other, check=[0], corpus=corpus, workers=1)
    assert replay.source == "live" and "differs in weight_decay_on" in replay.why


def test_a_chapters_sweep_is_its_stored_board_at_this_scale_or_live(board, corpus, tmp_path, monkeypatch):
    path, trained = board
    monkeypatch.chdir(tmp_path)  # chapters run beside their _data/
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    monkeypatch.delenv("NORMLAB_RESULTS_DIR", raising=False)
    live = normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1)
    assert live.source == "live" and "no stored board for the ci scale" in live.why
    (tmp_path / "_data").mkdir()
    path.rename(tmp_path / "_data" / "grid-ci.json")
    assert normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1).source == "stored"
    monkeypatch.setenv("NORMLAB_SCALE", "cpu")  # another scale's board is not this one
    assert normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1).source == "live"
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    monkeypatch.setenv("NORMLAB_RESULTS_DIR", str(tmp_path / "out"))  # a maintainer making boards
    made = normlab.stored_sweep("grid", JOBS, [0], corpus=corpus, workers=1)
    assert made.source == "live" and "to be stored" in made.why
    saved = normlab.save_sweep("grid", made.results, {"provenance": provenance(corpus)})
    assert saved == tmp_path / "out" / "grid-ci.json" and saved.exists()
    monkeypatch.delenv("NORMLAB_RESULTS_DIR")
    assert normlab.save_sweep("grid", made.results, {}) is None
