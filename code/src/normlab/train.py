"""One training loop for every model config: AdamW, a schedule, probes, and divergence detection.

A run that blows up ends with ``status="diverged"`` and a finite loss curve; it never raises.
"""

from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .data import Corpus, load_corpus
from .model import TransformerLM
from .probes import model_update, record_attention_logits
from .scale import get_device, get_scale

__all__ = [
    "SCHEDULES",
    "OUTCOMES",
    "lr_multiplier",
    "TrainConfig",
    "TrainResult",
    "train",
    "run",
    "classify_outcome",
]

SCHEDULES = ("constant", "cosine", "inverse-sqrt", "wsd")
OUTCOMES = ("trained", "stalled", "diverged")


def lr_multiplier(
    schedule: str, step: int, *, warmup: int, total: int, min_ratio: float = 0.1, decay_fraction: float = 0.2
) -> float:
    """The factor on the peak learning rate at optimiser step ``step`` (1-based).

    Every schedule starts with a linear warmup of ``warmup`` steps (0 for none). Then:
    ``constant`` stays at 1; ``cosine`` decays to ``min_ratio`` at ``total``; ``wsd`` (warmup-
    stable-decay) stays at 1 and decays linearly to ``min_ratio`` over the last ``decay_fraction``
    of the run; ``inverse-sqrt`` is Vaswani et al.'s d^-0.5 min(s^-0.5, s w^-1.5), rescaled so that
    its peak (at s = w) is 1: min(s/w, sqrt(w/s)).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; valid choices: {', '.join(SCHEDULES)}")
    s = max(step, 1)
    if schedule == "inverse-sqrt":
        return min(s / warmup, math.sqrt(warmup / s)) if warmup > 0 else 1.0 / math.sqrt(s)
    if s <= warmup:
        return s / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        progress = min((s - warmup) / max(total - warmup, 1), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    decay_start = total - int(decay_fraction * total)
    if s <= decay_start:
        return 1.0
    return 1.0 - (1 - min_ratio) * min((s - decay_start) / max(total - decay_start, 1), 1.0)


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs besides the model. Defaults follow Xiong et al.'s Adam (beta2 0.98)."""

    steps: int = 300
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup: int = 0
    min_lr_ratio: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip: Optional[float] = None
    seed: int = 0
    eval_every: int = 50
    eval_batches: int = 8
    log_every: int = 10  # per-layer gradient norms, update size (and the optional probes below)
    track_attention: bool = False  # max attention logit and entropy at log steps (explicit attention)
    track_model_update: bool = False  # ||F(x; theta_t) - F(x; theta_0)|| / ||F(x; theta_0)||
    diverge_factor: float = 2.0  # loss above this multiple of the first loss counts as diverged

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches", "log_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TrainConfig.{name} must be positive, got {getattr(self, name)}")
        if self.warmup < 0 or self.lr <= 0:
            raise ValueError(f"need lr > 0 and warmup >= 0, got lr={self.lr}, warmup={self.warmup}")
        lr_multiplier(self.schedule, 1, warmup=self.warmup, total=self.steps)  # validates the name


@dataclass
class TrainResult:
    """What a run recorded. Curves hold finite values only; a diverged run stops at ``diverged_at``."""

    config: dict[str, Any]
    model: dict[str, Any] = field(default_factory=dict)
    status: str = "completed"  # or "diverged"
    diverged_at: Optional[int] = None
    losses: list[float] = field(default_factory=list)  # train loss per step
    lrs: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    logs: list[dict[str, Any]] = field(default_factory=list)  # probes at log steps
    seconds: float = 0.0

    @property
    def final_val_loss(self) -> float:
        """The last validation loss; nan for a diverged run (plot helpers mark it instead)."""
        return self.evals[-1][1] if self.evals and self.status != "diverged" else float("nan")


def _block_grad_norms(model: TransformerLM) -> list[float]:
    norms = []
    for block in model.blocks:
        sq = sum(float(p.grad.pow(2).sum()) for p in block.parameters() if p.grad is not None)
        norms.append(math.sqrt(sq))
    return norms


@torch.no_grad()
def _val_loss(model: TransformerLM, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    model.eval()
    total = sum(float(F.cross_entropy(model(x).flatten(0, 1), y.flatten())) for x, y in batches)
    model.train()
    return total / len(batches)


def show_progress() -> bool:
    """Progress bars on, except in CI logs and at the ci scale."""
    return not os.environ.get("CI") and get_scale() != "ci"


def train(
    model: TransformerLM,
    corpus: Corpus,
    config: TrainConfig,
    *,
    device: Optional[torch.device] = None,
    progress: Optional[bool] = None,
    probe: Optional[Callable[[TransformerLM, torch.Tensor], dict[str, Any]]] = None,
) -> TrainResult:
    """Train ``model`` in place on ``corpus`` with AdamW and ``config.schedule``.

    The batches come from a generator seeded with ``config.seed``; seed the model's init yourself
    (or use `run`). On the CPU the same seed gives the same losses, bit for bit. ``probe(model, x)``,
    if given, runs after the update at every log step on a fixed validation batch ``x``, and what
    it returns is added to that step's record.
    """
    device = device or get_device()
    model.to(device).train()
    gen = torch.Generator().manual_seed(config.seed)
    val_gen = torch.Generator().manual_seed(config.seed + 1)
    val_batches = [
        tuple(t.to(device) for t in corpus.batch("val", config.batch_size, config.seq_len, val_gen))
        for _ in range(config.eval_batches)
    ]
    probe_x = val_batches[0][0]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
    )
    model0 = copy.deepcopy(model).eval() if config.track_model_update else None
    result = TrainResult(config=asdict(config))
    first_loss: Optional[float] = None
    start = time.perf_counter()
    show = show_progress() if progress is None else progress
    bar = tqdm(range(1, config.steps + 1), disable=not show, leave=False, desc="train")
    for step in bar:
        lr = config.lr * lr_multiplier(
            config.schedule, step, warmup=config.warmup, total=config.steps, min_ratio=config.min_lr_ratio
        )
        for group in opt.param_groups:
            group["lr"] = lr
        log_now = step == 1 or step % config.log_every == 0
        attns = record_attention_logits(model, config.track_attention and log_now)
        x, y = (t.to(device) for t in corpus.batch("train", config.batch_size, config.seq_len, gen))
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        value = float(loss.detach())
        first_loss = value if first_loss is None else first_loss
        if not math.isfinite(value) or value > config.diverge_factor * first_loss:
            result.status, result.diverged_at = "diverged", step
            record_attention_logits(model, False)
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if config.clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        if log_now:
            record: dict[str, Any] = {"step": step, "grad_norms": _block_grad_norms(model)}
            if config.track_attention:
                record["max_logit"] = max(float(a.logit_stats["max_logit"]) for a in attns)
                record["entropy"] = sum(float(a.logit_stats["entropy"]) for a in attns) / len(attns)
                record_attention_logits(model, False)
            before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        result.losses.append(value)
        result.lrs.append(lr)
        if log_now:
            delta = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(model.parameters(), before)))
            norm = math.sqrt(sum(float(b.pow(2).sum()) for b in before))
            record["update_size"] = delta / norm
            if model0 is not None:
                record["model_update"] = model_update(model, model0, probe_x)
            if probe is not None:
                record.update(probe(model, probe_x))
            result.logs.append(record)
        if step % config.eval_every == 0 or step == config.steps:
            val = _val_loss(model, val_batches)
            if not math.isfinite(val):
                result.status, result.diverged_at = "diverged", step
                break
            result.evals.append((step, val))
            bar.set_postfix(loss=f"{value:.3f}", val=f"{val:.3f}")
    bar.close()
    result.seconds = time.perf_counter() - start
    return result


def run(
    model_kwargs: dict[str, Any],
    config: TrainConfig,
    *,
    corpus: Optional[Corpus] = None,
    device: Optional[torch.device] = None,
    progress: Optional[bool] = None,
    probe: Optional[Callable[[TransformerLM, torch.Tensor], dict[str, Any]]] = None,
) -> TrainResult:
    """Seed, build ``TransformerLM(corpus.vocab_size, **model_kwargs)``, train; the result keeps both configs."""
    corpus = corpus or load_corpus()
    torch.manual_seed(config.seed)
    model = TransformerLM(corpus.vocab_size, **model_kwargs)
    result = train(model, corpus, config, device=device, progress=progress, probe=probe)
    result.model = dict(model_kwargs)
    return result


def classify_outcome(result: TrainResult, unigram_entropy: float, margin: float = 0.1) -> str:
    """``diverged`` if the loop stopped it; ``stalled`` if its validation loss stayed within
    ``margin`` nats of the unigram entropy (it learned byte frequencies and nothing more); else
    ``trained``."""
    if result.status == "diverged":
        return "diverged"
    return "stalled" if result.final_val_loss > unigram_entropy - margin else "trained"
