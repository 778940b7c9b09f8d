"""Every chapter's Colab edition as Colab runs it (scripts/colab_run.py): alone in an empty folder, normlab
from a wheel, not editable, the Colab branch of the first cell taken, no myst-nb. Chapter 9 runs in full,
and so do the chapters without a stored board (their glued values print); chapters 4 to 8 run to the end
of their first stored-board cell, which must be the board that ships inside the wheel, confirmed
(NORMLAB_BOARDS=strict: a board that is not confirmed fails)."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import colab_run  # noqa: E402

UNTIL_BOARD = ("04_warmup", "05_deepnorm", "06_sandwich", "07_normformer", "08_qk_norm")
IN_FULL = ("quickstart", "01_post_ln", "02_pre_ln", "03_gradients_at_init", "09_leaderboard")


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("colab")
    return colab_run.prepare(workdir), workdir


@pytest.mark.parametrize("chapter", IN_FULL + UNTIL_BOARD)
def test_a_chapter_opened_alone_runs_on_the_boards_inside_the_wheel(colab, chapter):
    python, workdir = colab
    r = colab_run.run_chapter(python, workdir, chapter, until_board=chapter in UNTIL_BOARD, timeout=600,
                              env={"NORMLAB_BOARDS": "strict"})  # fmt: skip
    assert r["status"] == "finished", (
        f"{chapter}: {r['status']} after {r['seconds']} s\n{r['cells'][-2:]}\n{r['stderr']}"
    )
    first = r["cells"][0]["text"]
    assert "Change runtime type" in first, first  # the Colab branch of the setup cell ran
    if chapter in UNTIL_BOARD or chapter == "09_leaderboard":
        text = "".join(c["text"] for c in r["cells"])
        assert re.search(r": stored, (\d+ runs \()?confirmed: ", text), text[-1500:]
    assert not list(Path(r["folder"]).glob("_data")), "a chapter must not need files beside it"
    if chapter in IN_FULL and chapter != "quickstart":  # without myst-nb every glued value prints for the reader
        text = "".join(c["text"] for c in r["cells"])
        assert re.search(r"^\[[\w-]+\] \S", text, re.M), text[-1500:]
