"""The Transformer block whose norm placement is data, and the decoder-only LM built from it.

Every variant the book compares is the same `Block` built from a `Placement` (`normlab.variants`);
an unused slot is `nn.Identity()`. The model's settings travel as one value, `ModelConfig`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence, Union

import torch
from torch import nn

from .attention import Attention, qk_norm_kind
from .norms import NORM_KINDS, LearnedScale, Scale, make_norm
from .variants import Branch, Placement, Shortcut, deepnorm_coefficients, placement, placements

__all__ = ["INIT_SCHEMES", "ACTIVATIONS", "ModelConfig", "MLP", "Block", "TransformerLM", "model_kwargs_to_json",
           "model_kwargs_from_json"]  # fmt: skip

INIT_SCHEMES = ("gpt2", "xavier", "torch")
ACTIVATIONS = ("gelu", "relu")
Norm = Union[str, Placement, Sequence[Union[str, Placement]]]


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _choice(value: Any, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; valid choices: {', '.join(choices)}")


@dataclass(frozen=True)
class ModelConfig:
    """Everything that builds a `TransformerLM`, checked when it is made (as nanoGPT's GPTConfig).

    ``norm`` is anything `normlab.variants.placements` takes: a variant name or a `Placement` for
    every block, a name in `LAYERWISE` ("mixln", "lnscaled"), or one name or Placement per block.
    ``deepnorm_alpha`` / ``deepnorm_beta`` override DeepNorm's constants in every block whose
    placement has alpha (DeepNet's Post-LN-init baseline: 1 and 1; GLM-130B's alpha (2N)^(1/2)).
    A run's model kwargs are these fields but ``vocab_size``, which the corpus gives."""

    vocab_size: int
    d_model: int
    n_heads: int
    n_layers: int
    norm: Norm = "pre"
    qk_norm: Union[bool, str] = False
    max_seq_len: int = 256
    norm_kind: str = "layer"
    d_ff: Optional[int] = None  # None: 4 d_model
    dropout: float = 0.0  # on each sub-layer's output, after its last norm, before the add
    attn_dropout: float = 0.0  # on the attention probabilities
    bias: bool = True
    activation: str = "gelu"
    eps: float = 1e-5  # every norm's; 0 is the exact norm (chapter 3 uses it)
    init: str = "gpt2"
    deepnorm_alpha: Optional[float] = None
    deepnorm_beta: Optional[float] = None
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_seq_len"):
            _positive(name, getattr(self, name))
        if self.d_ff is not None:
            _positive("d_ff", self.d_ff)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("dropout", "attn_dropout"):
            rate = getattr(self, name)
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be a number in [0, 1), got {rate!r}")
        for name in ("bias", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        _choice(self.norm_kind, NORM_KINDS, "norm_kind")
        _choice(self.activation, ACTIVATIONS, "activation")
        _choice(self.init, INIT_SCHEMES, "init")
        qk_norm_kind(self.qk_norm)  # "yes" or "no" would otherwise both switch it on
        if isinstance(self.eps, bool) or not (isinstance(self.eps, (int, float)) and self.eps >= 0):
            raise ValueError(f"eps must be a number >= 0 (the norms divide by sqrt(var + eps)), got {self.eps!r}")
        if isinstance(self.norm, list):
            object.__setattr__(self, "norm", tuple(self.norm))  # one placement per block, frozen
        per_block = placements(self.norm, self.n_layers)
        for name in ("deepnorm_alpha", "deepnorm_beta"):
            value = getattr(self, name)
            if value is None:
                continue
            if not any(p.uses_alpha for p in per_block):
                raise ValueError(
                    f"{name}={value!r} is given, but this model's placement has no DeepNorm alpha "
                    "(Shortcut.ALPHA or Branch.ALPHA): it would be ignored"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")

    @property
    def placements(self) -> tuple[Placement, ...]:
        """One `Placement` per block."""
        return placements(self.norm, self.n_layers)

    @property
    def ff_width(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    def deepnorm(self) -> tuple[float, float]:
        """(alpha, beta) for a block of this stack whose placement has alpha: DeepNorm's decoder-only
        constants for ``n_layers`` blocks, unless overridden."""
        _, coef = deepnorm_coefficients(decoder_layers=self.n_layers)
        alpha = coef.alpha if self.deepnorm_alpha is None else self.deepnorm_alpha
        return alpha, coef.beta if self.deepnorm_beta is None else self.deepnorm_beta

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values (a Placement as its fields): what a stored run keeps."""
        return {k: _norm_json(v) if k == "norm" else v for k, v in asdict(self).items()}


def _norm_json(norm: Norm) -> Any:
    if isinstance(norm, Placement):
        return {"Placement": norm.to_dict()}
    if isinstance(norm, (list, tuple)):  # one per block: names and Placements
        return {"Placements": [p.to_dict() if isinstance(p, Placement) else p for p in norm]}
    return norm


def _norm_from_json(value: Any) -> Norm:
    if isinstance(value, dict) and set(value) == {"Placement"}:
        return Placement.from_dict(value["Placement"])
    if isinstance(value, dict) and set(value) == {"Placements"}:
        return tuple(Placement.from_dict(p) if isinstance(p, dict) else p for p in value["Placements"])
    return value


def model_kwargs_to_json(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A run's model kwargs (ModelConfig fields but vocab_size) as JSON values."""
    return {k: _norm_json(v) if k == "norm" else v for k, v in kwargs.items()}


def model_kwargs_from_json(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What `model_kwargs_to_json` wrote, with its Placements back."""
    return {k: _norm_from_json(v) if k == "norm" else v for k, v in kwargs.items()}


class MLP(nn.Module):
    """fc2(act(fc1 x)), with NormFormer's optional norm after the activation."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "gelu",
        mid_norm: bool = False,
        norm_kind: str = "layer",
        eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.mid_norm = make_norm(norm_kind, d_ff, eps, bias) if mid_norm else nn.Identity()
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.mid_norm(self.act(self.fc1(x))))


class Block(nn.Module):
    """One Transformer block; its `Placement` says where its norms go.

    Built inside a stack as ``Block(config, norm=placement)`` from the stack's `ModelConfig`, or on
    its own as ``Block(d_model, n_heads, norm=..., **options)`` with any `ModelConfig` field as an option
    (``n_layers``, default 1, is the depth of the stack the block would live in: it sets DeepNorm's
    alpha and beta and the GPT-2 init's residual scale). ``dropout`` acts on each sub-layer's output
    after its last norm, just before the addition (as fairseq), so that a norm never undoes
    dropout's rescaling; ``attn_dropout`` drops attention probabilities.
    """

    def __init__(
        self,
        config: Union[ModelConfig, int],
        n_heads: Optional[int] = None,
        *,
        norm: Union[str, Placement, None] = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if isinstance(config, ModelConfig):
            if n_heads is not None or options:
                raise ValueError("Block(config, norm=placement) takes its settings from the config, nothing else")
            p = placement(config.placements[0] if norm is None else norm)
        else:
            p = placement("pre" if norm is None else norm)
            config = ModelConfig(1, config, n_heads, options.pop("n_layers", 1), norm=p, **options)  # type: ignore[arg-type]
        c, d = config, config.d_model
        self.placement = p
        self.alpha, self.beta = c.deepnorm() if p.uses_alpha else (1.0, 1.0)
        # DeepNorm's alpha, one module for every shortcut that takes it (a hook on it sees each call).
        self.shortcut = Scale(self.alpha) if any(w.shortcut is Shortcut.ALPHA for w in p.wraps) else nn.Identity()
        # One module for both branches: labml's alpha, or ReZero's gate a (one scalar per block, 0 at init).
        self.branch = {
            Branch.ONE: nn.Identity,
            Branch.ALPHA: lambda: Scale(self.alpha),
            Branch.GATE: lambda: nn.Sequential(nn.Identity(), LearnedScale((), 0.0)),
        }[p.branch]()

        def shortcut(gain: Shortcut) -> nn.Module:
            # `self.shortcut` itself wherever it fits (alpha, or an identity when no sub-layer has
            # alpha), so a hook on it sees every sub-layer's shortcut. Admin's omega (1 until
            # `admin_init` profiles it) and NormFormer's lambda (learned, 1 at init) are per-channel
            # gains, each sub-layer its own, in position 1 of a Sequential.
            fits = gain is Shortcut.ALPHA or isinstance(self.shortcut, nn.Identity)
            base = self.shortcut if fits else nn.Identity()
            return nn.Sequential(base, LearnedScale(d)) if gain in (Shortcut.OMEGA, Shortcut.LAMBDA) else base

        self.attn_shortcut, self.ffn_shortcut = shortcut(p.attn.shortcut), shortcut(p.ffn.shortcut)
        self.in_scale = Scale(p.in_scale) if p.in_scale is not None else nn.Identity()

        def norm_if(used: bool) -> nn.Module:
            return make_norm(c.norm_kind, d, c.eps, c.bias) if used else nn.Identity()

        a, f = p.attn, p.ffn
        self.attn_in, self.attn_out, self.attn_trunk = norm_if(a.norm_in), norm_if(a.norm_out), norm_if(a.norm_trunk)
        self.ffn_in, self.ffn_out, self.ffn_trunk = norm_if(f.norm_in), norm_if(f.norm_out), norm_if(f.norm_trunk)
        # ChatGLM's shortcut reads the normed input: the same norm module (and parameters) as the branch.
        self.attn_skip = self.attn_in if p.attn.shortcut_normed else nn.Identity()
        self.ffn_skip = self.ffn_in if p.ffn.shortcut_normed else nn.Identity()
        self.attn = Attention(
            d, c.n_heads, qk_norm=c.qk_norm, head_scale=p.head_scale, norm_kind=c.norm_kind, eps=c.eps,
            bias=c.bias, attn_dropout=c.attn_dropout, causal=c.causal,
        )  # fmt: skip
        self.mlp = MLP(d, c.ff_width, activation=c.activation, mid_norm=p.ffn_mid_norm, norm_kind=c.norm_kind,
                       eps=c.eps, bias=c.bias)  # fmt: skip
        self.attn_drop, self.ffn_drop = nn.Dropout(c.dropout), nn.Dropout(c.dropout)
        from .init import init_block_

        init_block_(self, c.init, n_layers=c.n_layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn_sublayer(self.attn_sublayer(x))

    # Every variant's tell-tale lines: the same two, with identities in the unused slots.
    def attn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.attn_drop(self.attn_out(self.attn(self.in_scale(self.attn_in(x)))))
        return self.attn_trunk(self.attn_shortcut(self.attn_skip(x)) + self.branch(branch))

    def ffn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.ffn_drop(self.ffn_out(self.mlp(self.in_scale(self.ffn_in(x)))))
        return self.ffn_trunk(self.ffn_shortcut(self.ffn_skip(x)) + self.branch(branch))


def _inside_transform(t: torch.Tensor) -> bool:
    """True for a tensor inside torch.func's vmap or grad (as in `normlab.batched`), where a check
    that reads its values cannot run; the ids there come from the corpus and are in range."""
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return bool(wrapped is not None and wrapped(t))


class TransformerLM(nn.Module):
    """A decoder-only causal LM: token + learned position embeddings, ``n_layers`` Blocks, a final
    norm exactly when the last block's placement ends with one (`Placement.ends_with_norm`), an
    untied LM head. ``TransformerLM(config)`` or ``TransformerLM(vocab_size, d_model, n_heads,
    n_layers, **fields)`` with the other `ModelConfig` fields as keywords.

    ``placements`` keeps the blocks' placements; ``placement`` is their common one, or None when
    they differ."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        one = len(args) == 1 and isinstance(args[0], ModelConfig) and not kwargs
        self.config = c = args[0] if one else ModelConfig(*args, **kwargs)
        self.placements = per_block = c.placements
        self.placement: Optional[Placement] = per_block[0] if len(set(per_block)) == 1 else None
        self.max_seq_len = c.max_seq_len
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = nn.Embedding(c.max_seq_len, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c, norm=p) for p in per_block)
        ends = per_block[-1].ends_with_norm
        self.final_norm = make_norm(c.norm_kind, c.d_model, c.eps, c.bias) if ends else nn.Identity()
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.init == "xavier":
            # Token and position embeddings N(0, 1/2) each, so x_0 has unit variance per coordinate
            # (E||x_0||^2 = d), the starting point of Xiong et al.'s Lemma 2.
            nn.init.normal_(self.tok.weight, std=math.sqrt(0.5))
            nn.init.normal_(self.pos.weight, std=math.sqrt(0.5))
            nn.init.xavier_normal_(self.head.weight)
        elif c.init == "gpt2":
            for w in (self.tok.weight, self.pos.weight, self.head.weight):
                nn.init.normal_(w, std=0.02)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """x_0, the start of the residual stream."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be [batch, time], got shape {tuple(idx.shape)}")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise ValueError(f"idx must hold integer token ids (torch.long), got dtype {idx.dtype}")
        vocab = self.tok.num_embeddings
        # Checked on the CPU only: on an accelerator reading min and max back would cost two device
        # syncs per forward pass (the lookup itself still fails there, with a device-side error).
        check = idx.device.type == "cpu" and idx.numel() and not _inside_transform(idx)
        if check and not (0 <= int(idx.min()) and int(idx.max()) < vocab):
            raise ValueError(
                f"token ids must be in [0, vocab_size={vocab}), got ids from {int(idx.min())} to {int(idx.max())}"
            )
        t = idx.shape[1]
        if t > self.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len={self.max_seq_len}")
        return self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """The final hidden state F(x; theta) that the LM head reads: [B, T, d]."""
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(idx))
