"""Every claim the chapters assert has a pass rate measured over many seed bases at the ci scale
(book/_data/claim-rates-ci.json, scripts/claim_rates.py), of the chapter's current code, and it is 95% or more:
a claim is only as strong as the share of fresh seed bases at which it holds."""

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import claim_rates  # noqa: E402

TABLE = json.loads(claim_rates.TABLE.read_text())
CHAPTERS = claim_rates.chapters()
# Chapters whose sweep at their current code is not complete (fewer seed bases than bases_needed): each
# restatement of a claim changes its chapter's code and starts its count again at fresh bases, and at a fresh
# base chapter 9 retrains its ci boards (about 15 minutes on this machine's two cores). On 2026-12-07:
# chapter 9, whose ch9-qk-norm was restated after it failed at the unrecorded base 31200, and ch9-rezero-best and
# ch9-long-rezero after they failed at 32100; 4 of its 10 fresh bases are done (32200, 32300, 32700, 32800), and
# 32400, 32900 and 33000-33300 follow (scripts/claim_rates.py run, resumable through the run store).
# Listed here, they fail as expected (xfail, strict): completing a sweep turns this list into an error.
INCOMPLETE: set[str] = {"09_leaderboard"}
# Claims measured below 95% and not restated since (a restated claim is measured again on fresh seed bases):
# each fails as expected (xfail, strict) with its measured rate, until its wording follows the measurement.
# Claims a chapter asserts only at the cpu and gpu scales (the ci model is too shallow for them): no ci rate.
NOT_AT_CI = {"ch5-best-of-both": "DeepNet's 'best of both worlds' needs 24 blocks; ci's deepest is 8"}
BELOW = set(json.loads((ROOT / "book" / "_data" / "claims-below-95.json").read_text())["claims"])


def claim_ids(chapter: str) -> list[str]:
    """The ids of the claims a chapter's code asserts (`normlab.claims.check("<id>", ...)`)."""
    nb = nbformat.read(ROOT / "book" / f"{chapter}.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return re.findall(r'claims\.check\(\s*"([^"]+)"', code)


def bases_needed(chapter: str) -> int:
    """The table's own count for the chapter (scripts/claim_rates.py's rule), checked against the rule."""
    row = TABLE["chapters"][chapter]
    assert row["bases_needed"] == claim_rates.bases_needed(row["min_seconds"]), "table older than the rule: run table"
    return row["bases_needed"]


def check(chapter: str) -> None:
    row = TABLE["chapters"][chapter]
    assert row["code"] == claim_rates.code_fingerprint(chapter), (
        f"{chapter}'s code changed since its claims' rates were measured: run python scripts/claim_rates.py "
        f"run --chapters {chapter} --bases ..., then table"
    )
    ids = claim_ids(chapter)
    assert len(ids) == len(set(ids)), f"{chapter} asserts a claim id twice"
    rows = {cid: TABLE["claims"].get(cid) for cid in ids if cid not in NOT_AT_CI}
    missing = [cid for cid, r in rows.items() if r is None]
    assert not missing, f"{chapter}: no recorded pass rate for {missing}"
    needed = bases_needed(chapter)
    few = {cid: r["bases"] for cid, r in rows.items() if r["bases"] < needed}
    assert not few, f"{chapter}: fewer than {needed} seed bases for {few}"
    low = {cid: f"{r['held']}/{r['bases']}" for cid, r in rows.items() if r["rate"] < 0.95 and cid not in BELOW}
    assert not low, f"{chapter}: claims that hold at under 95% of the seed bases: {low}"
    gone = sorted(cid for cid, r in TABLE["claims"].items() if r["chapter"] == chapter and cid not in ids)
    assert not gone, f"{chapter}: the table holds rates of claims the chapter no longer asserts: {gone}"


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c not in INCOMPLETE])
def test_every_claim_holds_at_95_percent_of_the_seed_bases(chapter):
    check(chapter)


@pytest.mark.xfail(strict=True, reason="issue 45: not yet measured at enough seed bases of its current code")
@pytest.mark.parametrize("chapter", sorted(INCOMPLETE))
def test_the_chapters_not_yet_measured_fully(chapter):
    check(chapter)


@pytest.mark.xfail(strict=True, reason="issue 45: measured below 95% of the seed bases, not yet restated")
@pytest.mark.parametrize("claim", sorted(BELOW))
def test_the_claims_measured_below_95_percent(claim):
    row = TABLE["claims"][claim]
    assert row["rate"] >= 0.95, f"{claim}: held at {row['held']} of {row['bases']} seed bases"


def _record(code: str, base: int, measured: str) -> dict:
    claim = {"id": "c", "statement": "s", "measured": measured, "holds": True, "kind": "finding", "values": [1.0]}
    return {
        "chapter": "06_sandwich",
        "base": base,
        "code": code,
        "errors": [],
        "claims": [claim],
        "revision": "r",
        "seconds": 300.0 if code == "old" else 20.0,
    }


def _carry(store: Path, check: Path, base: int) -> None:
    import argparse

    args = argparse.Namespace(store=str(store), check=str(check), chapter="06_sandwich", base=base)
    claim_rates.carry(args)


def test_older_records_are_carried_only_when_the_current_code_reproduces_one_exactly(tmp_path):
    now = claim_rates.code_fingerprint("06_sandwich")
    store, check = tmp_path / "store" / "06_sandwich", tmp_path / "check" / "06_sandwich"
    store.mkdir(parents=True), check.mkdir(parents=True)
    for base in (1, 2):
        (store / f"{base}.json").write_text(json.dumps(_record("old", base, "0.50")))
    (check / "1.json").write_text(json.dumps(_record(now, 1, "0.51")))  # one figure differs: not carried
    with pytest.raises(SystemExit, match="differ"):
        _carry(store.parent, check.parent, 1)
    assert json.loads((store / "2.json").read_text())["code"] == "old"
    (check / "1.json").write_text(json.dumps(_record(now, 1, "0.50")))
    _carry(store.parent, check.parent, 1)
    carried = json.loads((store / "2.json").read_text())
    assert carried["code"] == now and carried["carried"]["from_code"] == "old"
    assert carried["carried"]["checked_at_base"] == 1
    checked = json.loads((store / "1.json").read_text())  # a fresh base's time, not the check's (a run store's)
    assert checked["seconds"] == 300.0 and checked["check_seconds"] == 20.0


def test_a_replayed_execution_does_not_make_a_chapter_look_cheap(tmp_path):
    """An execution that took its runs from a run store timed a replay: the 10-or-20-bases rule skips it."""
    import argparse

    now = claim_rates.code_fingerprint("06_sandwich")
    store = tmp_path / "store" / "06_sandwich"
    store.mkdir(parents=True)
    fresh = dict(_record(now, 1, "0.50"), seconds=300.0, runs_from_store=0, python="3.12", torch="2")
    replayed = dict(_record(now, 2, "0.50"), seconds=20.0, runs_from_store=40, python="3.12", torch="2")
    for record in (fresh, replayed):
        (store / f"{record['base']}.json").write_text(json.dumps(record))
    out = tmp_path / "table.json"
    claim_rates.table(argparse.Namespace(store=str(store.parent), out=str(out)))
    row = json.loads(out.read_text())["chapters"]["06_sandwich"]
    assert row["min_seconds"] == 300.0 and row["bases_needed"] == 10


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_check_mark_links_to_a_claim_the_chapter_asserts(chapter):
    """{claim}`id` in the prose renders as a check mark linked to #claim-<id>, the anchor the claim's check
    writes into this chapter's page: an id the chapter does not assert would link nowhere."""
    nb = nbformat.read(ROOT / "book" / f"{chapter}.ipynb", as_version=4)
    marks = re.findall(r"\{claim\}`([^`]+)`", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    assert not sorted(set(marks) - set(claim_ids(chapter))), f"{chapter}: check marks of claims it does not assert"
    at_ci_only_elsewhere = sorted(set(marks) & set(NOT_AT_CI))  # no anchor in a ci build: a dead link there
    assert not at_ci_only_elsewhere, f"{chapter}: check marks of claims not asserted at ci: {at_ci_only_elsewhere}"
