"""The n-gram levels are the count models they say, checked against a count by hand on a tiny corpus."""

import dataclasses
import math
from collections import Counter

import pytest
import torch

import normlab
from normlab.ngram import BIGRAM_ADD, NGRAM_DISCOUNT, ngram_levels, ngram_logprobs

V = 256


def by_hand(train: bytes, x: list[int], y: list[int]) -> dict[str, list[float]]:
    """The four models written out with Python counters, one target at a time."""
    uni = Counter(train)
    pairs = Counter(zip(train, train[1:]))
    after = Counter(train[:-1])
    tris = Counter(zip(train, train[1:], train[2:]))
    ctx_total, ctx_types = Counter(), Counter()
    for (a, b, _), n in tris.items():
        ctx_total[a, b] += n
        ctx_types[a, b] += 1
    fours = Counter(zip(train, train[1:], train[2:], train[3:]))
    ctx4_total, ctx4_types = Counter(), Counter()
    for (a, b, c, _), n in fours.items():
        ctx4_total[a, b, c] += n
        ctx4_types[a, b, c] += 1
    out = {"unigram": [], "bigram": [], "trigram": [], "fourgram": []}
    for t, (cur, target) in enumerate(zip(x, y)):
        p1 = (uni[target] + 1) / (len(train) + V)
        p2 = (pairs[cur, target] + BIGRAM_ADD) / (after[cur] + BIGRAM_ADD * V)
        if t == 0 or ctx_total[x[t - 1], cur] == 0:
            p3 = p2
        else:
            n, k = ctx_total[x[t - 1], cur], ctx_types[x[t - 1], cur]
            p3 = max(tris[x[t - 1], cur, target] - NGRAM_DISCOUNT, 0) / n + NGRAM_DISCOUNT * k / n * p2
        if t < 2 or ctx4_total[x[t - 2], x[t - 1], cur] == 0:
            p4 = p3
        else:
            n, k = ctx4_total[x[t - 2], x[t - 1], cur], ctx4_types[x[t - 2], x[t - 1], cur]
            p4 = max(fours[x[t - 2], x[t - 1], cur, target] - NGRAM_DISCOUNT, 0) / n + NGRAM_DISCOUNT * k / n * p3
        out["unigram"].append(math.log(p1))
        out["bigram"].append(math.log(p2))
        out["trigram"].append(math.log(p3))
        out["fourgram"].append(math.log(p4))
    return out


def test_the_four_models_match_a_count_by_hand():
    train = b"the cat sat on the mat; the cat ate the hat"
    window = b"the hat sat"
    x, y = list(window[:-1]), list(window[1:])
    got = ngram_logprobs(torch.tensor(list(train), dtype=torch.uint8), torch.tensor([x]), torch.tensor([y]))
    want = by_hand(train, x, y)
    for name in ("unigram", "bigram", "trigram", "fourgram"):
        torch.testing.assert_close(got[name][0], torch.tensor(want[name], dtype=torch.double), rtol=1e-12, atol=0)


def test_each_model_is_a_distribution_over_the_next_byte():
    train = torch.tensor(list(b"abracadabra, abracadabra!"), dtype=torch.uint8)
    x = torch.tensor([[ord("b"), ord("r"), ord("a")]]).repeat(V, 1)  # the context "bra", every next byte
    y = torch.arange(V)[:, None].repeat(1, 3)
    lp = ngram_logprobs(train, x, y)
    for name in ("unigram", "bigram", "trigram", "fourgram"):
        assert float(lp[name][:, 2].exp().sum()) == pytest.approx(1.0, abs=1e-9), name


def test_the_levels_order_and_the_regimes_they_name():
    corpus = normlab.load_corpus()
    levels = ngram_levels(corpus, 32, 256)
    # The book's corpus on its fixed windows: more context, lower loss, with room between.
    assert levels.unigram > levels.bigram + 0.4 > levels.trigram + 0.8 > levels.fourgram + 1.0
    assert levels.unigram == pytest.approx(corpus.unigram_loss(corpus.eval_set(32, 256)[1]), rel=1e-9)
    assert [levels.regime(v) for v in (9.0, levels.unigram, levels.bigram + 0.01, levels.bigram - 0.01,
                                       levels.trigram - 0.01)] == [
        "above unigram", "unigram", "bytes", "context", "beyond trigram"]  # fmt: skip


def test_a_loss_figure_draws_the_three_levels_with_their_values():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from normlab import plot

    levels = normlab.NgramLevels(unigram=3.04, bigram=2.37, trigram=1.79)
    fig, ax = plt.subplots()
    plot.ngram_lines(ax, levels)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["unigram level (3.04)", "bigram level (2.37)", "trigram level (1.79)"]
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [3.04, 2.37, 1.79]
    plt.close(fig)


def test_a_runs_regime_is_read_on_its_own_validation_windows():
    corpus = normlab.load_corpus()
    config = normlab.TrainConfig(steps=4, batch_size=4, seq_len=32, eval_every=4, seed=0)
    result = normlab.run(dict(d_model=16, n_heads=2, n_layers=1, max_seq_len=32), config, corpus=corpus)
    levels = ngram_levels(corpus, 32, config.eval_windows)
    assert normlab.run_regime(result, corpus) == levels.regime(result.final_val_loss) == "above unigram"
    assert normlab.run_regime(dataclasses.replace(result, status="diverged"), corpus) == "diverged"


def test_each_regime_has_a_phrase_with_the_levels_it_lies_between():
    levels = normlab.NgramLevels(unigram=3.04, bigram=2.37, trigram=1.79)
    assert levels.describe(2.1).startswith("between the bigram (2.37) and trigram (1.79) levels")
    assert levels.describe(2.5).startswith("between the unigram (3.04) and bigram (2.37) levels")
    assert levels.describe(1.5).startswith("below the trigram level (1.79)")
    assert levels.describe(float("nan")).startswith("above the unigram level")
