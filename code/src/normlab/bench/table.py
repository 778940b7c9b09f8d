"""The benchmark's result as Markdown tables (the README's and the costs page's)."""

from __future__ import annotations

import statistics
from typing import Any, Optional

from .steps import COST_SHAPE


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def _cost_ceiling(result: dict[str, Any]) -> float:
    return next(c["flops_per_s"] for c in result["matmul_ceiling"] if c["with"] == "cost")


def format_table(result: dict[str, Any]) -> str:
    """The result of `run_benchmark` as Markdown: a provenance line, then one table per measurement."""
    p = result["provenance"]
    env = ", ".join(f"{k}={v if v is not None else 'unset'}" for k, v in p["env"].items())
    lines = [
        f"{result['device']}; torch {p['torch']}, Python {p['python']}; {env}; "
        f"torch threads {', '.join(str(n) for n in p['threads_used'] if n) or 'n/a'}; "
        f"medians of {result['repeats']} interleaved repeats; normlab {p['normlab']} ({p['revision']}).",
        "",
        "| size (d, blocks, B x T) | threads | normlab tok/s | torch tok/s | model ratio | model ratio, fused AdamW "
        "| fused AdamW gain: normlab | fused AdamW gain: torch | % of matmul | matmul GFLOP/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["steps"]:
        m = r["models"]
        lines.append(
            f"| {r['size']} ({r['d_model']}, {r['n_layers']}, {r['batch']} x {r['seq']}) | {r['threads'] or 'n/a'} "
            f"| {m['normlab']['tokens_per_s']:,.0f} | {m['torch']['tokens_per_s']:,.0f} | {r['ratio']:.2f} "
            f"| {r['ratio_fused']:.2f} | {r['fused_gain']['normlab']:.2f} | {r['fused_gain']['torch']:.2f} "
            f"| {100 * m['normlab']['fraction_of_matmul']:.0f}% | {r['matmul_flops_per_s'] / 1e9:,.0f} |"
        )
    lines += [
        "",
        "Ratios of tokens/s. Model ratio: normlab over the PyTorch stack, both stepped with plain "
        "`torch.optim.AdamW`, so only the models differ; with fused AdamW: both with AdamW fused into one "
        "kernel (`make_adamw`, as `train` steps), again the same optimizer on both sides. Fused AdamW gain: "
        "each model's step with fused AdamW over the same model with plain AdamW, the optimizer's share, "
        "which any torch user gets by passing `fused=True`. % of matmul: normlab's step (plain AdamW), its "
        "analytic FLOPs per second (`step_flops`) over a large square float32 matmul's, same run, same threads.",
        "",
        f"Cost against size: normlab pre-LN, {COST_SHAPE['n_heads']} heads, batch {COST_SHAPE['batch']} x seq "
        f"{COST_SHAPE['seq']}, one training step; matmul ceiling {_cost_ceiling(result) / 1e9:,.1f} GFLOP/s.",
        "",
        "| cost: d | layers | threads | ms/step | tok/s | MFLOP/step | % of matmul |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["cost"]:
        lines.append(
            f"| {r['d_model']} | {r['n_layers']} | {r['threads'] or 'n/a'} | {1000 * r['median_s']:.2f} "
            f"| {r['tokens_per_s']:,.0f} | {r['flops_per_step'] / 1e6:,.1f} | {100 * r['fraction_of_matmul']:.1f} |"
        )
    s = result["sweep"]
    lines.append("")
    if "skipped" in s:
        lines.append(f"Sweep: skipped ({s['skipped']}).")
    else:
        lines += [
            "| sweep: workers | runs x steps | seconds | runs/s | speed-up | losses identical |",
            "|---:|---|---:|---:|---:|---|",
        ]
        for w in ("1", "2"):
            med = statistics.median(s["seconds"][w])
            speedup = f"{s['speedup']:.2f}" if w == "2" else "1"
            lines.append(
                f"| {w} | {s['runs']} x {s['steps']} | {med:.2f} | {s['runs_per_s'][w]:.2f} | {speedup} "
                f"| {'yes' if s['losses_identical'] else 'no (max diff ' + _fmt(s['max_abs_loss_diff']) + ')'} |"
            )
    b = result["batched"]
    if b.get("k"):
        lines += [
            "",
            f"| batched: K | seconds | runs/s | sequential s (extrapolated from {len(b['sequential_seconds'])} runs) "
            "| speed-up |",
            "|---:|---:|---:|---:|---:|",
        ]
        for k, r in b["k"].items():
            lines.append(
                f"| {k} | {r['seconds']:.2f} | {r['runs_per_s']:.2f} | {r['sequential_extrapolated_s']:.1f} "
                f"| {r['speedup']:.1f} |"
            )
    if b.get("error"):
        lines.append(f"\nBatched training failed: {b['error']}")
    mem = result["memory"]
    rss = mem["process_peak_rss_mib"]
    lines += ["", f"Peak memory: process peak RSS {_fmt(rss['self'], '.0f')} MiB (the whole process, all sizes), "
              f"largest sweep worker {_fmt(rss['children'], '.0f')} MiB."]  # fmt: skip
    for size, peaks in mem.get("cuda_peak_mib", {}).items():
        lines.append(
            f"CUDA peak allocated, size {size}: " + ", ".join(f"{k} {v:,.1f} MiB" for k, v in (peaks or {}).items())
        )
    return "\n".join(lines)
