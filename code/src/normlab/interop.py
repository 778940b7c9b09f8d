"""Load PyTorch's own `nn.TransformerEncoderLayer` weights into a normlab `Block`.

The parity tests and the first chapter use it to show that the book's block is PyTorch's block.
"""

from __future__ import annotations

import torch
from torch import nn

from .model import Block

__all__ = ["block_from_torch"]


def block_from_torch(layer: nn.TransformerEncoderLayer, *, causal: bool = False) -> Block:
    """A `Block` equal to ``layer``: post-LN for ``norm_first=False``, pre-LN for ``True``.

    ``in_proj_weight`` is W_q, W_k, W_v stacked, as normlab's fused ``qkv``; norm1 is the attention sub-layer's norm and
    norm2 the FFN's, whichever side of the addition they sit on.
    """
    if not layer.self_attn.batch_first:
        raise ValueError("block_from_torch needs batch_first=True (normlab blocks take [B, T, d])")
    kind = getattr(layer, "activation_relu_or_gelu", 0)  # PyTorch's own tag: 1 relu, 2 gelu
    if kind not in (1, 2):
        raise ValueError("block_from_torch supports activation='relu' or 'gelu' only")
    if isinstance(layer.activation, nn.GELU) and layer.activation.approximate != "none":
        raise ValueError(
            f"block_from_torch: this layer's GELU is approximate={layer.activation.approximate!r}; normlab's "
            "Block uses the exact GELU (approximate='none'), so the two would differ"
        )
    rates = {"dropout (after the FFN activation)": layer.dropout.p, "dropout1": layer.dropout1.p,
             "dropout2": layer.dropout2.p, "self_attn.dropout": layer.self_attn.dropout}  # fmt: skip
    if any(p > 0 for p in rates.values()):
        used = ", ".join(f"{k} = {v}" for k, v in rates.items() if v > 0)
        raise ValueError(
            f"block_from_torch copies weights, and this layer drops out ({used}; PyTorch's default is 0.1): "
            "normlab's Block has no dropout between the FFN's two linear layers, so in training mode the two "
            "would differ. Build the layer with dropout=0.0 to compare them (dropout is the same function "
            "in eval mode)"
        )
    act = "relu" if kind == 1 else "gelu"
    d, bias = layer.linear1.in_features, layer.linear1.bias is not None
    block = Block(
        d,
        layer.self_attn.num_heads,
        norm="pre" if layer.norm_first else "post",
        d_ff=layer.linear1.out_features,
        activation=act,
        bias=bias,
        eps=layer.norm1.eps,
        causal=causal,
        init="torch",
    )
    a, m = block.attn, block.mlp
    first, second = (block.attn_in, block.ffn_in) if layer.norm_first else (block.attn_trunk, block.ffn_trunk)
    pairs = [(a.qkv.weight, layer.self_attn.in_proj_weight), (a.o.weight, layer.self_attn.out_proj.weight)]
    pairs += [(m.fc1.weight, layer.linear1.weight), (m.fc2.weight, layer.linear2.weight)]
    pairs += [(first.weight, layer.norm1.weight), (second.weight, layer.norm2.weight)]
    if bias:
        pairs += [(a.qkv.bias, layer.self_attn.in_proj_bias), (a.o.bias, layer.self_attn.out_proj.bias)]
        pairs += [(m.fc1.bias, layer.linear1.bias), (m.fc2.bias, layer.linear2.bias)]
        pairs += [(first.bias, layer.norm1.bias), (second.bias, layer.norm2.bias)]
    with torch.no_grad():
        for mine, theirs in pairs:
            mine.copy_(theirs)
    return block
