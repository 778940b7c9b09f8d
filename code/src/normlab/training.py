"""One training loop for every model config: AdamW, a schedule, probes; `run` seeds and builds.

A run that blows up ends with ``status="diverged"`` and a finite loss curve; it never raises.
Probes observe without perturbing: a tracked and an untracked run with one seed are identical.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import checks
from .data import Corpus, load_corpus
from .init import data_init_
from .model import TransformerLM
from .probes import attention_stats, layer_grad_stats, mode, model_update
from .record import RunRecorder, TrainResult
from .scale import get_device

__all__ = [
    "SCHEDULES",
    "WEIGHT_DECAY_MODES",
    "lr_multiplier",
    "make_adamw",
    "TrainConfig",
    "train",
    "run",
    "initial_model",
    "initial_val_loss",
    "check_job",
    "call_probe",
]

SCHEDULES = ("constant", "cosine", "inverse-sqrt", "wsd")
WEIGHT_DECAY_MODES = ("coupled", "independent")
# "matrices": weight decay on tensors of two or more dimensions only (nanoGPT, most LLM recipes);
# "all": on every parameter, norm gains and biases too, as fairseq's Adam applies --weight-decay.
WEIGHT_DECAY_ON = ("matrices", "all")
Probe = Callable[[TransformerLM, torch.Tensor, torch.Tensor], dict[str, Any]]


def lr_multiplier(
    schedule: str, step: int, *, warmup: int, total: int, min_ratio: float = 0.1, decay_fraction: float = 0.2
) -> float:
    """The factor on the peak learning rate at optimiser step ``step`` (1-based).

    Every schedule starts with a linear warmup of ``warmup`` steps (0 for none). Then:
    ``constant`` stays at 1; ``cosine`` decays to ``min_ratio`` at ``total``; ``wsd`` (warmup-
    stable-decay) stays at 1 and decays linearly to ``min_ratio`` over the last
    ``ceil(decay_fraction * total)`` steps, or from the end of the warmup if that comes later, so
    the rate never jumps; ``inverse-sqrt`` is Vaswani et al.'s d^-0.5 min(s^-0.5, s w^-1.5),
    rescaled so that its peak (at s = w) is 1: min(s/w, sqrt(w/s)).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; valid choices: {', '.join(SCHEDULES)}")
    if not 0.0 < decay_fraction <= 1.0:
        raise ValueError(f"decay_fraction must be in (0, 1], got {decay_fraction}")
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
    decay_start = max(warmup, total - math.ceil(decay_fraction * total))
    if s <= decay_start:
        return 1.0
    return 1.0 - (1 - min_ratio) * min((s - decay_start) / max(total - decay_start, 1), 1.0)


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs besides the model. Defaults follow Xiong et al.'s Adam (beta2 0.98).

    Weight decay: ``"coupled"`` is torch's AdamW (each step shrinks weights by lr_t * weight_decay,
    so an LR sweep also sweeps the decay); ``"independent"`` shrinks them by weight_decay * lr_t /
    lr, following the schedule but not the peak rate (Wortsman et al. 2023, 2309.14322). It
    applies to tensors of two or more dimensions (``weight_decay_on="matrices"``) or to every
    parameter, norm gains and biases included (``"all"``, fairseq's convention).
    """

    steps: int = 300
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 1e-3
    schedule: str = "cosine"
    warmup: int = 0
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2  # wsd only: the share of the run spent decaying
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.0
    weight_decay_mode: str = "coupled"
    weight_decay_on: str = "matrices"
    clip: Optional[float] = None
    seed: int = 0
    eval_every: int = 50
    eval_windows: int = 256  # the fixed validation set: this many windows, evenly spaced, every run
    log_every: int = 10  # per-layer gradients (before clipping), update size, optional probes below
    grad_param: str = "mlp.fc2.weight"  # the block parameter whose gradient is logged per layer
    track_attention: bool = False  # per-layer max attention logit and entropy at log steps
    track_model_update: bool = False  # ||F(x; theta_t) - F(x; theta_0)|| / ||F(x; theta_0)||
    diverge_window: int = 20  # this many steps in a row worse than uniform guessing: diverged
    spike_threshold: float = 1.0  # nats above the best 10-step mean so far: a spike

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_windows", "log_every", "diverge_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TrainConfig.{name} must be a positive integer, got {value!r}")
        checks.integer("TrainConfig.seed", self.seed, minimum=0)
        for name in ("lr", "eps", "spike_threshold"):
            checks.number(f"TrainConfig.{name}", getattr(self, name), low=0.0, low_open=True)
        warmup = self.warmup
        if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= self.steps:
            raise ValueError(f"TrainConfig.warmup must be an integer in [0, steps={self.steps}], got {warmup!r}")
        checks.choice("schedule", self.schedule, SCHEDULES)
        checks.number("TrainConfig.min_lr_ratio", self.min_lr_ratio, low=0.0, high=1.0)
        checks.number("TrainConfig.decay_fraction", self.decay_fraction, low=0.0, high=1.0, low_open=True)
        betas = self.betas
        if (
            isinstance(betas, (str, bytes))
            or not isinstance(betas, (tuple, list))
            or len(betas) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0.0 <= b < 1.0 for b in betas)
        ):
            raise ValueError(f"TrainConfig.betas must be two numbers in [0, 1), got {betas!r}")
        checks.number("TrainConfig.weight_decay", self.weight_decay, low=0.0)
        checks.choice("weight_decay_mode", self.weight_decay_mode, WEIGHT_DECAY_MODES)
        checks.choice("weight_decay_on", self.weight_decay_on, WEIGHT_DECAY_ON)
        if self.clip is not None:
            # clip <= 0 is no clipping at all: 0 zeroes every gradient and a negative norm reverses it.
            checks.number("TrainConfig.clip (None for no clipping)", self.clip, low=0.0, low_open=True)
        if not isinstance(self.grad_param, str):
            raise ValueError(f"TrainConfig.grad_param must be a block parameter's name, got {self.grad_param!r}")
        for name in ("track_attention", "track_model_update"):
            checks.flag(f"TrainConfig.{name}", getattr(self, name))
        object.__setattr__(self, "betas", tuple(float(b) for b in betas))  # a list from JSON becomes the tuple again


def adamw_weight_decay(config: TrainConfig) -> float:
    """The ``weight_decay`` to hand torch's AdamW, which shrinks weights by lr_t * weight_decay per
    step: ``config.weight_decay`` when coupled, ``config.weight_decay / config.lr`` when independent
    (so the shrink is weight_decay * lr_t / lr, whatever the peak rate)."""
    return config.weight_decay if config.weight_decay_mode == "coupled" else config.weight_decay / config.lr


def make_adamw(param_groups: list[dict[str, Any]], config: TrainConfig) -> torch.optim.AdamW:
    """torch's AdamW with the config's betas and eps, fused into one kernel where this torch and
    device have it (the CPU since torch 2.4): the per-tensor loop of the default implementation was
    a tenth of a small model's training step. Same update rule, same hyperparameters."""
    kwargs: dict[str, Any] = dict(lr=config.lr, betas=config.betas, eps=config.eps)
    try:  # copies: a failed constructor leaves its settings (fused=True) in the dicts it was given
        return torch.optim.AdamW([dict(g) for g in param_groups], fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # no fused kernel for this torch or device
        return torch.optim.AdamW([dict(g) for g in param_groups], **kwargs)


def _plain(value: Any) -> Any:
    """A probe's value as plain Python numbers: a tensor becomes a float or a (nested) list, so
    every record is JSON and a store can save it."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.dim() == 0 else value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", None) == 0:
        return value.item()  # a numpy scalar
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return value.tolist()  # a numpy array
    return value


def _isolated_rng(device: torch.device) -> Any:
    """A context in which random draws do not move the run's own random streams: a probe that
    samples (dropout in train mode) leaves the batches and masks of the run it measures alone."""
    # Every CUDA device's stream, whatever the run's device: `initial_model` seeds them all.
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devices)


@contextlib.contextmanager
def _default_dtype(dtype: Optional[torch.dtype]) -> Iterator[None]:
    """torch's default floating dtype set to ``dtype`` inside (None: left as it is), restored after."""
    before = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def call_probe(probe: Probe, model: TransformerLM, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """``probe(model, x, y)`` on copies of the windows, with the random state isolated, its values
    made plain (`_plain`); a probe must return a dict."""
    with _isolated_rng(x.device):
        out = probe(model, x.clone(), y.clone())
    if not isinstance(out, dict):
        raise ValueError(f"a probe must return a dict of measurements, got {type(out).__name__} from {probe!r}")
    return _plain(out)


@torch.no_grad()
def _val_loss(model: TransformerLM, x: torch.Tensor, y: torch.Tensor, chunk: int = 64) -> float:
    """Mean loss per byte over the whole fixed validation set, in eval mode."""
    with mode(model, False):
        total = sum(
            float(F.cross_entropy(model(xb).flatten(0, 1), yb.flatten(), reduction="sum"))
            for xb, yb in zip(x.split(chunk), y.split(chunk))
        )
    return total / y.numel()


def train(
    model: TransformerLM,
    corpus: Corpus,
    config: TrainConfig,
    *,
    device: Optional[torch.device] = None,
    progress: bool = False,
    probe: Optional[Probe] = None,
    stop_after: Optional[int] = None,
) -> TrainResult:
    """Train ``model`` in place on ``corpus`` with AdamW and ``config.schedule``.

    ``progress=True`` shows a bar for this run (off by default, so a notebook's outputs are the same
    at every scale). The batches come from a generator seeded with ``config.seed``; seed the model's init yourself
    (or use `run`). On the CPU the same seed gives the same losses, bit for bit, whatever is
    tracked. Every evaluation uses one fixed validation set (``config.eval_windows`` windows,
    the same for every seed). ``probe(model, x, y)``, if given, runs after the update at every log
    step on the first ``batch_size`` windows of that set, and what it returns is added to that
    step's record. The run ends ``"diverged"`` when a loss, a gradient statistic, a probe value or
    a validation loss is not finite, or when the training loss stays above max(ln V, first loss)
    for ``config.diverge_window`` steps in a row (worse than guessing uniformly, for a while).
    ``stop_after=k`` trains only the first k steps of that schedule (a stored board's early check).
    """
    device = device or get_device()
    model.to(device).train()
    gen = torch.Generator().manual_seed(config.seed)
    val_x, val_y = (t.to(device) for t in corpus.eval_set(config.seq_len, config.eval_windows))
    probe_x, probe_y = val_x[: config.batch_size], val_y[: config.batch_size]
    decay = [p for p in model.parameters() if p.dim() >= 2 or config.weight_decay_on == "all"]
    no_decay = [p for p in model.parameters() if p.dim() < 2 and config.weight_decay_on != "all"]
    wd = adamw_weight_decay(config)
    opt = make_adamw([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}], config)
    model0 = copy.deepcopy(model) if config.track_model_update else None
    result = TrainResult(config=asdict(config), unigram_val=corpus.unigram_loss(val_y.cpu()))
    initial = _val_loss(model, val_x, val_y)
    result.initial_val = initial if math.isfinite(initial) else None
    rec = RunRecorder(result, config, corpus.vocab_size)
    start = time.perf_counter()
    bar = tqdm(range(1, config.steps + 1), disable=not progress, leave=False, desc="train")
    for step in bar:
        if stop_after is not None and step > stop_after:
            break
        lr = config.lr * lr_multiplier(
            config.schedule, step, warmup=config.warmup, total=config.steps,
            min_ratio=config.min_lr_ratio, decay_fraction=config.decay_fraction,
        )  # fmt: skip
        for group in opt.param_groups:
            group["lr"] = lr
        log_now = step == 1 or step % config.log_every == 0
        x, y = (t.to(device) for t in corpus.batch("train", config.batch_size, config.seq_len, gen))
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        value = float(loss.detach())
        if not rec.loss(step, value):
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if log_now:
            stats = layer_grad_stats(model, config.grad_param)
            record: dict[str, Any] = {"step": step, "grad_norms": stats["block_l2"],
                                      "grad_l2": stats["l2"], "grad_l1_mean": stats["l1_mean"]}  # fmt: skip
            before = [p.detach().clone() for p in model.parameters()]
        if config.clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        opt.step()
        if not rec.stepped(step, value, lr):
            break
        if log_now:
            delta = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(model.parameters(), before)))
            record["update_size"] = delta / math.sqrt(sum(float(b.pow(2).sum()) for b in before))
            if config.track_attention:
                att = attention_stats(model, probe_x)
                record["max_logit"], record["entropy"] = att["max_logit"].tolist(), att["entropy"].tolist()
            if model0 is not None:
                record["model_update"] = model_update(model, model0, probe_x)
            if probe is not None:
                record.update(call_probe(probe, model, probe_x, probe_y))
            if not rec.log(step, record):
                break
        if step % config.eval_every == 0 or step == config.steps:
            val = _val_loss(model, val_x, val_y)
            if not rec.evaluate(step, val):
                break
            bar.set_postfix(loss=f"{value:.3f}", val=f"{val:.3f}")
    bar.close()
    return rec.finish(time.perf_counter() - start)


def initial_model(model_kwargs: dict[str, Any], config: TrainConfig, corpus: Corpus) -> TransformerLM:
    """The untrained model ``run(model_kwargs, config)`` trains: seeded with ``config.seed``, built,
    and its data-dependent init done (`data_init_`), on the CPU."""
    torch.manual_seed(config.seed)
    model = TransformerLM(corpus.vocab_size, **model_kwargs)
    data_init_(model, corpus, config)
    return model


def initial_val_loss(model_kwargs: dict[str, Any], config: TrainConfig, corpus: Optional[Corpus] = None) -> float:
    """The validation loss of the model ``run(model_kwargs, config)`` starts from, on the fixed
    validation windows the run is scored on: the loss at initialisation, l0, of Wortsman et al.'s
    LR sensitivity (`normlab.stats.lr_sensitivity`)."""
    check_job(model_kwargs, config, where="initial_val_loss")
    corpus = corpus or load_corpus()
    x, y = corpus.eval_set(config.seq_len, config.eval_windows)
    with _isolated_rng(torch.device("cpu")):
        return _val_loss(initial_model(model_kwargs, config, corpus), x, y)


def check_job(model_kwargs: Any, config: Any, where: str = "run") -> None:
    """What `run` and `run_many` take, checked before anything trains: a dict of `TransformerLM`
    keyword arguments and a `TrainConfig`."""
    if not isinstance(model_kwargs, dict):
        raise ValueError(
            f"{where}: the model must be a dict of TransformerLM keyword arguments, got {type(model_kwargs).__name__}"
        )
    if "vocab_size" in model_kwargs:
        raise ValueError(f"{where}: vocab_size comes from the corpus; leave it out of the model kwargs")
    if not isinstance(config, TrainConfig):
        hint = ": build one with TrainConfig(**your_dict)" if isinstance(config, dict) else ""
        raise ValueError(f"{where}: the config must be a normlab.TrainConfig, got {type(config).__name__}{hint}")


def run(
    model_kwargs: dict[str, Any],
    config: TrainConfig,
    *,
    corpus: Optional[Corpus] = None,
    device: Optional[torch.device] = None,
    progress: bool = False,
    probe: Optional[Probe] = None,
    final_probe: Optional[Probe] = None,
    keep_model: bool = False,
    stop_after: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
) -> TrainResult:
    """Seed, build ``TransformerLM(corpus.vocab_size, **model_kwargs)``, finish its init on data
    where its placement asks for it (`data_init_`: Admin), train; the result keeps both
    configs. ``final_probe(model, x, y)`` runs once on the trained model (on the first validation
    windows) into ``result.final``, unless the run diverged; ``keep_model=True`` hands the trained
    model back as ``result.trained_model`` (never saved with the results); ``stop_after`` as `train`.
    ``dtype`` (default: torch's, float32) builds and trains the model in that precision: float64
    makes a stored board's early check (`normlab.replay`) blind to how a processor rounds.

    The run seeds torch's global generator itself (dropout draws from it) inside a forked random
    state, so the caller's own random stream is the same before and after."""
    check_job(model_kwargs, config)
    corpus = corpus or load_corpus()
    device = device or get_device()
    with _isolated_rng(device), _default_dtype(dtype):
        model = initial_model(model_kwargs, config, corpus)
        result = train(model, corpus, config, device=device, progress=progress, probe=probe, stop_after=stop_after)
    result.model = dict(model_kwargs)
    if final_probe is not None and result.status != "diverged":
        on = next(model.parameters()).device
        x, y = (t[: config.batch_size].to(on) for t in corpus.eval_set(config.seq_len, config.eval_windows))
        result.final = call_probe(final_probe, model, x, y)
    if keep_model:
        result.trained_model = model
    return result
