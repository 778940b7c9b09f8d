"""Write the references that pin the model down while its code is reorganised (issue 20): for every
placement, norm kind and QK-norm kind, the forward output, the parameter names and shapes, the
init, and a short run's losses, as hashes of their exact bytes plus a few readable numbers.

    OMP_NUM_THREADS=1 python code/tests/make_parity_reference.py

writes code/tests/data/parity-reference.json; `test_parity_reference.py` checks the current code
against it bit for bit. Regenerate only when a change is meant to change the numbers.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

import normlab

OUT = Path(__file__).parent / "data" / "parity-reference.json"
V, D, H, L, T = 256, 16, 2, 3, 8


def placements() -> dict[str, Any]:
    """Every placement the package and the chapters build, by a name for the reference file. (The
    references were written by the code before the Placement redesign, from the same placements
    in its flat fields; these are those placements in today's fields.)"""
    from normlab import Branch, Placement, Shortcut, Wrap

    v = normlab.VARIANTS
    table: dict[str, Any] = {name: name for name in v}
    table.update({name: name for name in normlab.LAYERWISE})
    nf = v["normformer"]
    nf_lambda = Placement(attn=nf.attn, ffn=Wrap(norm_in=True, shortcut=Shortcut.LAMBDA), head_scale="before_o",
                          ffn_mid_norm=True)  # fmt: skip
    table["labml alpha on the branch"] = Placement.same(Wrap(norm_trunk=True), branch=Branch.ALPHA)
    table["chatglm normed shortcut"] = Placement.same(Wrap(norm_in=True, shortcut=Shortcut.ALPHA, shortcut_normed=True))
    table["normformer resid scale"] = nf_lambda
    table["normformer head scale after W_o"] = Placement(
        attn=nf.attn, ffn=nf_lambda.ffn, head_scale="after_o", ffn_mid_norm=True
    )
    table["post with an input norm"] = Placement.same(Wrap(norm_in=True, norm_trunk=True))
    table["deepnorm pre"] = Placement.same(Wrap(norm_in=True, shortcut=Shortcut.ALPHA))
    table["mixed per block"] = (v["post"], v["pre"], v["sandwich"])
    return table


def digest(t: torch.Tensor) -> str:
    t = t.detach().contiguous().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()[:32]


def describe(model: torch.nn.Module, idx: torch.Tensor) -> dict[str, Any]:
    with torch.no_grad():
        model.eval()
        out = model(idx)
    state = model.state_dict()
    params = [(n, list(p.shape)) for n, p in model.named_parameters()]
    return {
        "forward": digest(out),
        "forward_mean": float(out.double().mean()),
        "forward_std": float(out.double().std()),
        "params": params,
        "buffers": sorted(k for k in state if k not in dict(model.named_parameters())),
        "init": hashlib.sha256(b"".join(digest(state[k]).encode() for k in sorted(state))).hexdigest()[:32],
    }


def models() -> dict[str, dict[str, Any]]:
    """name -> TransformerLM kwargs (besides the vocabulary size)."""
    out = {}
    for pname, norm in placements().items():
        for kind in normlab.NORM_KINDS:
            for qk in (False, "head", "full", "l2"):
                out[f"{pname} | {kind} | qk {qk}"] = dict(
                    d_model=D, n_heads=H, n_layers=L, norm=norm, norm_kind=kind, qk_norm=qk, max_seq_len=T
                )
    for init in normlab.INIT_SCHEMES:
        for name in ("post", "pre", "deepnorm"):
            out[f"{name} | init {init}"] = dict(d_model=D, n_heads=H, n_layers=L, norm=name, init=init, max_seq_len=T)
    extras = {
        "deepnorm alpha 2 beta 0.5": dict(norm="deepnorm", deepnorm_alpha=2.0, deepnorm_beta=0.5, init="xavier"),
        "pre no bias relu d_ff 24": dict(norm="pre", bias=False, activation="relu", d_ff=24),
        "pre eps 0": dict(norm="pre", eps=0.0),
        "post dropout (eval)": dict(norm="post", dropout=0.1, attn_dropout=0.1),
        "rms no bias dyt": dict(norm="sandwich", norm_kind="dyt", bias=False),
    }
    for name, kw in extras.items():
        out[name] = dict(d_model=D, n_heads=H, n_layers=L, max_seq_len=T, **kw)
    return out


def short_runs() -> dict[str, dict[str, Any]]:
    runs = {}
    for pname, norm in placements().items():
        runs[f"{pname}"] = dict(d_model=D, n_heads=H, n_layers=L, norm=norm, max_seq_len=16)
    for kind in normlab.NORM_KINDS:
        runs[f"pre | {kind}"] = dict(d_model=D, n_heads=H, n_layers=L, norm_kind=kind, max_seq_len=16)
    for qk in ("head", "full", "l2"):
        runs[f"pre | qk {qk}"] = dict(d_model=D, n_heads=H, n_layers=L, qk_norm=qk, max_seq_len=16)
    runs["post | xavier"] = dict(d_model=D, n_heads=H, n_layers=L, norm="post", init="xavier", max_seq_len=16)
    runs["pre | dropout"] = dict(d_model=D, n_heads=H, n_layers=L, dropout=0.1, max_seq_len=16)
    return runs


RUN_CONFIG = dict(steps=8, batch_size=4, seq_len=16, lr=3e-3, eval_every=4, log_every=4, seed=0)


def reference() -> dict[str, Any]:
    torch.set_num_threads(1)
    idx = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(0))
    ref: dict[str, Any] = {"models": {}, "runs": {}}
    for name, kwargs in models().items():
        torch.manual_seed(0)
        ref["models"][name] = describe(normlab.TransformerLM(V, **kwargs), idx)
    corpus = normlab.load_corpus()
    config = normlab.TrainConfig(**RUN_CONFIG)
    for name, kwargs in short_runs().items():
        r = normlab.run(kwargs, config, corpus=corpus)
        ref["runs"][name] = {"losses": [repr(x) for x in r.losses], "evals": [repr(v) for _, v in r.evals],
                             "status": r.status}  # fmt: skip
    return ref


if __name__ == "__main__":
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(reference(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)", file=sys.stderr)
