"""The leaderboard's protocol: rates chosen on one set of seeds, reported on fresh ones."""

import json
import lzma
import math

import pytest

import normlab
from normlab import board, board_replay
from normlab.board import LONG, SIZES, Benchmark, Cell
from normlab.record import TrainResult, plateau_exit, steps_to
from normlab.stats import one_sample

SMALL = Benchmark(d_model=16, seq=8, batch=2, steps=10, depth=2, lrs=(1e-3, 1e-2, 1e-1), ladder=(1, 2, 4),
                  n_select=2, n_report=3, contestants=("pre", "post"))  # fmt: skip


def fake(loss: float) -> TrainResult:
    """A finished run ending at ``loss`` (NaN: diverged; above 3.4, 0.1 below the unigram level: stalled)."""
    status = "diverged" if math.isnan(loss) else "completed"
    evals = [(10, 3.0)] if math.isnan(loss) else [(10, loss)]
    return TrainResult(config={}, status=status, evals=evals, initial_val=5.5, unigram_val=3.5)


def test_rates_are_chosen_on_seeds_that_never_report():
    for bm in (SMALL, *(SIZES.get(s) for s in ("ci", "cpu", "gpu")), LONG):
        assert not set(bm.select_seeds) & set(bm.report_seeds)
        assert len(bm.select_seeds) == bm.n_select and len(bm.report_seeds) == bm.n_report


def test_the_long_budget_keeps_its_seeds_under_another_seed_base(monkeypatch):
    monkeypatch.setenv("NORMLAB_SEED_BASE", "700")
    assert LONG.select_seeds == (0, 1) and LONG.report_seeds == (2, 3, 4, 5, 6)
    assert SMALL.select_seeds == (700, 701)


def test_round1_is_the_grid_in_every_arm_and_round2_reports_its_best_on_fresh_seeds():
    plan1 = board.round1(SMALL)
    assert len(plan1.jobs()) == 2 * 2 * 3 * 2  # contestants x arms x rates x selection seeds
    losses = {1e-3: [2.5, 2.6], 1e-2: [2.2, float("nan")], 1e-1: [2.3, 2.35]}  # 1e-2's median is worse: a NaN
    results = [fake(v) for c, ss, _ in plan1.entries for v in losses[c.lr]]
    runs1 = plan1.collect(results)
    assert board.best_rate(runs1, "pre", 2, "warmup", SMALL.lrs) == 1e-1
    plan2 = board.round2(SMALL, runs1)
    report = [(c, ss) for c, ss, along in plan2.entries if along]
    assert {c for c, _ in report} == {Cell(n, 2, 1e-1, a) for n in ("pre", "post") for a in ("no warmup", "warmup")}
    assert all(ss == SMALL.report_seeds for _, ss in report)
    ladder = [c for c, ss, along in plan2.entries if not along]
    assert {c.n_layers for c in ladder} == {1, 4} and {c.lr for c in ladder} == set(SMALL.lrs)  # 3 around 1e-1
    assert {c.arm for c in ladder} == {"warmup"}
    runs2 = plan2.collect([fake(2.0 + c.lr) for c, ss, _ in plan2.entries for _ in ss])
    assert board.round3(SMALL, runs1, runs2).entries == ()  # the window is the whole grid: nothing to widen
    plan4 = board.round4(SMALL, runs1, runs2, {})
    assert [(c.n_layers, c.lr) for c, _, _ in plan4.entries] == [(1, 1e-3), (4, 1e-3)] * 2
    assert plan4.index(plan4.entries[1][0], "report") == SMALL.n_report


def select(bm: Benchmark, losses: dict) -> dict:
    """Selection runs of pre-LN at 2 blocks in the warmup arm: rate -> per-seed final losses."""
    return {(Cell("pre", 2, lr, "warmup"), "select"): [fake(v) for v in vs] for lr, vs in losses.items()}


def test_a_rate_where_a_selection_seed_stalled_is_not_chosen_for_its_median():
    # 1e-2 has the lowest median, but one seed of three stalled there (3.45: within 0.1 of the unigram)
    runs = select(SIZES.get("cpu"), {1e-3: [2.5, 2.5, 2.5], 1e-2: [2.3, 2.3, 3.45], 1e-1: [float("nan")] * 3})
    assert board.trained_rates(runs, "pre", 2, "warmup", (1e-3, 1e-2, 1e-1)) == [1e-3]
    assert board.best_rate(runs, "pre", 2, "warmup", (1e-3, 1e-2, 1e-1)) == 1e-3
    assert board.best_rate(runs, "pre", 2, "warmup", (1e-3, 1e-2, 1e-1), veto=False) == 1e-2  # the lowest median
    # where no rate trained on every seed, the lowest median wins (a diverged run is worst)
    runs = select(SIZES.get("cpu"), {1e-3: [3.45, 2.5], 1e-2: [2.3, 3.45], 1e-1: [float("nan"), 2.0]})
    assert board.best_rate(runs, "pre", 2, "warmup", (1e-3, 1e-2, 1e-1)) == 1e-2


def test_where_the_veto_moved_a_choice_the_lowest_median_is_reported_too():
    losses = {1e-3: [3.0, 3.0], 1e-2: [2.3, 3.45], 1e-1: [float("nan")] * 2}  # 1e-2: lowest median, one stall
    plan1 = board.round1(SMALL)
    runs1 = plan1.collect([fake(losses[c.lr][i]) for c, ss, _ in plan1.entries for i, _ in enumerate(ss)])
    assert board.veto_moved(runs1, "pre", 2, "warmup", SMALL.lrs) == 1e-2
    report = [c for c, ss, along in board.round2(SMALL, runs1).entries if along]
    assert [c.lr for c in report if c.name == "pre" and c.arm == "warmup"] == [1e-3, 1e-2]  # chosen first
    quiet = {k: [fake(2.4)] * 2 for k in runs1}  # every rate trains alike: the veto moves nothing
    assert board.veto_moved(quiet, "pre", 2, "warmup", SMALL.lrs) is None


WIDE = Benchmark(d_model=16, seq=8, batch=2, steps=10, depth=1, lrs=(1e-4, 1e-3, 1e-2, 1e-1, 1.0), ladder=(1, 2),
                 n_select=2, n_report=1, arms=("warmup",), contestants=("pre",))  # fmt: skip


def widened(window_losses: dict, extra: dict) -> tuple[tuple[float, ...], float]:
    """Rung 2's widening and final choice, pre-LN's best rate at the sweep depth being 1e-2."""
    runs1 = {(Cell("pre", 1, lr, "warmup"), "select"): [fake(2.0 if lr == 1e-2 else 2.5)] * 2 for lr in WIDE.lrs}
    runs2 = select(WIDE, window_losses)
    plan3 = board.round3(WIDE, runs1, runs2)
    runs3 = select(WIDE, extra)
    assert set(runs3) == {(c, "select") for c, _, _ in plan3.entries}
    ((cell, _, _),) = board.round4(WIDE, runs1, runs2, runs3).entries
    return tuple(c.lr for c, _, _ in plan3.entries), cell.lr


def test_a_rung_whose_choice_sits_on_its_window_edge_gets_the_next_grid_rate():
    assert WIDE.local_rates(1e-2) == (1e-3, 1e-2, 1e-1)
    assert widened({1e-3: [2.6, 2.6], 1e-2: [2.4, 2.4], 1e-1: [2.5, 2.5]}, {}) == ((), 1e-2)  # inside
    assert widened({1e-3: [2.6, 2.6], 1e-2: [2.5, 2.5], 1e-1: [2.4, 2.4]}, {1.0: [2.3, 2.3]}) == ((1.0,), 1.0)
    assert widened({1e-3: [2.4, 2.4], 1e-2: [2.5, 2.5], 1e-1: [2.6, 2.6]}, {1e-4: [2.5, 2.5]}) == ((1e-4,), 1e-3)
    # nothing in the window trained on every seed: one rate below, which does
    stalls = {1e-3: [3.45, 2.6], 1e-2: [2.5, 3.45], 1e-1: [float("nan")] * 2}
    assert widened(stalls, {1e-4: [2.9, 2.9]}) == ((1e-4,), 1e-4)
    # stalled everywhere with the lowest median on the top edge: still only downwards, and labelled
    stalls = {1e-3: [3.46, 3.46], 1e-2: [3.45, 3.45], 1e-1: [3.44, 3.44]}
    assert widened(stalls, {1e-4: [3.47, 3.47]}) == ((1e-4,), 1e-1)


def test_a_rung_failed_only_when_no_selection_run_at_any_rate_tried_there_trained():
    runs1 = {(Cell("pre", 1, lr, "warmup"), "select"): [fake(2.0 if lr == 1e-2 else 2.5)] * 2 for lr in WIDE.lrs}
    fails = select(WIDE, {1e-4: [3.47, 3.47], 1e-3: [3.46, 3.45], 1e-2: [3.45, 3.45], 1e-1: [float("nan")] * 2})
    assert board.rung_failed(WIDE, {**runs1, **fails}, "pre", 2)
    fails[Cell("pre", 2, 1e-3, "warmup"), "select"] = [fake(3.46), fake(2.6)]  # one run trained: not failed
    assert not board.rung_failed(WIDE, {**runs1, **fails}, "pre", 2)
    assert not board.rung_failed(WIDE, runs1, "pre", 1)  # the sweep depth: the whole grid


def test_report_runs_are_evaluated_along_the_run():
    assert SMALL.config(1e-2, 0, "warmup", along=True).eval_every == 1
    assert SMALL.config(1e-2, 0, "warmup").eval_every == 10
    assert SMALL.config(1e-2, 0, "warmup").warmup == 1 and SMALL.config(1e-2, 0, "no warmup").warmup == 0


def test_local_rates_shift_inwards_at_the_grid_ends():
    bm = SIZES.get("cpu")
    assert bm.local_rates(3e-4) == (3e-4, 1e-3, 3e-3)
    assert bm.local_rates(1e-2) == (3e-3, 1e-2, 3e-2)
    assert bm.local_rates(1e-1) == (1e-2, 3e-2, 1e-1)


def test_a_bad_benchmark_names_the_valid_choices():
    with pytest.raises(ValueError, match="valid choices"):
        Benchmark(16, 8, 2, 10, 2, (1e-3,), (2,), 1, 1, arms=("cooldown",))
    with pytest.raises(ValueError, match="include depth"):
        Benchmark(16, 8, 2, 10, 2, (1e-3,), (1, 4), 1, 1)
    with pytest.raises(ValueError, match="increasing"):
        Benchmark(16, 8, 2, 10, 2, (1e-2, 1e-3), (2,), 1, 1)
    with pytest.raises(ValueError, match="valid choices"):
        SMALL.model_kwargs("layernorm-everywhere", 2)


def test_steps_to_a_level_reads_the_evaluations_along_the_run():
    r = TrainResult(config={}, evals=[(10, 2.8), (20, 2.3), (30, 2.1)])
    assert steps_to(r, 2.368) == 20 and steps_to(r, 2.0) is None


def test_a_run_leaves_the_unigram_plateau_when_its_ten_step_mean_is_a_margin_below_it():
    flat, falling = [3.5] * 30, [3.5] * 10 + [3.0] * 20
    assert plateau_exit(TrainResult(config={}, losses=flat, unigram_val=3.5)) is None
    # the 10-step mean first falls below 3.4 once three of its losses are 3.0: 3.5 - 3 x 0.05 = 3.35 at step 13
    assert plateau_exit(TrainResult(config={}, losses=falling, unigram_val=3.5)) == 13
    assert plateau_exit(TrainResult(config={}, losses=falling[:5], unigram_val=3.5)) is None


def test_one_sample_interval_of_per_seed_values():
    p = one_sample([0.19, 0.2, 0.21, float("nan")])  # 0.2 +- 4.30 x 0.006: beyond 0
    assert p.mean == pytest.approx(0.2) and p.dropped == 1 and p.resolved


TINY = Benchmark(d_model=8, seq=8, batch=2, steps=4, depth=1, lrs=(1e-3, 1e-2), ladder=(1, 2), n_select=1,
                 n_report=1, ladder_width=2, evals_along=2, n_heads=2, contestants=("pre",))  # fmt: skip


def make_boards(tmp_path, corpus):
    """Every round of TINY trained and saved as scripts/make_leaderboard.py does, in tmp/boards."""
    from normlab.replay import early_meta
    from normlab.results import provenance, save_results

    (tmp_path / "boards").mkdir()
    runs = []
    for k, make in enumerate(board.rounds(TINY), 1):
        plan = make(runs)
        if not plan.entries:  # TINY's window is its whole grid: round 3 widens nothing
            runs.append({})
            continue
        results = normlab.run_many(plan.jobs(), corpus=corpus, workers=1)
        meta = {"provenance": provenance(corpus), "early": early_meta(results, corpus)}
        save_results(tmp_path / "boards" / f"lb-{k}-ci.json.xz", results, meta)
        runs.append(plan.collect(results))
    return runs


def test_stored_rounds_are_confirmed_under_one_check_shown_when_not_and_trained_when_asked(tmp_path, monkeypatch):
    corpus = normlab.load_corpus()
    monkeypatch.delenv("NORMLAB_BOARDS", raising=False)
    here = lambda name, scale=None: tmp_path / "boards" / f"{name}-{scale}.json.xz"  # noqa: E731
    monkeypatch.setattr(board_replay, "board_path", here)
    trained = make_boards(tmp_path, corpus)
    assert len(trained) == 4 and trained[2] == {} and not (tmp_path / "boards" / "lb-3-ci.json.xz").exists()
    first = lambda k, plan, runs: [0] if k == 4 else []  # noqa: E731  (one run checks all rounds)
    got = board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1)
    assert got.source == "stored" and got.why.startswith("confirmed: 1 of its") and len(got.runs) == 4
    assert got.checked[0][:2] == ("lb-4", 0)
    twice = [board_replay.Stored(TINY, "lb", first, "ci")] * 2
    both = board_replay.replay(twice, corpus=corpus, workers=1)
    assert [r.source for r in both] == ["stored", "stored"]
    real = normlab.training.lr_multiplier  # a change to the code: the schedule's warmup one step longer
    monkeypatch.setattr(normlab.training, "lr_multiplier", lambda s, step, *, warmup, total, **kw: real(
        s, step, warmup=warmup + 1, total=total, **kw))  # fmt: skip
    changed = board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1, train_if_stale=False)
    assert changed.source == "unconfirmed" and "the code that made this board has changed" in changed.why
    assert changed.all_runs() == got.all_runs()  # shown as stored, and said to be so
    monkeypatch.setenv("NORMLAB_BOARDS", "strict")
    with pytest.raises(ValueError, match="make the boards again"):
        board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1)
    monkeypatch.setattr(normlab.training, "lr_multiplier", real)
    monkeypatch.setenv("NORMLAB_BOARDS", "live")
    live = board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1)
    assert live.source == "live" and "NORMLAB_BOARDS=live" in live.why
    cell = live.plans[3].entries[0][0]
    assert live.all_runs()[cell, "report"][0].losses == trained[3][cell, "report"][0].losses
    kept = board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1, train_if_stale=False)
    assert kept.source == "stored"  # the long budget is never trained by a build, live or not
    monkeypatch.delenv("NORMLAB_BOARDS")
    assert board_replay.load_rounds(TINY, "lb", "ci", corpus=corpus).why == "loaded as stored, not checked"
    with pytest.raises(ValueError, match="at least one"):
        board_replay.replay_rounds(TINY, "lb", lambda *_: [], scale="ci", corpus=corpus, workers=1)
    (tmp_path / "boards" / "lb-2-ci.json.xz").unlink()
    assert "no stored board" in board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1).why
    with pytest.raises(ValueError, match="make_leaderboard"):
        board_replay.replay_rounds(TINY, "lb", first, scale="ci", corpus=corpus, workers=1, train_if_stale=False)


def load_script(name: str):
    """A script of scripts/ as a module (they are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_leaderboard_reuses_stored_runs_checks_them_and_refuses_ones_that_do_not_reproduce(tmp_path, monkeypatch):
    import dataclasses
    import functools

    ml = load_script("make_leaderboard")
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    monkeypatch.setattr(ml.normlab, "run_many", functools.partial(normlab.run_many, workers=1))
    corpus, out = normlab.load_corpus(), tmp_path / "_data"
    out.mkdir()
    ml.make(TINY, "ci", "lb", None, out, corpus, reuse=False, verify=0)
    read = lambda k: json.loads(lzma.decompress((out / f"lb-{k}-ci.json.xz").read_bytes()))  # noqa: E731
    first = {k: read(k) for k in (1, 2, 4)}
    # a grid with one more rate: round 1 holds its old runs and two new ones
    wider = dataclasses.replace(TINY, lrs=(1e-3, 3e-3, 1e-2))
    ml.make(wider, "ci", "lb", None, out, corpus, reuse=True, verify=1)
    meta = read(1)["meta"]
    assert meta["reused"]["runs"] == len(first[1]["results"]) and meta["reused"]["verified"] == 1
    revision = first[1]["meta"]["provenance"]["revision"]
    assert meta["reused"]["from"] == [f"lb-1-ci.json.xz (made at {revision})"]
    key = lambda r: json.dumps([r["model"], r["config"]], sort_keys=True)  # noqa: E731
    was = dict(zip(map(key, first[1]["results"]), first[1]["meta"]["early"]["fingerprints"]))
    now = read(1)
    kept = [fp == was[key(r)] for r, fp in zip(now["results"], now["meta"]["early"]["fingerprints"]) if key(r) in was]
    assert len(kept) == meta["reused"]["runs"] and all(kept)  # a reused run keeps its board's fingerprint
    # a stored run whose early check the training code no longer passes stops the script
    payload = read(1)
    payload["meta"]["early"]["fingerprints"] = [
        [x * (1 + 1e-6) for x in fp] for fp in payload["meta"]["early"]["fingerprints"]
    ]
    (out / "lb-1-ci.json.xz").write_bytes(lzma.compress(json.dumps(payload).encode()))
    (out / "lb-2-ci.json.xz").unlink()
    with pytest.raises(SystemExit, match="fails its early check"):
        ml.make(dataclasses.replace(TINY, lrs=(1e-3, 3e-3, 1e-2, 3e-2)), "ci", "lb", None, out, corpus, reuse=True,
                verify=100)  # fmt: skip
