"""The byte n-gram levels a language model must beat: unigram, bigram, trigram (and 4-gram) count
models of the training bytes, scored on the same fixed validation windows as every run.

A model at the unigram level has learned byte frequencies; at the bigram level, which byte follows
which; below the trigram level it scores better than a table of the two previous bytes, which takes
more context, the job a Transformer's attention is for. Each model sees only what the LM sees: the bytes of its window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .data import VOCAB_SIZE, Corpus, unigram_logp

if TYPE_CHECKING:
    from .record import TrainResult

__all__ = [
    "NgramLevels",
    "BIGRAM_ADD",
    "NGRAM_DISCOUNT",
    "ngram_levels",
    "ngram_logprobs",
    "run_regime",
]

BIGRAM_ADD = 0.1  # add-k smoothing of the bigram counts (add-0.1, as the benchmark review measured)
NGRAM_DISCOUNT = 0.75  # absolute discount of interpolated trigram and 4-gram counts (Ney, Essen & Kneser 1994)


@dataclass(frozen=True)
class NgramLevels:
    """Cross-entropies (nats per byte) of the count models on a set of windows. The regimes are read
    off the first three; the 4-gram level says how far past the trigram a long run gets."""

    unigram: float  # add-one byte frequencies
    bigram: float  # add-0.1 bigram counts
    trigram: float  # trigram counts, absolutely discounted and interpolated with the bigram model
    fourgram: float = math.nan  # 4-gram counts, the same, interpolated with the trigram model

    def regime(self, loss: float) -> str:
        """Which level a validation loss reaches: "above unigram", "unigram" (within 0.1 nats of it:
        byte frequencies), "bytes" (below that, not below the bigram level), "context" (below the
        bigram level) or "beyond trigram" (below the trigram level)."""
        if not math.isfinite(loss) or loss > self.unigram + 0.1:
            return "above unigram"
        if loss > self.unigram - 0.1:
            return "unigram"
        if loss >= self.bigram:
            return "bytes"
        return "context" if loss >= self.trigram else "beyond trigram"

    def describe(self, loss: float) -> str:
        """The regime of ``loss`` as a phrase for the text, with the levels it lies between."""
        u, b, t = f"{self.unigram:.2f}", f"{self.bigram:.2f}", f"{self.trigram:.2f}"
        return {
            "above unigram": f"above the unigram level ({u}): not even byte frequencies",
            "unigram": f"at the unigram level ({u}): byte frequencies and nothing more",
            "bytes": f"between the unigram ({u}) and bigram ({b}) levels: byte frequencies and part of which byte "
            "follows which",
            "context": f"between the bigram ({b}) and trigram ({t}) levels: better than a table of the previous "
            "byte, worse than a table of the two previous bytes",
            "beyond trigram": f"below the trigram level ({t}): better than a table of the two previous bytes",
        }[self.regime(loss)]


def _counts(ids: torch.Tensor, size: int) -> torch.Tensor:
    return torch.bincount(ids, minlength=size).double()


def _interpolated(t: torch.Tensor, x: torch.Tensor, y: torch.Tensor, k: int, lower: torch.Tensor) -> torch.Tensor:
    """P(y | the k - 1 bytes ending at x) from the k-gram counts of ``t``, absolutely discounted and
    interpolated with ``lower`` (the (k-1)-gram model's probabilities of the same targets); where the
    context was never seen, or the window holds fewer than k - 1 bytes of it, ``lower`` itself."""
    v, n = VOCAB_SIZE, len(t)
    # k-grams are sparse (a few hundred thousand of 256^k), so they are counted as sorted ids
    grams, counts = torch.unique(sum(t[i : n - k + 1 + i] * v ** (k - 1 - i) for i in range(k)), return_counts=True)
    counts = counts.double()
    contexts, which = torch.unique(grams // v, return_inverse=True)
    ctx_total = torch.zeros(len(contexts), dtype=torch.double).index_add_(0, which, counts)
    ctx_types = torch.bincount(which, minlength=len(contexts)).double()
    # the context of y[:, s] is x[:, s - k + 2 .. s], most recent byte last (masked below where s < k - 2)
    shifted = [torch.cat([x[:, :1].expand(-1, j), x[:, : x.shape[1] - j]], dim=1) for j in range(k - 1)]
    c = sum(b * v**j for j, b in enumerate(shifted))

    def lookup(keys: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.searchsorted(table, keys.flatten()).clamp(max=len(table) - 1)
        return pos.view_as(keys), (table[pos] == keys.flatten()).view_as(keys)

    cpos, seen = lookup(c, contexts)
    gpos, found = lookup(c * v + y, grams)
    count = torch.where(found, counts[gpos], torch.zeros(()).double())
    total, types = torch.where(seen, ctx_total[cpos], 1.0), torch.where(seen, ctx_types[cpos], 0.0)
    d = NGRAM_DISCOUNT
    p = torch.where(seen, (count - d).clamp(min=0.0) / total + d * types / total * lower, lower)
    p[:, : k - 2] = lower[:, : k - 2]  # too little context in the window: the lower model
    return p


def ngram_logprobs(train: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """log P(y | context) under each count model of ``train`` (a 1-d byte tensor), for windows x, y
    ([B, T], y shifted by one): the bigram context of y[:, t] is x[:, t], the trigram context
    x[:, t - 1], x[:, t], the 4-gram's one byte more (near a window's start, where it holds less
    context, each model falls back to the one below, as an LM reading the window would have to)."""
    v = VOCAB_SIZE
    t = train.long()
    pair = _counts(t[:-1] * v + t[1:], v * v).view(v, v)
    p2 = (pair + BIGRAM_ADD) / (pair.sum(1, keepdim=True) + BIGRAM_ADD * v)
    xl, yl = x.long().cpu(), y.long().cpu()  # the tables live on the CPU
    p3 = _interpolated(t, xl, yl, 3, p2[xl, yl])
    p4 = _interpolated(t, xl, yl, 4, p3)
    return {"unigram": unigram_logp(t)[yl], "bigram": p2[xl, yl].log(), "trigram": p3.log(), "fourgram": p4.log()}


def ngram_levels(corpus: Corpus, seq_len: int, n_windows: int) -> NgramLevels:
    """The levels on the fixed validation windows every run of this shape is scored on
    (`Corpus.eval_set`), counted on the training bytes; cached per corpus and shape."""
    key = (seq_len, n_windows)
    cache = corpus._levels
    if key not in cache:
        x, y = corpus.eval_set(seq_len, n_windows)
        lp = ngram_logprobs(corpus.train, x, y)
        cache[key] = NgramLevels(*(float(-lp[k].mean()) for k in ("unigram", "bigram", "trigram", "fourgram")))
    return cache[key]


def run_regime(result: TrainResult, corpus: Corpus) -> str:
    """The level a finished run's final validation loss reaches (`NgramLevels.regime`), on the
    validation windows it was scored on; "diverged" for a run that diverged. Beside its outcome
    (trained, stalled, diverged) this says what a trained run learned: byte frequencies, which
    byte follows which, or context beyond the previous byte."""
    if result.status == "diverged":
        return "diverged"
    levels = ngram_levels(corpus, result.config["seq_len"], result.config["eval_windows"])
    return levels.regime(result.final_val_loss)
