"""The leaderboard's benchmark (chapter 9): the contestants, the recipe at each scale, and the rounds
of runs that choose each contestant's learning rate on one set of seeds and report it on fresh ones.

A benchmark is data (`Benchmark`); a round is a `Plan`, a list of cells (contestant, depth, peak rate,
warmup arm) each trained on a set of seeds. Round 1 is the rate grid at the sweep depth on the
selection seeds; round 2 what round 1 chose: the report runs at the sweep depth on fresh seeds, and
the depth ladder's local rate grids on the selection seeds; round 3 widens a rung's window by the next
grid rate where its choice sits on the window's edge (downwards where nothing in it trained); round 4
reports the ladder's chosen rates on the report seeds. Where the veto of `best_rate` moved a choice,
the lowest median's rate is reported too. `LONG` is the same protocol at ten times the steps, one
stored result at every scale. The stored boards are replayed by `normlab.board_replay`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Sequence

from . import checks
from .record import TrainResult, classify_outcome
from .scale import PerScale, seeds
from .stats import median_loss
from .training import TrainConfig

__all__ = ["CONTESTANTS", "ARMS", "Cell", "Benchmark", "Plan", "SIZES", "LONG", "LONG_CONTESTANTS", "best_rate",
           "trained_rates", "veto_moved", "local_window", "rung_rates", "rung_failed", "round1", "round2",
           "round3", "round4", "rounds", "Runs"]  # fmt: skip

# Every contestant is data: the model kwargs that build it, on top of the shared ones.
CONTESTANTS: dict[str, dict[str, Any]] = {
    "post": dict(norm="post"),
    "deepnorm": dict(norm="deepnorm"),  # with init="xavier": the paper's init (beta gains)
    "admin": dict(norm="admin"),  # omega profiled on the run's first batch by normlab.run
    "mixln": dict(norm="mixln"),  # post-LN in the first quarter of the blocks, pre-LN after
    "pre": dict(norm="pre"),
    "pre + QK-norm": dict(norm="pre", qk_norm=True),  # per-head LayerNorm on q and k
    "pre (RMSNorm)": dict(norm="pre", norm_kind="rms"),  # every norm an RMSNorm
    "pre (DyT)": dict(norm="pre", norm_kind="dyt"),  # every norm a DyT
    "lnscaled": dict(norm="lnscaled"),  # LayerNorm Scaling: block l's input norms times 1/sqrt(l)
    "normformer": dict(norm="normformer"),
    "sandwich": dict(norm="sandwich"),
    "reordered": dict(norm="reordered"),
    "reordered + QK-norm": dict(norm="reordered", qk_norm=True),
    "rezero": dict(norm="rezero"),  # no norm; x + a F(x), a = 0 at init
}  # fmt: skip
# The two settings of the schedule: the share of the run spent warming up linearly to the peak rate.
# "no warmup" is the stress test chapters 4 to 6 found the placements to differ most in; "warmup"
# (a tenth of the run) is the recipe of every paper cited.
ARMS: dict[str, float] = {"no warmup": 0.0, "warmup": 0.1}


class Cell(NamedTuple):
    """One recipe of the board: a contestant at a depth, a peak learning rate and a warmup arm."""

    name: str
    n_layers: int
    lr: float
    arm: str


@dataclass(frozen=True)
class Benchmark:
    """The recipe at one scale. ``depth`` is the sweep depth, ``lrs`` the rate grid there, ``ladder``
    the depths (with ``depth`` among them) tuned in ``ladder_arm`` on ``ladder_width`` grid rates
    around the contestant's best rate at ``depth``; ``n_select`` seeds choose every rate and
    ``n_report`` further seeds report it. Report runs are evaluated ``evals_along`` times along the
    run; all others at the end only."""

    d_model: int
    seq: int
    batch: int
    steps: int
    depth: int
    lrs: tuple[float, ...]
    ladder: tuple[int, ...]
    n_select: int
    n_report: int
    arms: tuple[str, ...] = tuple(ARMS)
    ladder_arm: str = "warmup"
    ladder_width: int = 3
    evals_along: int = 10
    n_heads: int = 4
    seed_base: Optional[int] = None  # None: NORMLAB_SEED_BASE, as every chapter's seeds
    contestants: tuple[str, ...] = field(default=tuple(CONTESTANTS))

    def __post_init__(self) -> None:
        for name in ("d_model", "seq", "batch", "steps", "depth", "n_select", "n_report", "ladder_width",
                     "evals_along", "n_heads"):  # fmt: skip
            checks.integer(name, getattr(self, name))
        if list(self.lrs) != sorted(set(self.lrs)) or not self.lrs or min(self.lrs) <= 0:
            raise ValueError(f"lrs must be positive, distinct and increasing, got {self.lrs}")
        if self.depth not in self.ladder or list(self.ladder) != sorted(set(self.ladder)):
            raise ValueError(f"ladder must be increasing depths that include depth={self.depth}, got {self.ladder}")
        for arm in (*self.arms, self.ladder_arm):
            checks.choice("arm", arm, tuple(ARMS))
        for name in self.contestants:
            checks.choice("contestant", name, tuple(CONTESTANTS))
        if self.ladder_width > len(self.lrs):
            raise ValueError(f"ladder_width ({self.ladder_width}) cannot exceed the grid's {len(self.lrs)} rates")
        if self.steps % self.evals_along:
            raise ValueError(f"steps ({self.steps}) must be a multiple of evals_along ({self.evals_along})")

    @property
    def select_seeds(self) -> tuple[int, ...]:
        """The seeds every rate is chosen on (shifted by NORMLAB_SEED_BASE, as every seed)."""
        return self._seeds()[: self.n_select]

    @property
    def report_seeds(self) -> tuple[int, ...]:
        """Fresh seeds, never used to choose a rate: every reported number comes from these."""
        return self._seeds()[self.n_select :]

    def _seeds(self) -> tuple[int, ...]:
        n = self.n_select + self.n_report
        return tuple(seeds(n) if self.seed_base is None else range(self.seed_base, self.seed_base + n))

    def model_kwargs(self, name: str, n_layers: int) -> dict[str, Any]:
        """The model of contestant ``name`` with ``n_layers`` blocks: Xavier init for all."""
        checks.choice("contestant", name, tuple(CONTESTANTS))
        return dict(d_model=self.d_model, n_heads=self.n_heads, n_layers=n_layers, init="xavier",
                    max_seq_len=self.seq, **CONTESTANTS[name])  # fmt: skip

    def config(self, lr: float, seed: int, arm: str, along: bool = False) -> TrainConfig:
        """AdamW (0.9, 0.98), no weight decay, no clipping, cosine schedule with the arm's warmup;
        evaluated at the end, or ``evals_along`` times along the run when ``along``."""
        checks.choice("arm", arm, tuple(ARMS))
        every = self.steps // self.evals_along if along else self.steps
        return TrainConfig(steps=self.steps, batch_size=self.batch, seq_len=self.seq, lr=lr,
                           warmup=round(ARMS[arm] * self.steps), seed=seed, eval_every=every,
                           log_every=self.steps)  # fmt: skip

    def local_rates(self, best: float) -> tuple[float, ...]:
        """``ladder_width`` rates of the grid centred on ``best`` (shifted inwards at the grid's ends)."""
        i = self.lrs.index(best)
        start = min(max(i - self.ladder_width // 2, 0), len(self.lrs) - self.ladder_width)
        return self.lrs[start : start + self.ladder_width]


@dataclass(frozen=True)
class Plan:
    """A round: each cell trained on its seeds, flagged ``along`` for evaluations along the run.
    ``entries`` are (cell, seeds, along); `jobs` expands them in order, `collect` groups results back."""

    benchmark: Benchmark
    entries: tuple[tuple[Cell, tuple[int, ...], bool], ...]

    def jobs(self) -> list[tuple[dict[str, Any], TrainConfig]]:
        bm = self.benchmark
        return [(bm.model_kwargs(c.name, c.n_layers), bm.config(c.lr, s, c.arm, along))
                for c, ss, along in self.entries for s in ss]  # fmt: skip

    def collect(self, results: Sequence[TrainResult]) -> dict[tuple[Cell, str], list[TrainResult]]:
        """Results by (cell, "select" or "report"), in seed order."""
        n = sum(len(ss) for _, ss, _ in self.entries)
        if len(results) != n:
            raise ValueError(f"the plan has {n} runs, got {len(results)} results")
        out, i = {}, 0
        for cell, ss, _ in self.entries:
            which = "select" if ss == self.benchmark.select_seeds else "report"
            out[cell, which] = list(results[i : i + len(ss)])
            i += len(ss)
        return out

    def index(self, cell: Cell, which: str) -> int:
        """The position in `jobs` of the first seed's run of ``cell`` on seed set ``which``."""
        i = 0
        for c, ss, _ in self.entries:
            if c == cell and (ss == self.benchmark.select_seeds) == (which == "select"):
                return i
            i += len(ss)
        raise KeyError(f"{cell} on the {which} seeds is not in this plan")


Runs = dict[tuple[Cell, str], list[TrainResult]]


def trained_rates(runs: Runs, name: str, n_layers: int, arm: str, rates: Sequence[float]) -> list[float]:
    """The rates of ``rates`` at which every selection seed trained (`classify_outcome`)."""

    def trained(lr: float) -> bool:
        return all(classify_outcome(r) == "trained" for r in runs[Cell(name, n_layers, lr, arm), "select"])

    return [lr for lr in rates if trained(lr)]


def best_rate(runs: Runs, name: str, n_layers: int, arm: str, rates: Sequence[float], veto: bool = True) -> float:
    """The rate with the lowest median final loss over the selection seeds, among the rates at which
    every selection seed trained (among all of ``rates`` when none did, or with ``veto=False``: a
    diverged run counts as worse than any finished one); ties go to the lower rate. Without the veto a
    median over two or three seeds can choose a rate where one of them stalls, and the fresh seeds
    then stall there too."""
    candidates = (trained_rates(runs, name, n_layers, arm, rates) if veto else []) or list(rates)
    medians = {lr: median_loss([r.final_val_loss for r in runs[Cell(name, n_layers, lr, arm), "select"]])
               for lr in candidates}  # fmt: skip
    return min(candidates, key=lambda lr: (medians[lr], lr))


def veto_moved(runs: Runs, name: str, n_layers: int, arm: str, rates: Sequence[float]) -> Optional[float]:
    """The rate with the lowest median where the veto of `best_rate` passed it over (a selection seed
    did not train there), else None. Its report runs are trained too, so the fresh seeds say what the
    veto cost or saved."""
    low = best_rate(runs, name, n_layers, arm, rates, veto=False)
    return None if low == best_rate(runs, name, n_layers, arm, rates) else low


def _reported(bm: Benchmark, runs: Runs, name: str, n: int, arm: str, rates: Sequence[float]) -> list:
    """The report entries of one choice: the chosen rate, and the lowest median's where the veto moved it."""
    chosen, low = best_rate(runs, name, n, arm, rates), best_rate(runs, name, n, arm, rates, veto=False)
    return [(Cell(name, n, lr, arm), bm.report_seeds, True) for lr in dict.fromkeys((chosen, low))]


def round1(bm: Benchmark) -> Plan:
    """The rate grid at the sweep depth, in every arm, on the selection seeds."""
    return Plan(bm, tuple((Cell(name, bm.depth, lr, arm), bm.select_seeds, False)
                          for name in bm.contestants for arm in bm.arms for lr in bm.lrs))  # fmt: skip


def _rungs(bm: Benchmark) -> tuple[int, ...]:
    return tuple(n for n in bm.ladder if n != bm.depth)


def round2(bm: Benchmark, runs1: Runs) -> Plan:
    """What round 1 chose: each contestant at its best rate at the sweep depth in every arm, on the
    report seeds (evaluated along the run; also at the lowest median where the veto moved it), and the
    ladder's other rungs on local grids around the best rate of the ladder's arm, on the selection
    seeds."""
    entries = []
    for name in bm.contestants:
        for arm in bm.arms:
            entries += _reported(bm, runs1, name, bm.depth, arm, bm.lrs)
        entries += [(Cell(name, n, lr, bm.ladder_arm), bm.select_seeds, False)
                    for n in _rungs(bm) for lr in local_window(bm, runs1, name)]  # fmt: skip
    return Plan(bm, tuple(entries))


def local_window(bm: Benchmark, runs: Runs, name: str) -> tuple[float, ...]:
    """The ladder's local grid of ``name``: `Benchmark.local_rates` around the rate chosen at the sweep
    depth in the ladder's arm (``runs`` holds round 1)."""
    return bm.local_rates(best_rate(runs, name, bm.depth, bm.ladder_arm, bm.lrs))


def _widen(bm: Benchmark, runs2: Runs, name: str, n: int, local: Sequence[float]) -> tuple[float, ...]:
    """The grid rates added to rung ``n``'s window: the next one beyond the edge its choice sits on;
    where no rate of the window trained on every selection seed, only the next one below (a stall is
    not cured by a higher rate, and the choice among stalled rates is noise)."""
    best, arm = best_rate(runs2, name, n, bm.ladder_arm, local), bm.ladder_arm
    lo, hi = bm.lrs.index(local[0]), bm.lrs.index(local[-1])
    stalled = not trained_rates(runs2, name, n, arm, local)
    below = best == local[0] or stalled
    above = best == local[-1] and not stalled
    return bm.lrs[lo - 1 : lo] * (below and lo > 0) + bm.lrs[hi + 1 : hi + 2] * above


def rung_rates(bm: Benchmark, runs: Runs, name: str, n: int) -> tuple[float, ...]:
    """Every rate tried at rung ``n`` of ``name``'s ladder (the local window and its widening), in
    increasing order; ``runs`` holds rounds 1 to 3 (or more)."""
    local = local_window(bm, runs, name)
    return tuple(lr for lr in bm.lrs if lr in local or (Cell(name, n, lr, bm.ladder_arm), "select") in runs)


def rung_failed(bm: Benchmark, runs: Runs, name: str, n: int) -> bool:
    """Whether no selection run at any rate tried at rung ``n`` (the sweep depth: the whole grid)
    trained: every one stalled or diverged. The rung's choice is then the least bad failure, and its
    loss says nothing about what depth does to the placement once it trains."""
    rates = bm.lrs if n == bm.depth else rung_rates(bm, runs, name, n)
    return not any(classify_outcome(r) == "trained" for lr in rates
                   for r in runs[Cell(name, n, lr, bm.ladder_arm), "select"])  # fmt: skip


def round3(bm: Benchmark, runs1: Runs, runs2: Runs) -> Plan:
    """Each rung's window widened (`_widen`) by the next grid rate, on the selection seeds."""
    entries = []
    for name in bm.contestants:
        local = local_window(bm, runs1, name)
        for n in _rungs(bm):
            entries += [(Cell(name, n, lr, bm.ladder_arm), bm.select_seeds, False)
                        for lr in _widen(bm, runs2, name, n, local)]  # fmt: skip
    return Plan(bm, tuple(entries))


def round4(bm: Benchmark, runs1: Runs, runs2: Runs, runs3: Runs) -> Plan:
    """The ladder's chosen rates on the report seeds, and the lowest medians where the veto moved a
    choice (the sweep depth's report runs are round 2's)."""
    runs = {**runs1, **runs2, **runs3}
    entries = []
    for name in bm.contestants:
        for n in _rungs(bm):
            entries += _reported(bm, runs, name, n, bm.ladder_arm, rung_rates(bm, runs, name, n))
    return Plan(bm, tuple(entries))


def rounds(bm: Benchmark) -> list[Callable[[list[Runs]], Plan]]:
    """The rounds of ``bm`` as functions of the runs of the rounds before them (a round may be empty)."""
    return [lambda _: round1(bm), lambda r: round2(bm, r[0]), lambda r: round3(bm, r[0], r[1]),
            lambda r: round4(bm, r[0], r[1], r[2])]  # fmt: skip


# Each grid reaches one rate below the lowest that a contestant chose on the grid before it (post-LN,
# DeepNorm and Admin chose 3e-3 at ci and 1e-3 at cpu, the bottom), so no choice sits on its floor.
# The gpu scale shows the cpu board: a board of its own at d = 128 was estimated at about 54 minutes on a
# Colab T4 (the costs page), against the 10 a reader there should wait.
_CPU = Benchmark(d_model=64, seq=32, batch=16, steps=200, depth=6, lrs=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
                 ladder=(3, 6, 12), n_select=3, n_report=5)  # fmt: skip
SIZES = PerScale(
    ci=Benchmark(d_model=32, seq=32, batch=16, steps=100, depth=4, lrs=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1),
                 ladder=(2, 4, 8), n_select=2, n_report=5),
    cpu=_CPU,
    gpu=_CPU,
)  # fmt: skip
# The long budget: the cpu recipe for ten times the steps (about 1M tokens, 3 per parameter), in the
# papers' arm only, on a coarser grid, with a ladder of two rungs (is the deeper stack better once the
# runs get past byte statistics?). Stored once and checked at every scale: it is what takes the runs
# below the trigram level, where attention has to do a Transformer's job. Its seeds are fixed (seed
# base 0): a result computed once is not retrained under another seed base. Its contestants are the
# ones whose claims are about what a Transformer does with context (the trunk norms with warmup,
# pre-LN and QK-norm, the branch-output norms, ReZero): eight of the fourteen, about 50 minutes of a
# 2-core machine where all fourteen took 90. The grid reaches 3e-2 because on (1e-3, 3e-3, 1e-2) five of
# the eight chose its top rate, where a higher one might have done better. Five report seeds, as the
# short boards: with three, the gaps of QK-norm and DeepNorm to pre-LN were not resolved.
LONG_CONTESTANTS = ("post", "deepnorm", "pre", "pre + QK-norm", "sandwich", "reordered", "reordered + QK-norm",
                    "rezero")  # fmt: skip
LONG = Benchmark(d_model=64, seq=32, batch=16, steps=2000, depth=6, lrs=(1e-3, 3e-3, 1e-2, 3e-2), ladder=(3, 6),
                 n_select=2, n_report=5, arms=("warmup",), seed_base=0, contestants=LONG_CONTESTANTS)  # fmt: skip
