"""normlab.plot: what the book's figures and glued values do outside a book build."""


def test_glue_prints_a_text_value_where_myst_nb_is_missing(monkeypatch, capsys):
    """On Colab (no myst-nb) a glued value is printed as the line the Colab edition's text points to."""
    import sys

    from normlab import plot

    monkeypatch.setitem(sys.modules, "myst_nb", None)  # importing it now raises ImportError
    plot.glue("ch0-example", "0.42")
    plot.glue("ch0-number", 0.5)
    assert capsys.readouterr().out == "[ch0-example] 0.42\n[ch0-number] 0.5\n"
