"""Training-speed benchmarks of normlab, from one run, with provenance: ``python -m normlab.bench --help``.
Steps against PyTorch's own layers, FLOP/s against a matmul ceiling, sweeps, cost against size, memory.
"""

from ..reference import TorchReferenceLM, step_flops
from ..timing import make_train_step, time_interleaved
from .run import run_benchmark
from .steps import SIZES, BenchSize
from .table import format_table

__all__ = [
    "SIZES",
    "BenchSize",
    "TorchReferenceLM",
    "step_flops",
    "make_train_step",
    "time_interleaved",
    "run_benchmark",
    "format_table",
    "main",
]


def main(argv=None):  # noqa: ANN001, ANN201 - the command line, `python -m normlab.bench`
    from .__main__ import main as cli

    return cli(argv)
