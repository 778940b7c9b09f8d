"""Time one training step of normlab.TransformerLM against the same-size stack of
torch.nn.TransformerEncoderLayer (pre-LN, causal, GELU), in one process, interleaved.

    OMP_NUM_THREADS=1 python scripts/bench_step.py [--layers 6] [--d-model 64] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import normlab


class TorchReferenceLM(nn.Module):
    """The same decoder built from PyTorch's own layers, for timing only."""

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
        x = self.tok(idx) + self.pos(torch.arange(t))
        return self.head(self.stack(x, mask=self.mask[:t, :t], is_causal=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    models = {
        "normlab": normlab.TransformerLM(256, a.d_model, a.heads, a.layers, max_seq_len=a.seq),
        "torch": TorchReferenceLM(256, a.d_model, a.heads, a.layers, a.seq),
    }
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    x = torch.randint(0, 256, (a.batch, a.seq))
    y = torch.randint(0, 256, (a.batch, a.seq))
    for step in range(a.steps + 5):
        for k, m in models.items():
            t0 = time.perf_counter()
            loss = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
            opts[k].zero_grad()
            loss.backward()
            opts[k].step()
            if step >= 5:  # the first steps pay for allocation and kernel selection
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    print(
        f"{torch.get_num_threads()} torch thread(s), torch {torch.__version__}, B={a.batch} T={a.seq} "
        f"d={a.d_model} L={a.layers}, median of {a.steps} steps"
    )
    for k in models:
        print(f"  {k:<8} {1000 * med[k]:7.1f} ms/step  ({params[k]:,} parameters)")
    print(f"  ratio normlab/torch: {med['normlab'] / med['torch']:.2f}")


if __name__ == "__main__":
    main()
