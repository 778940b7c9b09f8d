"""The book's structure: every chapter is in the table of contents and starts with the setup cell."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import setup_cell  # noqa: E402


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    toc = (ROOT / "_toc.yml").read_text()
    entries = set(re.findall(r"(?:root|file):\s*(\S+)", toc))
    for nb in setup_cell.notebooks():
        assert str(nb.relative_to(ROOT).with_suffix("")) in entries, f"{nb} is not in _toc.yml"
    for entry in entries:
        exists = any((ROOT / f"{entry}{ext}").exists() for ext in (".ipynb", ".md"))
        assert exists, f"{entry} in _toc.yml does not exist"


def test_every_notebook_starts_with_the_standard_setup_cell():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "setup_cell.py")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_setup_cell_installs_only_normlab_and_only_on_colab():
    cell = setup_cell.expected_cell()
    assert '"google.colab" in sys.modules' in cell
    installs = [line for line in cell.splitlines() if "pip install" in line]
    assert len(installs) == 1 and "#subdirectory=code" in installs[0]
    assert not re.search(r"\b(torch|ipywidgets)\b", installs[0])


def test_notebooks_are_committed_without_outputs():
    import nbformat

    for path in setup_cell.notebooks():
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{path} has stored outputs"


def test_a_figure_cell_with_more_than_one_display_output_is_reported():
    """The bug that broke the cpu-scale build: a progress-bar widget and the image in one figure cell."""
    import nbformat

    sys.path.insert(0, str(ROOT / "_ext"))
    from normlab_book import figure_output_problems

    image = nbformat.v4.new_output("display_data", data={"image/png": "", "text/plain": "<Figure>"})
    widget = nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {}})
    text = nbformat.v4.new_output("stream", name="stdout", text="10 runs\n")
    glued = nbformat.v4.new_output("display_data", data={"application/papermill.record/text/plain": "1.0"})
    figure = {"mystnb": {"figure": {"name": "fig-good"}}}
    good = nbformat.v4.new_code_cell(metadata=figure, outputs=[text, glued, image])
    bad = nbformat.v4.new_code_cell(metadata={"mystnb": {"figure": {"name": "fig-bad"}}}, outputs=[widget, image])
    plain = nbformat.v4.new_code_cell(outputs=[widget, image])  # not a figure: anything goes
    problems = figure_output_problems(nbformat.v4.new_notebook(cells=[good, bad, plain]))
    assert len(problems) == 1 and "fig-bad" in problems[0] and "2 display outputs" in problems[0]


def test_runs_and_sweeps_show_no_progress_bar_unless_asked(capsys):
    """Sweeps and runs put nothing on the page by default, whatever the scale, so the ci build's
    outputs are the reader's outputs (a bar is a widget output in a notebook); a sweep's progress
    goes to the build's output instead (tests/test_book_build.py)."""
    import inspect

    import normlab

    assert inspect.signature(normlab.train).parameters["progress"].default is False
    assert inspect.signature(normlab.run).parameters["progress"].default is False
    assert inspect.signature(normlab.run_many).parameters["progress"].default is None
    jobs = [(dict(d_model=16, n_heads=2, n_layers=1), normlab.TrainConfig(steps=2, batch_size=2, seq_len=8))]
    normlab.run_many(jobs, workers=1)
    assert capsys.readouterr().out == ""  # stdout is the page; the progress lines went to stderr


def test_the_readmes_measured_numbers_are_the_stored_measurements():
    """Every time and ratio the README states is written from book/_data by scripts/readme_numbers.py."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_numbers.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    readme = (ROOT / "README.md").read_text()
    assert readme.count("<!-- generated: ") == 3
    # the hand-written numbers of earlier books, outside the generated blocks (a measurement may repeat one)
    written = re.sub(r"<!-- generated: .*?<!-- end generated -->", "", readme, flags=re.S)
    assert "557 s" not in written and "530 s" not in written


def test_the_execution_cache_follows_normlab_and_the_stored_results_not_only_the_notebooks(monkeypatch, tmp_path):
    """A chapter's cached outputs must not outlive the package or the stored board they came from."""
    sys.path.insert(0, str(ROOT / "_ext"))
    import normlab_book

    data, boards = tmp_path / "book" / "_data", tmp_path / "boards"
    data.mkdir(parents=True)
    boards.mkdir()
    (boards / "leaderboard-1-cpu.json.xz").write_bytes(b"a board")
    (data / "costs-cpu.json").write_text("{}")
    monkeypatch.setattr(normlab_book, "ROOT", tmp_path)
    monkeypatch.setattr("normlab.replay.board_path", lambda name, scale=None: boards / f"{name}-{scale}.json.xz")
    monkeypatch.delenv("NORMLAB_BOARDS", raising=False)
    key = normlab_book.inputs_key()
    (data / "costs-cpu.json").write_text('{"seconds": {}}')  # a new measurement: chapters unaffected
    assert normlab_book.inputs_key() == key
    (boards / "leaderboard-1-cpu.json.xz").write_bytes(b"a board made again")  # a new board: every chapter again
    board_key = normlab_book.inputs_key()
    assert board_key != key
    monkeypatch.setenv("NORMLAB_BOARDS", "live")  # the boards trained here: not the stored pages
    assert normlab_book.inputs_key() not in (key, board_key)
    monkeypatch.delenv("NORMLAB_BOARDS")
    monkeypatch.setattr("normlab.store.source_hash", lambda: "another normlab")  # an edited package: again
    assert normlab_book.inputs_key() not in (key, board_key)
    monkeypatch.setenv("NORMLAB_SCALE", "ci")
    assert normlab_book.cache_dir(tmp_path).name == f"ci-seed0-{normlab_book.inputs_key()}"
