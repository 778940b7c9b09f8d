"""K training runs of one architecture as one computation: stacked weights, `torch.func.vmap`, per-run AdamW.

Run i of `train_batched` is `train.run(model_kwargs, configs[i])` to float tolerance; it pays off on a GPU.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from dataclasses import asdict
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from .data import Corpus, load_corpus
from .probes import block_param_names, mode
from .record import RunRecorder, TrainResult
from .scale import get_device
from .training import TrainConfig, _isolated_rng, adamw_weight_decay, initial_model, lr_multiplier

__all__ = ["SHARED_FIELDS", "train_batched", "batchable"]

# One value for the whole batch: they fix the tensors' shapes and when the loop logs and evaluates.
SHARED_FIELDS = ("steps", "batch_size", "seq_len", "eval_every", "eval_windows", "log_every", "grad_param",
                 "weight_decay_on")  # fmt: skip
_TRACKING = ("track_attention", "track_model_update")
_DROPOUTS = ("dropout", "attn_dropout")
# functorch has no batching rule for SDPA on the CPU and loops over the runs instead: correct, only slower.
_SDPA_FALLBACK = re.escape("There is a performance drop because we have not yet implemented the batching rule")
Tensors = dict[str, torch.Tensor]


def _unbatchable(model_kwargs: dict[str, Any], config: TrainConfig) -> Optional[str]:
    """Why this job cannot join a batch, or None.

    Dropout: the sequential run draws its masks from the global generator right after its own
    seeded init; under vmap all K runs share one generator stream, so no run's masks can match.
    """
    for name in _TRACKING:
        if getattr(config, name):
            return f"TrainConfig.{name}=True is not supported by train_batched (its probes need a module per run)"
    for name in _DROPOUTS:
        if float(model_kwargs.get(name, 0.0)) > 0:
            return (
                f"model {name}={model_kwargs[name]} cannot be batched: under vmap the runs share one random "
                "stream, so no run would see the dropout masks of its sequential twin; use train.run"
            )
    return None


def _check(model_kwargs: dict[str, Any], configs: Sequence[TrainConfig]) -> None:
    for config in configs:
        reason = _unbatchable(model_kwargs, config)
        if reason is not None:
            raise ValueError(reason)
    first = configs[0]
    for config in configs[1:]:
        for name in SHARED_FIELDS:
            if getattr(config, name) != getattr(first, name):
                raise ValueError(
                    f"TrainConfig.{name} must be the same for every batched run, got "
                    f"{getattr(first, name)!r} and {getattr(config, name)!r}"
                )


def _per_run(t: torch.Tensor) -> torch.Tensor:
    """A stacked tensor as [K, entries]; flatten(1) would fail on a scalar parameter's [K] stack
    (ReZero's gate, DyT's alpha, the l2 QK-norm's scale)."""
    return t.reshape(t.shape[0], -1)


def _sq_sums(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per run, the sum of squares over all the given stacked tensors: [K], in float64 as the
    sequential loop adds its per-tensor floats in Python."""
    return torch.stack([_per_run(t.pow(2)).sum(1) for t in tensors]).double().sum(0)


def train_batched(
    model_kwargs: dict[str, Any],
    configs: Sequence[TrainConfig],
    *,
    corpus: Optional[Corpus] = None,
    device: Optional[torch.device] = None,
) -> list[TrainResult]:
    """Train ``TransformerLM(corpus.vocab_size, **model_kwargs)`` once per config, all K runs at once.

    Result i matches ``run(model_kwargs, configs[i], corpus=corpus)`` to float tolerance (not bit for
    bit: batched kernels add in another order): the same seeded init, the same batches, schedule,
    AdamW (torch's update rule, written on the stacked tensors), clipping, divergence and
    spike detection, curves, evaluations and log records. A run that diverges is frozen (weights and
    optimiser state stop changing, masked with torch.where so its NaNs stay in its slice) and its
    record stops where the sequential one would; the others carry on. ``seconds`` is the batch's
    wall time divided by K. Frozen runs still ride along in the batched compute until all have ended.

    The configs must agree on `SHARED_FIELDS` and track nothing; the model must not use dropout (see
    `batchable`, which groups jobs for this function). A ValueError names what does not fit.
    """
    configs = list(configs)
    if not configs:
        return []
    _check(model_kwargs, configs)
    corpus = corpus or load_corpus()
    device = device or get_device()
    shared, k = configs[0], len(configs)

    models = []
    with _isolated_rng(device):  # the caller's random stream stays as it was, as with `run`
        for config in configs:  # run i starts from run(...)'s weights, Admin's omegas included
            models.append(initial_model(model_kwargs, config, corpus).to(device))
    block_params = block_param_names(models[0])
    if shared.grad_param not in block_params:
        raise ValueError(f"unknown block parameter {shared.grad_param!r}; valid choices: {', '.join(block_params)}")
    stacked, buffers = stack_module_state(models)
    params: Tensors = {name: p.detach() for name, p in stacked.items()}
    template = models[0].to("meta").train()  # the structure only; the weights always come from `params`
    del models, stacked
    n_layers = len(template.blocks)
    block_names = [[n for n in params if n.startswith(f"blocks.{i}.")] for i in range(n_layers)]
    watched = [f"blocks.{i}.{shared.grad_param}" for i in range(n_layers)]

    def loss_fn(p: Tensors, b: Tensors, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(template, (p, b), (x,)).flatten(0, 1), y.flatten())

    def val_sum(p: Tensors, b: Tensors, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = functional_call(template, (p, b), (x,))
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")

    step_fn = vmap(grad_and_value(loss_fn))
    val_fn = vmap(val_sum, in_dims=(0, 0, None, None))  # one validation set for every run

    gens = [torch.Generator().manual_seed(c.seed) for c in configs]
    val_x, val_y = (t.to(device) for t in corpus.eval_set(shared.seq_len, shared.eval_windows))
    unigram = corpus.unigram_loss(val_y.cpu())
    results = [TrainResult(config=asdict(c), model=dict(model_kwargs), unigram_val=unigram) for c in configs]
    recs = [RunRecorder(r, c, corpus.vocab_size) for r, c in zip(results, configs)]  # the loop's own bookkeeping
    # Per-run optimiser constants. torch.optim.AdamW gets weight_decay only for params with dim >= 2;
    # a stacked tensor has one dim more.
    wds = [adamw_weight_decay(c) for c in configs]
    decays = {name: p.dim() - 1 >= 2 or configs[0].weight_decay_on == "all" for name, p in params.items()}
    clips = [c.clip for c in configs]
    exp_avg = {name: torch.zeros_like(p) for name, p in params.items()}
    exp_avg_sq = {name: torch.zeros_like(p) for name, p in params.items()}

    def val_losses() -> list[float]:
        totals = [0.0] * k
        with torch.no_grad(), mode(template, False):
            for xb, yb in zip(val_x.split(64), val_y.split(64)):  # _val_loss's chunks and order of sums
                for j, v in enumerate(val_fn(params, buffers, xb, yb).tolist()):
                    totals[j] += v
        return [t / val_y.numel() for t in totals]

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SDPA_FALLBACK)
        for result, initial in zip(results, val_losses()):
            result.initial_val = initial if math.isfinite(initial) else None
        for step in range(1, shared.steps + 1):
            lrs = [
                c.lr * lr_multiplier(c.schedule, step, warmup=c.warmup, total=c.steps,
                                     min_ratio=c.min_lr_ratio, decay_fraction=c.decay_fraction)
                for c in configs
            ]  # fmt: skip
            log_now = step == 1 or step % shared.log_every == 0
            # Every run draws from its own generator, frozen or not: a frozen run's draws are never used.
            xs, ys = zip(*(corpus.batch("train", shared.batch_size, shared.seq_len, g) for g in gens))
            x, y = torch.stack(xs).to(device), torch.stack(ys).to(device)
            grads, loss = step_fn(params, buffers, x, y)
            values = loss.tolist()
            for rec, value in zip(recs, values):
                if rec.active:
                    rec.loss(step, value)  # a non-finite loss ends the run before its update, as in train
            stepping = [rec.active for rec in recs]
            if not any(stepping):
                break
            if log_now:
                stats = torch.stack(
                    [torch.stack([_per_run(grads[n]).norm(dim=1) for n in watched]).double(),
                     torch.stack([_per_run(grads[n].abs()).mean(1) for n in watched]).double(),
                     torch.stack([_sq_sums([grads[n] for n in names]).sqrt() for names in block_names])]
                ).transpose(1, 2).tolist()  # [stat, run, layer]  # fmt: skip
            if any(c is not None for c in clips):
                # nn.utils.clip_grad_norm_: the norm of the per-tensor norms, coefficient clamped at 1.
                total = torch.linalg.vector_norm(torch.stack([_per_run(g).norm(dim=1) for g in grads.values()]), dim=0)
                limit = torch.tensor([math.inf if c is None else c for c in clips], dtype=total.dtype, device=device)
                coef = torch.clamp(limit / (total + 1e-6), max=1.0)
                coef = torch.where(torch.isinf(limit), torch.ones_like(coef), coef)  # no clip: exactly 1
                grads = {n: g * coef.view(-1, *([1] * (g.dim() - 1))) for n, g in grads.items()}
            new = _adamw_step(params, grads, exp_avg, exp_avg_sq, step, lrs, wds, decays, configs)
            mask = torch.tensor(stepping, device=device)
            for name in params:
                m = mask.view(-1, *([1] * (params[name].dim() - 1)))
                exp_avg[name] = torch.where(m, new[name][1], exp_avg[name])
                exp_avg_sq[name] = torch.where(m, new[name][2], exp_avg_sq[name])
            before, params = params, {n: torch.where(mask.view(-1, *([1] * (p.dim() - 1))), new[n][0], p)
                                      for n, p in params.items()}  # fmt: skip
            for j, rec in enumerate(recs):
                if stepping[j]:
                    rec.stepped(step, values[j], lrs[j])
            if log_now:
                delta = _sq_sums([params[n] - before[n] for n in params]).sqrt()
                size = (delta / _sq_sums(list(before.values())).sqrt()).tolist()
                for j, rec in enumerate(recs):
                    if rec.active:
                        rec.log(step, {"step": step, "grad_norms": stats[2][j], "grad_l2": stats[0][j],
                                       "grad_l1_mean": stats[1][j], "update_size": size[j]})  # fmt: skip
            if (step % shared.eval_every == 0 or step == shared.steps) and any(r.active for r in recs):
                for rec, val in zip(recs, val_losses()):
                    if rec.active:
                        rec.evaluate(step, val)
            if not any(rec.active for rec in recs):
                break
    seconds = (time.perf_counter() - start) / k  # the batch's wall time, shared out
    return [rec.finish(seconds) for rec in recs]


def _adamw_step(
    params: Tensors,
    grads: Tensors,
    exp_avg: Tensors,
    exp_avg_sq: Tensors,
    step: int,
    lrs: list[float],
    wds: list[float],
    decays: dict[str, bool],
    configs: Sequence[TrainConfig],
) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """torch.optim.AdamW's step, in the order of operations of its single-tensor path, for every run
    at once and out of place: name -> (param, exp_avg, exp_avg_sq). Scalars are formed in float64
    and rounded once, as torch does with its Python-float hyperparameters."""
    b1 = [c.betas[0] for c in configs]
    b2 = [c.betas[1] for c in configs]
    rows = [
        [1 - lr * wd for lr, wd in zip(lrs, wds)],  # decoupled decay
        [1 - b for b in b1],
        b2,
        [1 - b for b in b2],
        [(1 - b**step) ** 0.5 for b in b2],
        [c.eps for c in configs],
        [-lr / (1 - b**step) for lr, b in zip(lrs, b1)],  # minus the step size
    ]
    like = next(iter(params.values()))
    hyper = torch.tensor(rows, dtype=like.dtype, device=like.device)  # one transfer per step, not one per tensor
    out = {}
    for name, p in params.items():
        g = grads[name]
        shrink, one_minus_b1, beta2, one_minus_b2, bc2_sqrt, eps, step_size = hyper.view(
            len(rows), -1, *([1] * (p.dim() - 1))
        ).unbind(0)
        if decays[name]:
            p = p * shrink
        m = exp_avg[name].lerp(g, one_minus_b1)
        v = exp_avg_sq[name] * beta2 + one_minus_b2 * g * g
        denom = v.sqrt() / bc2_sqrt + eps
        out[name] = (p + step_size * m / denom, m, v)
    return out


def batchable(jobs: Sequence[tuple[dict[str, Any], TrainConfig]]) -> list[list[int]]:
    """Indices of ``jobs`` (model kwargs, config) grouped so that each group can go to one
    `train_batched` call: equal model kwargs (==), equal `SHARED_FIELDS`, no tracking, no dropout.
    Groups come in order of their first job and keep the jobs' order; a job that cannot be batched
    is a group of its own."""
    groups: list[list[int]] = []
    keys: list[Optional[tuple[dict[str, Any], tuple[Any, ...]]]] = []
    for i, (model_kwargs, config) in enumerate(jobs):
        key = None
        if _unbatchable(model_kwargs, config) is None:
            key = (dict(model_kwargs), tuple(getattr(config, n) for n in SHARED_FIELDS))
            # kwargs may hold unhashable values, so a scan with == rather than a dict lookup
            match = next((g for g, other in zip(groups, keys) if other is not None and other == key), None)
            if match is not None:
                match.append(i)
                continue
        groups.append([i])
        keys.append(key)
    return groups
