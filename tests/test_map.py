"""The introduction's map of the argument (book/images/map.svg) is what scripts/draw_map.py draws now."""

import sys
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import draw_map  # noqa: E402


def test_the_committed_map_is_what_the_script_draws():
    out = StringIO()
    draw_map.draw().savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    assert out.getvalue() == draw_map.OUT.read_text(), "run python scripts/draw_map.py and commit book/images/map.svg"
