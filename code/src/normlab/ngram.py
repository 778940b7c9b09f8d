"""The byte n-gram levels a language model must beat: unigram, bigram and trigram count models of
the training bytes, scored on the same fixed validation windows as every run.

A model at the unigram level has learned byte frequencies; at the bigram level, which byte follows
which; below the trigram level it uses more context than the two previous bytes, the job a
Transformer's attention is for. Each model sees only what the LM sees: the bytes of its window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .data import VOCAB_SIZE, Corpus, unigram_logp

if TYPE_CHECKING:
    from .record import TrainResult

__all__ = ["NgramLevels", "BIGRAM_ADD", "TRIGRAM_DISCOUNT", "ngram_levels", "ngram_logprobs", "run_regime"]

BIGRAM_ADD = 0.1  # add-k smoothing of the bigram counts (add-0.1, as the benchmark review measured)
TRIGRAM_DISCOUNT = 0.75  # absolute discount of interpolated trigram counts (Ney, Essen & Kneser 1994)


@dataclass(frozen=True)
class NgramLevels:
    """Cross-entropies (nats per byte) of the three count models on a set of windows."""

    unigram: float  # add-one byte frequencies
    bigram: float  # add-0.1 bigram counts
    trigram: float  # trigram counts, absolutely discounted and interpolated with the bigram model

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
            "bytes": f"between the unigram ({u}) and bigram ({b}) levels: which byte follows which, hardly more",
            "context": f"between the bigram ({b}) and trigram ({t}) levels: more than the previous byte, less than "
            "a table of the two previous bytes knows",
            "beyond trigram": f"below the trigram level ({t}): more context than the two previous bytes",
        }[self.regime(loss)]


def _counts(ids: torch.Tensor, size: int) -> torch.Tensor:
    return torch.bincount(ids, minlength=size).double()


def ngram_logprobs(train: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """log P(y | context) under each count model of ``train`` (a 1-d byte tensor), for windows x, y
    ([B, T], y shifted by one): the bigram context of y[:, t] is x[:, t], the trigram context
    x[:, t - 1], x[:, t] (at t = 0 the window holds one byte of context: the trigram model falls
    back to the bigram one, as an LM reading the window would have to)."""
    v = VOCAB_SIZE
    t = train.long()
    pair = _counts(t[:-1] * v + t[1:], v * v).view(v, v)
    p2 = (pair + BIGRAM_ADD) / (pair.sum(1, keepdim=True) + BIGRAM_ADD * v)
    # Trigrams are sparse (a few hundred thousand of 16.7M), so they are counted as sorted ids.
    tri_ids, tri_counts = torch.unique(t[:-2] * v * v + t[1:-1] * v + t[2:], return_counts=True)
    tri_counts = tri_counts.double()
    ctx = tri_ids // v  # the (a, b) context of each trigram, as a * v + b
    ctx_total = torch.zeros(v * v, dtype=torch.double).index_add_(0, ctx, tri_counts)
    ctx_types = torch.zeros(v * v, dtype=torch.double).index_add_(0, ctx, torch.ones_like(tri_counts))

    xl, yl = x.long().cpu(), y.long().cpu()  # the tables live on the CPU
    lp1 = unigram_logp(t)[yl]
    lp2 = p2[xl, yl].log()
    prev = torch.cat([xl[:, :1], xl[:, :-1]], dim=1)  # x[t - 1]; t = 0 is masked below
    c = prev * v + xl  # trigram context ids
    query = c * v + yl
    pos = torch.searchsorted(tri_ids, query.flatten()).clamp(max=len(tri_ids) - 1)
    found = tri_ids[pos] == query.flatten()
    count = torch.where(found, tri_counts[pos], torch.zeros_like(tri_counts[pos])).view_as(query)
    total, types = ctx_total[c], ctx_types[c]
    seen = total > 0
    safe = total.clamp(min=1.0)
    d = TRIGRAM_DISCOUNT
    p3 = torch.where(seen, (count - d).clamp(min=0.0) / safe + d * types / safe * p2[xl, yl], p2[xl, yl])
    p3[:, 0] = p2[xl[:, 0], yl[:, 0]]  # one byte of context in the window: the bigram model
    return {"unigram": lp1, "bigram": lp2, "trigram": p3.log()}


def ngram_levels(corpus: Corpus, seq_len: int, n_windows: int) -> NgramLevels:
    """The three levels on the fixed validation windows every run of this shape is scored on
    (`Corpus.eval_set`), counted on the training bytes; cached per corpus and shape."""
    key = (seq_len, n_windows)
    cache = corpus._levels
    if key not in cache:
        x, y = corpus.eval_set(seq_len, n_windows)
        lp = ngram_logprobs(corpus.train, x, y)
        cache[key] = NgramLevels(*(float(-lp[k].mean()) for k in ("unigram", "bigram", "trigram")))
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
