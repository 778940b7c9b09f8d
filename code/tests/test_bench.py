"""normlab.bench: the FLOP count against a hand count, the argument checks, and one quick run as a smoke
test (its numbers are checked for shape and sanity, never for speed)."""

import json
import math
import time

import pytest
import torch

from normlab import TransformerLM, bench


def test_step_flops_matches_a_hand_count():
    # d=4, L=1, B=1, T=2, V=8, d_ff=16. Matmul parameters per token: 4*4*4 (q, k, v, o) + 2*4*16
    # (fc1, fc2) + 4*8 (head) = 224. Forward: 2*224*2 tokens = 896, plus scores and values
    # 2*2*1*1*2^2*4 = 64, so 960; backward twice that; the step 2880.
    assert bench.step_flops(4, 1, 1, 2, vocab=8, d_ff=16) == 2880
    # d_ff defaults to 4d, vocab to 256.
    assert bench.step_flops(4, 1, 1, 2, vocab=8) == 2880
    assert bench.step_flops(32, 5, 16, 32) == 3 * (2 * (5 * 12 * 32**2 + 32 * 256) * 512 + 4 * 5 * 16 * 32**2 * 32)


def test_step_flops_counts_every_matmul_parameter_of_the_model():
    # P in the docstring is exactly the model's weight matrices minus the embedding tables.
    model = TransformerLM(256, 32, 4, 3, max_seq_len=8)
    matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("tok", "pos")))
    attention = 2 * 2 * 3 * 1 * 8 * 8 * 32
    assert bench.step_flops(32, 3, 1, 8) == 3 * (2 * matrices * 8 + attention)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "x"])
def test_step_flops_rejects_non_positive_sizes(bad):
    with pytest.raises(ValueError, match="positive integer"):
        bench.step_flops(bad, 1, 1, 1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sizes": ["tiny"]}, "valid choices: ci, cpu, gpu"),
        ({"sizes": ["ci", "huge"]}, "valid choices: ci, cpu, gpu"),
        ({"sizes": []}, "valid choices"),
        ({"threads": [0]}, "positive integers"),
        ({"threads": [1, -2]}, "positive integers"),
        ({"threads": []}, "thread count"),
        ({"repeats": 0}, "repeats"),
    ],
)
def test_bad_arguments_name_the_valid_choices(kwargs, match):
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match=match):
        bench.run_benchmark(**kwargs)
    assert torch.get_num_threads() == threads


def test_the_command_line_rejects_a_bad_size_before_measuring(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "nope"])
    assert "valid choices: ci, cpu, gpu" in capsys.readouterr().err


def _numbers(obj, path=""):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")


def test_quick_run_smoke(tmp_path, capsys):
    """The smoke test: ``python -m normlab.bench --quick`` end to end, JSON included."""
    threads = torch.get_num_threads()
    out = tmp_path / "bench.json"
    bench.main(["--quick", "--out", str(out)])
    assert torch.get_num_threads() == threads  # the benchmark gives the process its thread count back
    printed = capsys.readouterr().out
    assert "| ci (32, 5, 16 x 32) | 1 |" in printed and "model ratio, fused AdamW" in printed
    assert "fused AdamW gain: torch" in printed

    data = json.loads(out.read_text())
    assert {"provenance", "device", "repeats", "sizes", "matmul_ceiling", "steps", "cost", "sweep", "batched",
            "memory"} <= set(data)  # fmt: skip
    prov = data["provenance"]
    assert prov["threads_used"] == [1] and {"torch", "python", "device", "env", "revision"} <= set(prov)
    assert {"OMP_NUM_THREADS", "OMP_WAIT_POLICY"} <= set(prov["env"])

    (row,) = data["steps"]
    assert (row["size"], row["threads"], row["d_model"], row["n_layers"]) == ("ci", 1, 32, 5)
    assert set(row["models"]) == {"normlab", "torch", "normlab_fused", "torch_fused", "normlab_post"}
    assert set(row["fused_gain"]) == {"normlab", "torch"} and row["ratio_fused"] > 0
    assert len(row["models"]["normlab"]["seconds"]) == data["repeats"] == 3
    assert row["flops_per_step"] == bench.step_flops(32, 5, 16, 32)
    assert {(r["d_model"], r["n_layers"]) for r in data["cost"]} == {
        (64, 2), (64, 4), (64, 8), (64, 12), (32, 4), (128, 4)
    }  # fmt: skip

    sweep = data["sweep"]
    assert "skipped" not in sweep, sweep
    assert sweep["runs"] == 4 and sweep["steps"] == 10 and sweep["losses_identical"] is True

    measured = {k: data[k] for k in ("matmul_ceiling", "steps", "cost")}
    measured["sweep"] = {k: v for k, v in sweep.items() if k != "max_abs_loss_diff"}  # 0 when identical
    measured["rss"] = data["memory"]["process_peak_rss_mib"]["self"]
    numbers = list(_numbers(measured))
    assert len(numbers) > 50
    bad = [(p, v) for p, v in numbers if not (math.isfinite(v) and v > 0)]
    assert not bad, bad


def test_time_interleaved_times_every_function_in_alternating_order():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times, counts = bench.time_interleaved(fns, torch.device("cpu"), repeats=2, warmup=1, per_block=2)
    assert counts == {"a": 2, "b": 2, "c": 2}
    assert {name: len(t) for name, t in times.items()} == {"a": 2, "b": 2, "c": 2}
    assert all(s >= 0 for t in times.values() for s in t)
    # one warm-up call each, then a, b, c in blocks of 2, then c, b, a: drift falls on all alike
    assert calls == list("abc") + list("aabbcc") + list("ccbbaa")


def test_time_interleaved_refuses_bad_counts():
    with pytest.raises(ValueError, match="repeats >= 1"):
        bench.time_interleaved({"a": lambda: None}, torch.device("cpu"), repeats=0)
    with pytest.raises(ValueError, match="per_block >= 1"):
        bench.time_interleaved({"a": lambda: None}, torch.device("cpu"), repeats=1, per_block=0)


def test_the_thread_clock_counts_this_threads_cpu_time_and_refuses_where_it_cannot():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        busy = {"sleep": lambda: time.sleep(0.02), "work": lambda: sum(range(200_000))}
        wall, _ = bench.time_interleaved(busy, torch.device("cpu"), repeats=2, warmup=0, per_block=1)
        cpu, _ = bench.time_interleaved(busy, torch.device("cpu"), repeats=2, warmup=0, per_block=1, clock="thread")
        assert min(wall["sleep"]) >= 0.02 and max(cpu["sleep"]) < 0.005  # waiting is not work
        assert min(cpu["work"]) > 0
        with pytest.raises(ValueError, match="wall, thread"):
            bench.time_interleaved(busy, torch.device("cpu"), repeats=1, clock="cpu")
    finally:
        torch.set_num_threads(threads)
    if threads != 1:
        with pytest.raises(ValueError, match="one torch"):
            bench.time_interleaved(busy, torch.device("cpu"), repeats=1, clock="thread")
    with pytest.raises(ValueError, match="one torch"):
        bench.time_interleaved({"a": lambda: None}, torch.device("meta"), repeats=1, clock="thread")
