"""The reference a normlab step is timed against: the same-size stack of PyTorch's own
`nn.TransformerEncoderLayer`, and the FLOP count of a training step of either.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .data import VOCAB_SIZE

__all__ = ["TorchReferenceLM", "step_flops"]


class TorchReferenceLM(nn.Module):
    """The same decoder built from PyTorch's own layers (pre-LN, causal, GELU, d_ff = 4d, final norm,
    untied head), for timing only."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.stack = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.stack(x, mask=self.mask[:t, :t], is_causal=True))


def step_flops(
    d_model: int, n_layers: int, batch: int, seq: int, vocab: int = VOCAB_SIZE, d_ff: Optional[int] = None
) -> int:
    """FLOPs of one training step (forward, backward) of a decoder-only Transformer, counted analytically.

    With d = ``d_model``, L = ``n_layers``, B = ``batch``, T = ``seq``, V = ``vocab`` and
    d_ff = ``d_ff`` (default 4d), the matmul parameters each token touches are

        P = L * (4 d^2 + 2 d d_ff) + d V      (W_q, W_k, W_v, W_o; the two FFN matrices; the LM head)

    and a multiply-add is 2 FLOPs, so

        forward  = 2 P B T + 2 * 2 L B T^2 d  (the second term: the scores Q K^T and the product with V)
        backward = 2 * forward                (one matmul for the input gradient, one for the weight's)
        step     = 3 * forward.

    The causal mask is not halved: T^2 counts the whole score square, as the usual model-FLOPs
    convention does (PaLM's 6N + 12 L T d per token), so a kernel that skips the masked half gets no
    credit for it. Embedding lookups, biases, norms, softmax, GELU and the AdamW update are left out:
    they are elementwise, O(B T d) or O(parameters), small next to the matmuls at these sizes.
    """
    d_ff = 4 * d_model if d_ff is None else d_ff
    for name, value in (("d_model", d_model), ("n_layers", n_layers), ("batch", batch), ("seq", seq),
                        ("vocab", vocab), ("d_ff", d_ff)):  # fmt: skip
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"step_flops: {name} must be a positive integer, got {value!r}")
    params = n_layers * (4 * d_model * d_model + 2 * d_model * d_ff) + d_model * vocab
    tokens = batch * seq
    forward = 2 * params * tokens + 2 * 2 * n_layers * batch * seq * seq * d_model
    return 3 * forward
