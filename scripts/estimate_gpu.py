"""Estimate each chapter's time at NORMLAB_SCALE=gpu on a Colab T4 from a stated cost model (an estimate,
not a measurement) and write it, with the model and its assumptions, to book/_data/estimate-gpu.json.

    python scripts/estimate_gpu.py                    # op counts from the table OPS below
    taskset -c 0 env OMP_NUM_THREADS=1 python scripts/estimate_gpu.py --measure-ops   # count them again

Model (assumptions, not measurements):
  GPU: T4 fp32 peak 8.1 TFLOP/s, 25% sustained on these small matmuls; 10 us per launched op. A run trained
  one by one: per step, its ops x 10 us + its FLOPs / 2.0 TFLOP/s; per log step (1 and every log_every) its
  extra ops and probe FLOPs; per evaluation (initial, every eval_every, last) a forward over 256 windows; per
  run 0.05 s + 20 ns per parameter. A batched group of K runs: a + b L + c (K - 1) ops per step, K x the FLOPs.
  Ops per step are a + b L, counted with torch.profiler on the CPU (composites split into the kernels they
  call; views, allocations, metadata not counted; a fused or _foreach_ optimizer op counts once).
  CPU: cells that train nothing run on Colab's CPU even on a GPU runtime, and a stored board's check runs
  train 5 steps in float64 there (normlab.replay.fingerprint; its other runs are read, not trained): their
  FLOPs (x2 in float64) over a rate calibrated on chapters 2 and 3 at the cpu scale (book/_data/costs-cpu.json,
  where all their work is such cells), plus 0.3 s per check run. Plus OTHER_S per chapter (kernel start,
  imports, corpus, boards, plots). Runs that diverge stop early: training times are upper bounds there.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import lzma
import warnings
from collections import namedtuple
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from normlab.reference import step_flops
from normlab.replay import BOARD_SCALE, EARLY_STEPS, EARLY_WINDOWS, board_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book/_data/estimate-gpu.json"
PEAK, SUSTAINED, T_OP = 8.1e12, 0.25, 10e-6
SETUP_S, PARAM_S, CHECK_S, EVAL_WINDOWS, VOCAB = 0.05, 20e-9, 0.3, 256, 256
OTHER_S = {"quickstart": 10, "01_post_ln": 10, "02_pre_ln": 10, "03_gradients_at_init": 10}  # 4-9: 20 s
SCENARIOS = {"15% of peak": dict(frac=0.15), "40% of peak": dict(frac=0.40), "20 us per op": dict(t_op=20e-6),
             "Colab CPU 0.6x this machine's": dict(cpu=0.6)}  # fmt: skip
# fmt: off
# Ops per step from --measure-ops (torch 2.13, d = 32, batch 4: the counts do not depend on width or batch).
# One by one: (a, b) of a + b L for a plain step, a log step's extra, one evaluation. Batched: a + b L + c (K - 1),
# the mean of pre-LN's and sandwich's fits (AdamW per parameter under vmap: about 5x a fused step's ops).
OPS = {"pre": {"step": (32, 29), "log": (40, 137), "eval": (52, 40)},
       "ch4_early_post": {"step": (30, 29), "log": (56, 175), "eval": (48, 40)},
       "ch5_deepnorm": {"step": (30, 33), "log": (45, 161), "eval": (48, 48)},
       "ch5_mech_deepnorm": {"step": (30, 33), "log": (56, 181), "eval": (48, 48)},
       "ch8_pre_l2": {"step": (40, 61), "log": (44, 132), "eval": (52, 68)},
       "batched": {"a": 83, "b": 193, "c": 6}}
# The same model's estimate at the gpu scale's earlier sizes, every sweep trained live on the T4 (before
# 12eba6c): why chapters 3 to 9 now run, or replay, the cpu sizes there.
BEFORE_LABEL = "before: this model at the gpu scale's earlier, larger sizes, every sweep trained live on the T4"
BEFORE = {"quickstart": 0.5, "01_post_ln": 0.7, "02_pre_ln": 3.3, "03_gradients_at_init": 26.5, "04_warmup": 15.5,
          "05_deepnorm": 46.8, "06_sandwich": 28.6, "07_normformer": 45.1, "08_qk_norm": 11.4, "09_leaderboard": 53.7}
# fmt: on


# A sweep's runs. how: live (one by one on the GPU), batched (one train_batched group of `runs`), check (a stored
# board's check runs: EARLY_STEPS float64 steps on the CPU), timing (bare steps on the GPU). family: its row of OPS;
# log_every, eval_every: 0 for the run's steps; d_ff: 0 for 4 d; probe_fwd: forwards per log step (a probe, the
# model update, attention tracking); final_fwd: forwards at the end (final_probe); board: the board checked.
Part = namedtuple("Part", "name runs steps d L B T how family log_every eval_every d_ff probe_fwd final_fwd board",
                  defaults=("live", "pre", 0, 0, 0, 0, 0, ""))  # fmt: skip


# fmt: off
# INVENTORY: what each chapter trains at NORMLAB_SCALE=gpu, read from the chapters at revision 12eba6c. Update it
# (and inkernel's gpu sizes) whenever a chapter's gpu sizes or sweeps change, or normlab.board.SIZES.gpu does.
C5 = dict(d=64, B=16, T=32, d_ff=128, family="ch5_deepnorm")  # all track the model update: one by one
C8 = dict(d=64, L=2, B=16, T=32, steps=300, family="ch8_pre_l2", log_every=10, probe_fwd=1)  # tracking attention
INVENTORY = {
    "quickstart": [Part("3 seeds, normlab.run", 3, 1000, 128, 6, 16, 64, eval_every=50)],
    "01_post_ln": [Part("exercise 1.2: one tiny run", 1, 160, 64, 1, 2, 16)],
    "02_pre_ln": [],  # chapters 2 and 3 train nothing: their cells are in inkernel
    "03_gradients_at_init": [],
    "04_warmup": [
        Part("warmup grid: check runs, depth 6", 4, EARLY_STEPS, 64, 6, 16, 32, "check", board="warmup-grid"),
        Part("warmup grid: check runs, depth 12", 4, EARLY_STEPS, 64, 12, 16, 32, "check"),
        Part("the first steps (probe, tracking)", 9, 100, 64, 6, 16, 32, family="ch4_early_post", log_every=2,
             eval_every=75, probe_fwd=3),
        Part("warmup rule, beta2 0.9", 3, 300, 64, 6, 16, 32, "batched", log_every=10, eval_every=75),
        Part("WSD", 12, 300, 64, 6, 16, 32, "batched", log_every=10, eval_every=75),
    ],
    "05_deepnorm": [
        Part("the first steps (ln_sigma probe), 12 blocks", 18, 40, L=12, log_every=2, probe_fwd=3,
             **C5 | dict(family="ch5_mech_deepnorm")),
        Part("depth sweep: check runs, 24 blocks", 6, EARLY_STEPS, L=24, how="check", board="deepnorm-depth", **C5),
        Part("longer warmup, 24 blocks", 6, 200, L=24, probe_fwd=2, **C5),
        Part("inits (24 run_many + 6 train), 12 blocks", 30, 200, L=12, probe_fwd=2, **C5),
        Part("two bugs, 12 blocks", 6, 200, L=12, probe_fwd=2, **C5),
        Part("two bugs, 24 blocks", 6, 200, L=24, probe_fwd=2, **C5),
        Part("GLM constants, 12 blocks", 6, 200, L=12, probe_fwd=2, **C5),
    ],
    "06_sandwich": [Part("lr sweep: check runs", 5, EARLY_STEPS, 64, 12, 16, 32, "check", board="sandwich-lrs")],
    "07_normformer": [Part("sweep: check runs", 4, EARLY_STEPS, 64, 8, 16, 32, "check", board="normformer")],
    "08_qk_norm": [  # assumes the best rate is not the high rate (else 3 runs fewer at it, 3 fewer frozen)
        Part("lr sweep: check runs", 4, EARLY_STEPS, 64, 2, 16, 32, "check", board="qk-norm-lrs"),
        Part("l2 at the best rate (final probe)", 3, final_fwd=1, **C8),
        Part("l2 frozen g (normlab.train), 2 rates", 6, **C8),
        Part("l2 kept model (normlab.run)", 1, **C8),
        Part("copy task, one block (own loop)", 6, 300, 64, 1, 16, 31, family="ch8_pre_l2"),
    ],
    "09_leaderboard": [  # board.SIZES.gpu is the cpu Benchmark; the chapter's check functions name 29 + 1 + 1 runs
        Part("board: check runs, 6 blocks", 29, EARLY_STEPS, 64, 6, 16, 32, "check", board="leaderboard"),
        Part("board: check run, 12 blocks", 1, EARLY_STEPS, 64, 12, 16, 32, "check"),
        Part("long budget: check run, 3 blocks", 1, EARLY_STEPS, 64, 3, 16, 32, "check", board="leaderboard-long"),
        Part("step timing (GPU): 14 x (3 + 5 x 20) steps", 14, 103, 64, 6, 16, 32, "timing"),
        Part("exercise 9.2", 3, 200, 64, 6, 16, 32, "batched"),
    ],
}
# fmt: on


def fwd(d: int, L: int, B: int, T: int, d_ff: int = 0) -> float:
    return step_flops(d, L, B, T, d_ff=d_ff or None) / 3


def inkernel(chapter: str, scale: str) -> dict[str, float]:
    """FLOPs of a chapter's cells that train nothing (on the CPU), at its PerScale sizes for ``scale``."""
    out: dict[str, float] = {}
    if chapter == "01_post_ln":
        d, L = {"cpu": (128, 12), "gpu": (256, 24)}[scale]
        out["trunk and norm_io forwards (float64)"] = 30 * fwd(d, L, 8, 64) * 2
    if chapter == "02_pre_ln":
        d, T, L, S = {"cpu": (128, 128, 24, 12), "gpu": (256, 128, 48, 8)}[scale]
        f = S * (7 * fwd(d, L, 8, T) + 3 * fwd(d, 2, 8, T) + fwd(d, 6, 8, T)) + 8 * fwd(d, 4 * L, 8, T)
        out["growth, final LN, exercises 2.3-2.4"] = f
    if chapter == "03_gradients_at_init":  # jac_sizes, rank_sizes and init_width_sizes keep their gpu sizes
        d, T, depths, S = {"cpu": (32, 4, (1, 6, 12, 24), 5), "gpu": (64, 4, (1, 6, 12, 24, 48), 5)}[scale]
        out["Jacobians (jacrev, float64)"] = 8 * S * sum(depths) * (24 * d * d * T + 4 * T * T * d) * (1 + T * d)
        d, L, T, S = {"cpu": (64, 24, 32, 8), "gpu": (128, 48, 64, 8)}[scale]
        out["rank collapse"] = 3 * S * fwd(d, L, 8, T)
        d, T, B, depths, S = {"cpu": (64, 64, 8, (6, 12, 24), 32), "gpu": (64, 64, 8, (6, 12, 24), 32)}[scale]
        out["gradient profiles"] = 3 * S * sum(4 * fwd(d, L, B, T) for L in depths)
        out["init comparison, 12 blocks"] = 4 * 16 * 4 * fwd(d, 12, B, T)
        widths, S = {"cpu": ((32, 64, 128, 256, 512), 12), "gpu": ((32, 64, 128, 256, 512), 12)}[scale]
        out["width sweep, 6 blocks"] = S * sum(4 * fwd(w, 6, B, T) for w in widths)
        widths, S = {"cpu": ((32, 64, 128), 8), "gpu": ((32, 64, 128, 256), 16)}[scale]
        out["init x width, 12 blocks"] = 2 * S * sum(4 * fwd(w, 12, 8, 32) for w in widths)
    if chapter == "06_sandwich":
        d, L, T, S = {"cpu": (64, 24, 32, 8), "gpu": (64, 24, 32, 8)}[scale]
        out["at init: 7 rows x seeds"] = 7 * S * 6 * fwd(d, L, 8, T)
    if chapter == "07_normformer":
        d, L, T, B, S = {"cpu": (64, 8, 32, 16, 8), "gpu": (64, 8, 32, 16, 8)}[scale]
        out["init gradients, step timing on the CPU"] = (5 * S + 3 * (3 + 21 * 3)) * 3 * fwd(d, L, B, T)
    if chapter == "08_qk_norm":
        d, L, T, S = {"cpu": (64, 2, 32, 3), "gpu": (64, 2, 32, 3)}[scale]
        out["initial losses, 256 windows"] = 2 * S * fwd(d, L, 256, T)
    return out


def seconds(p: Part, r_gpu: float, t_op: float, r_cpu: float) -> float:
    """Estimated seconds of a part under these rates (the module docstring's model)."""
    fs, d_ff = step_flops(p.d, p.L, p.B, p.T, d_ff=p.d_ff or None), p.d_ff or 4 * p.d
    ops = {what: a + b * p.L for what, (a, b) in OPS[p.family].items()}
    if p.how == "check":  # float64 on the CPU: twice the float32 FLOP time
        return p.runs * (2 * (EARLY_STEPS * fs + fwd(p.d, p.L, EARLY_WINDOWS, p.T, p.d_ff)) / r_cpu + CHECK_S)
    if p.how == "timing":  # make_train_step: no float(loss) per step, so 3 ops fewer
        return p.runs * p.steps * ((ops["step"] - 3) * t_op + fs / r_gpu)
    log_every, eval_every = p.log_every or p.steps, p.eval_every or p.steps
    logs = len({1, *range(log_every, p.steps + 1, log_every)})
    evals = 1 + len({*range(eval_every, p.steps + 1, eval_every), p.steps})
    k = p.runs if p.how == "batched" else 1  # runs sharing each launch
    if p.how == "batched":
        ops["step"] = OPS["batched"]["a"] + OPS["batched"]["b"] * p.L + OPS["batched"]["c"] * (k - 1)
    setup = SETUP_S + PARAM_S * (p.L * (4 * p.d**2 + 2 * p.d * d_ff) + 2 * p.d * VOCAB)
    one = (p.steps * (ops["step"] * t_op + k * fs / r_gpu)
           + logs * (ops["log"] * t_op + p.probe_fwd * fwd(p.d, p.L, p.B, p.T, p.d_ff) / r_gpu)
           + evals * (ops["eval"] * t_op + k * fwd(p.d, p.L, EVAL_WINDOWS, p.T, p.d_ff) / r_gpu)
           + p.final_fwd * fwd(p.d, p.L, p.B, p.T, p.d_ff) / r_gpu + k * setup)  # fmt: skip
    return one if p.how == "batched" else p.runs * one


def board_runs(name: str) -> int:
    """Runs held by a stored board (every round of it) at the gpu scale's board scale."""
    scale = BOARD_SCALE["gpu"]
    folder = board_path(name, scale).parent
    paths = list(folder.glob(f"{name}-{scale}.json.xz")) or list(folder.glob(f"{name}-[0-9]-{scale}.json.xz"))
    return sum(len(json.loads(lzma.open(p).read())["results"]) for p in paths)


def chapter_seconds(chapter: str, r_gpu: float, t_op: float, r_cpu: float) -> dict[str, float]:
    parts = {f"{p.how}: {p.name}": seconds(p, r_gpu, t_op, r_cpu) for p in INVENTORY[chapter]}
    parts.update({f"CPU cells: {k}": v / r_cpu for k, v in inkernel(chapter, "gpu").items()})
    return {**parts, "other: kernel start, imports, corpus, boards, plots": float(OTHER_S.get(chapter, 20))}


# fmt: off
# Views, allocations and metadata launch no kernel (nor dropout at p = 0), as in the profiler count behind OPS.
VIEWLIKE = set("""view reshape _reshape_alias as_strided empty empty_strided empty_like t transpose permute expand
    expand_as unsqueeze squeeze select slice detach detach_ alias _unsafe_view unbind split split_with_sizes chunk
    narrow resolve_conj resolve_neg lift_fresh numpy_T flatten unflatten view_as contiguous to _to_copy_noop
    result_type set_ resize_ _has_compatible_shallow_copy_type is_nonzero size stride movedim moveaxis diagonal
    _nested_tensor_from_mask_left_aligned _local_scalar_dense_noop _conj real imag squeeze_ unsqueeze_ as_strided_
    _unsafe_split unfold zeros_like_noop requires_grad_ retain_grad is_same_size sym_size sym_stride sym_numel
    _shape_as_tensor dropout""".split())
# fmt: on


def measure_ops() -> dict:
    """OPS counted again with torch.profiler on the CPU: per-step differences of whole normlab.train
    (train_batched) calls, so a step's count holds all the loop launches per step and nothing it does once."""
    import torch
    from torch.autograd.profiler_util import FunctionEvent
    from torch.profiler import ProfilerActivity, profile

    import normlab
    from normlab.batched import train_batched
    from normlab.training import TrainConfig, initial_model, train

    torch.set_num_threads(1)
    corpus, cpu, cia = normlab.load_corpus(), torch.device("cpu"), torch._C.DispatchKey.CompositeImplicitAutograd
    [corpus.eval_set(64, n) for n in (256, 8)]  # cached once per process: keep that out of a run's count

    @functools.cache
    def composite(name: str) -> bool:  # decomposes into other aten ops (linear -> t + addmm): they are the kernels
        op, found = getattr(torch.ops.aten, name[6:], None), False
        for o in op.overloads() if op else ():
            with contextlib.suppress(RuntimeError):  # an overload not registered by its name (index.Tensor_hacked_twin)
                found = found or ("out" not in o and getattr(op, o).has_kernel_for_dispatch_key(cia))
        return found

    def kernels(e: FunctionEvent) -> int:
        if e.name.startswith(("aten::_foreach_", "aten::_fused_adam")):  # one multi-tensor kernel on CUDA
            return 1
        kids = [c for c in e.cpu_children if c.name.startswith("aten::")]
        return sum(map(kernels, kids)) if kids and composite(e.name) else int(e.name[6:] not in VIEWLIKE)

    def count(fn: Callable[[], object]) -> int:  # over the aten ops that no aten op called
        top = lambda e: e is None or (not e.name.startswith("aten::") and top(e.cpu_parent))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return sum(kernels(e) for e in prof.events() if e.name.startswith("aten::") and top(e.cpu_parent))

    base, mk = TrainConfig(batch_size=4, seq_len=64, log_every=10**4, eval_every=10**4), dict(d_model=32, n_heads=4)
    ch5, track = dict(mk, norm="deepnorm", n_heads=2, d_ff=64), dict(track_model_update=True)
    ch8 = dict(betas=(0.9, 0.95), clip=1.0, weight_decay=1e-4, weight_decay_mode="independent", track_attention=True)
    probe = lambda m, x, y: {"ln_sigma": float(sum(normlab.norm_input_scale(m, x).values()))}  # chapters 4, 5
    families = {"pre": (dict(mk, norm="pre"), {}, None), "ch4_early_post": (dict(mk, norm="post"), track, probe),
                "ch5_deepnorm": (ch5, track, None), "ch5_mech_deepnorm": (ch5, track, probe),
                "ch8_pre_l2": (dict(mk, norm="pre", qk_norm="l2", bias=False, eps=1e-6), ch8, None)}  # fmt: skip
    fit = lambda v: (v[2] - 2 * (v[4] - v[2]) / 2, (v[4] - v[2]) / 2)  # a + b L through L = 2 and 4

    def train_ops(model: dict, over: dict, probe: Optional[Callable], L: int, **kw: object) -> int:
        config = replace(base, **over, **kw)
        m = initial_model(dict(model, n_layers=L, init="xavier", max_seq_len=64), config, corpus)
        return count(lambda: train(m, corpus, config, device=cpu, probe=probe))

    out: dict = {}
    for name, f in families.items():
        got = {L: [train_ops(*f, L, steps=s, **kw) for s, kw in ((2, {}), (3, {}), (3, {"log_every": 1}),
                                                                 (3, {"eval_every": 1}))] for L in (2, 4)}  # fmt: skip
        out[name] = {"step": fit({L: g[1] - g[0] for L, g in got.items()}),
                     "log": fit({L: (g[2] - g[1]) / 2 for L, g in got.items()}),
                     "eval": fit({L: (g[3] - g[1]) / 2 for L, g in got.items()})}  # fmt: skip

    def batched(norm: str, L: int, k: int) -> int:
        model = dict(mk, norm=norm, n_layers=L, init="xavier", max_seq_len=64)
        runs = lambda n: [replace(base, steps=n, eval_windows=8, seed=s, lr=base.lr * (1 + s / 10)) for s in range(k)]
        return count(lambda: train_batched(model, runs(3), corpus=corpus, device=cpu)) - count(
            lambda: train_batched(model, runs(2), corpus=corpus, device=cpu))  # fmt: skip

    pre, sandwich = (fit({L: batched(n, L, 1) for L in (2, 4)}) for n in ("pre", "sandwich"))
    c = (batched("pre", 2, 16) - batched("pre", 2, 1)) / 15  # each extra run: its host-side batch draw
    out["batched"] = dict(a=(pre[0] + sandwich[0]) / 2, b=(pre[1] + sandwich[1]) / 2, c=round(c, 2))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--measure-ops", action="store_true", help="count ops with torch.profiler instead of OPS")
    measured = ap.parse_args().measure_ops
    if measured:  # replace the table, and print the new one to paste into OPS
        OPS.update(measure_ops())
        print("OPS =", json.dumps(OPS))
    costs = json.loads((ROOT / "book/_data/costs-cpu.json").read_text())["seconds"]
    calibration = {c: sum(inkernel(c, "cpu").values()) / (costs[f"book/{c}"] - OTHER_S[c])
                   for c in ("02_pre_ln", "03_gradients_at_init")}  # fmt: skip
    base = dict(r_gpu=PEAK * SUSTAINED, t_op=T_OP, r_cpu=min(calibration.values()))  # Colab's CPU: no faster
    chapters = {}
    for c, inventory in INVENTORY.items():
        parts = chapter_seconds(c, **base)
        total, (dom, dom_s) = sum(parts.values()), max(parts.items(), key=lambda kv: kv[1])
        boards = sorted({p.board for p in inventory if p.board})
        sens = {label: round(sum(chapter_seconds(c, PEAK * s.get("frac", SUSTAINED), s.get("t_op", T_OP),
                                                 base["r_cpu"] * s.get("cpu", 1.0)).values()) / 60, 1)
                for label, s in SCENARIOS.items()}  # fmt: skip
        chapters[c] = dict(
            estimated_min=round(total / 60, 1), over_10_min=total > 600,
            dominant=dict(part=dom, min=round(dom_s / 60, 1), share=round(dom_s / total, 2)),
            runs_live=sum(p.runs for p in inventory if p.how in ("live", "batched")),
            runs_replayed=sum(board_runs(b) for b in boards),
            check_runs=sum(p.runs for p in inventory if p.how == "check"),
            boards=[f"{b}-{BOARD_SCALE['gpu']}" for b in boards], sensitivity_min=sens,
            before=dict(estimated_min=BEFORE[c], label=BEFORE_LABEL),
            parts_s={k: round(v, 1) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])},
            inventory=[{k: v for k, v in p._asdict().items() if v or k in ("runs", "steps")} for p in inventory],
        )  # fmt: skip
    out = dict(
        label="ESTIMATE, not a measurement: each chapter's time at NORMLAB_SCALE=gpu on a Colab T4, by a cost model",
        made_by="scripts/estimate_gpu.py", inventory_revision="12eba6c",
        model=(__doc__ or "").split("Model (assumptions, not measurements):")[1].strip(),
        assumptions=dict(
            t4_fp32_peak_flops=PEAK, sustained_fraction=SUSTAINED, seconds_per_op=T_OP, check_run_s=CHECK_S,
            per_run_setup_s=f"{SETUP_S} + {PARAM_S} x parameters", other_s={**OTHER_S, "chapters 4-9": 20},
            cpu_flops_per_s=round(base["r_cpu"]), cpu_calibration={k: round(v) for k, v in calibration.items()},
            op_counts=OPS, op_counts_source="measured by --measure-ops" if measured else "the table OPS in the script"),
        total_min=round(sum(ch["estimated_min"] for ch in chapters.values()), 1),
        largest=max(chapters, key=lambda c: chapters[c]["estimated_min"]),
        all_at_or_under_10_min=not any(ch["over_10_min"] for ch in chapters.values()), chapters=chapters,
    )  # fmt: skip
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{'chapter':22s} {'before':>6s} {'now':>5s} {'live':>4s} {'board':>5s}  dominant")
    for c, ch in chapters.items():
        print(f"{c:22s} {ch['before']['estimated_min']:6.1f} {ch['estimated_min']:5.1f} {ch['runs_live']:4d} "
              f"{ch['runs_replayed']:5d}  {ch['dominant']['part']} ({ch['dominant']['min']} min)")  # fmt: skip
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # train_batched's SDPA fallback on the CPU (--measure-ops)
    main()
