"""What a run records (`TrainResult`), the bookkeeping both training loops share (`RunRecorder`:
loss monitor, divergence, logs, evaluations), and what became of a run (`classify_outcome`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from .data import VOCAB_SIZE

__all__ = [
    "OUTCOMES", "TrainResult", "steps_to", "plateau_exit", "LossMonitor", "RunRecorder", "divergence_ceiling",
    "classify_outcome",
]  # fmt: skip

OUTCOMES = ("trained", "stalled", "diverged")


@dataclass
class TrainResult:
    """What a run recorded. Curves and logs hold finite values only; a diverged run stops at
    ``diverged_at``.

    ``logs`` has one record per log step: ``grad_norms`` (per block, the L2 norm of the gradient
    over all the block's parameters), ``grad_l2`` and ``grad_l1_mean`` (per block, for the
    parameter ``config["grad_param"]``), all taken before clipping; ``update_size``
    (||delta theta|| / ||theta||); with tracking, per-layer ``max_logit`` and ``entropy`` (see
    `probes.attention_stats`) and ``model_update``; and whatever the probe callback returned.
    ``unigram_val`` is the loss of the training bytes' unigram model on the run's own validation
    set: the level a model that learned only byte frequencies reaches. ``initial_val`` is the
    model's own loss there before its first step (Wortsman et al.'s l0).
    """

    config: dict[str, Any]
    model: dict[str, Any] = field(default_factory=dict)
    status: str = "completed"  # or "diverged"
    diverged_at: Optional[int] = None
    losses: list[float] = field(default_factory=list)  # train loss per step
    lrs: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    logs: list[dict[str, Any]] = field(default_factory=list)  # probes at log steps
    spikes: list[int] = field(default_factory=list)  # steps whose loss jumped (see TrainConfig)
    unigram_val: Optional[float] = None
    initial_val: Optional[float] = None  # the validation loss at initialisation, before step 1
    final: dict[str, Any] = field(default_factory=dict)  # what run(final_probe=...) measured at the end
    seconds: float = 0.0
    trained_model: Optional[nn.Module] = field(default=None, repr=False, compare=False)  # run(keep_model=True)

    @property
    def final_val_loss(self) -> float:
        """The last validation loss; nan for a diverged run (plot helpers mark it instead)."""
        return self.evals[-1][1] if self.evals and self.status != "diverged" else float("nan")

    @property
    def spiked(self) -> bool:
        return bool(self.spikes)


def steps_to(result: TrainResult, level: float) -> Optional[int]:
    """The first evaluation step at which the run's validation loss is at or below ``level`` (a run
    evaluated along the way: `TrainConfig.eval_every`), None if it never got there."""
    return next((step for step, loss in result.evals if loss <= level), None)


def plateau_exit(result: TrainResult, margin: float = 0.1, window: int = 10) -> Optional[int]:
    """The step at which the run leaves the unigram plateau: the first at which the mean of the last
    ``window`` training losses is more than ``margin`` nats below ``result.unigram_val`` (the margin
    `classify_outcome` uses at the end), None if it never does. Read from the training loss, logged
    at every step, so it needs no evaluations along the run."""
    losses = [float(x) for x in result.losses]
    if result.unigram_val is None or len(losses) < window:
        return None
    for step in range(window, len(losses) + 1):
        if sum(losses[step - window : step]) / window < result.unigram_val - margin:
            return step
    return None


class LossMonitor:
    """Watches the training loss step by step and says when a run has diverged or spiked.

    Diverged: a non-finite loss, or ``window`` losses in a row above max(ln V, the first loss):
    worse than guessing uniformly and worse than at the start, for a sustained stretch. A spike: a
    loss more than ``spike_threshold`` nats above the best 10-step mean so far.
    """

    def __init__(self, vocab_size: int, window: int = 20, spike_threshold: float = 1.0) -> None:
        self.uniform, self.window, self.spike_threshold = math.log(vocab_size), window, spike_threshold
        self.ceiling: Optional[float] = None
        self.above, self.recent, self.best_mean = 0, [], math.inf
        self.diverged = self.spiked = False

    def update(self, loss: float) -> None:
        """Take one step's loss; sets ``diverged`` (sticky) and ``spiked`` (this step only)."""
        if not math.isfinite(loss):
            self.diverged, self.spiked = True, False
            return
        self.ceiling = max(self.uniform, loss) if self.ceiling is None else self.ceiling
        self.above = self.above + 1 if loss > self.ceiling else 0
        self.diverged = self.diverged or self.above >= self.window
        self.spiked = len(self.recent) == 10 and loss > self.best_mean + self.spike_threshold
        self.recent = (self.recent + [loss])[-10:]
        if len(self.recent) == 10:
            self.best_mean = min(self.best_mean, sum(self.recent) / 10)


class RunRecorder:
    """One run's bookkeeping, the same in `normlab.train` and `normlab.batched.train_batched`: each
    step's loss before and after the update, log records and evaluations, each refused (and the run
    ended as diverged, with finite logs) when it is not finite, and the rule at the end."""

    def __init__(self, result: TrainResult, config: Any, vocab_size: int) -> None:
        self.result, self.vocab_size = result, vocab_size
        self.watch = LossMonitor(vocab_size, config.diverge_window, config.spike_threshold)
        self.active = True

    def diverge(self, step: int) -> None:
        self.result.status, self.result.diverged_at = "diverged", step
        self.active = False

    def loss(self, step: int, value: float) -> bool:
        """This step's training loss, before the update: False (the run ends) when it is not finite."""
        self.watch.update(value)
        if not math.isfinite(value):
            self.diverge(step)
            return False
        if self.watch.spiked:
            self.result.spikes.append(step)
        return True

    def stepped(self, step: int, value: float, lr: float) -> bool:
        """The update is done: keep the step's loss and rate; False when the monitor says diverged."""
        self.result.losses.append(value)
        self.result.lrs.append(lr)
        if self.watch.diverged:
            self.diverge(step)
            return False
        return True

    def log(self, step: int, record: dict[str, Any]) -> bool:
        if not _finite(record):
            self.diverge(step)
            return False
        self.result.logs.append(record)
        return True

    def evaluate(self, step: int, val: float) -> bool:
        if not math.isfinite(val):
            self.diverge(step)
            return False
        self.result.evals.append((step, val))
        return True

    def finish(self, seconds: float) -> TrainResult:
        """The run is over: apply the end-of-run rule (`divergence_ceiling`) and its wall time."""
        r = self.result
        if r.status != "diverged" and r.evals and r.evals[-1][1] > divergence_ceiling(r, self.vocab_size):
            r.status, r.diverged_at = "diverged", r.evals[-1][0]
        r.seconds = seconds
        return r


def _finite(value: Any) -> bool:
    """True when every number in ``value`` (a number, or nested lists/dicts of them) is finite."""
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all())
    if isinstance(value, float):
        return math.isfinite(value)
    return True


def divergence_ceiling(result: TrainResult, vocab_size: int = 256) -> float:
    """The validation loss above which a finished run counts as diverged: min(ln V, its own loss at
    initialisation); a run that ends worse than guessing uniformly, or worse than it started, has
    not trained, whatever its curve did on the way."""
    ceiling = math.log(vocab_size)
    return min(ceiling, result.initial_val) if result.initial_val is not None else ceiling


def classify_outcome(result: TrainResult, margin: float = 0.1) -> str:
    """What became of a run, by what the words mean:

    - ``diverged``: the loop stopped it (a non-finite value, or a training loss worse than uniform
      guessing for ``diverge_window`` steps in a row), or it finished with a validation loss above
      `divergence_ceiling`: worse than uniform guessing (ln V) or worse than its own start;
    - ``stalled``: it finished, but its validation loss is no more than ``margin`` nats below
      ``result.unigram_val``, the loss of byte frequencies alone on the same validation set (or
      above it): it learned nothing a unigram model does not know;
    - ``trained``: it finished more than ``margin`` nats below that level.

    Whether the curve spiked on the way is a separate flag, ``result.spiked``.
    """
    if result.status == "diverged" or not result.evals:
        return "diverged"
    if result.evals[-1][1] > divergence_ceiling(result, VOCAB_SIZE):
        return "diverged"  # a stored run from before the loop applied this rule itself
    if result.unigram_val is None:
        raise ValueError("this result has no unigram_val (it predates fixed validation sets); rerun it")
    return "stalled" if result.final_val_loss > result.unigram_val - margin else "trained"
