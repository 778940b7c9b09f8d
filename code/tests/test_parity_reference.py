"""Nothing moves but the code: every placement, norm kind and QK-norm kind gives the forward output,
parameter names and shapes, init and short-run losses recorded before the package was reorganised
(`make_parity_reference.py`, run once on the old code, on an Intel Xeon). Names, shapes and the init
must match bit for bit anywhere (the random streams are the CPU's own); the forward output and the
losses bit for bit where the float kernels are the recording machine's, and to float rounding on
another CPU (an AMD EPYC's kernels round differently: the forward's mean moved in its 9th digit)."""

import json
import sys
from pathlib import Path

import pytest
import torch

import normlab

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import make_parity_reference as ref  # noqa: E402

REFERENCE = json.loads((HERE / "data" / "parity-reference.json").read_text())
IDX = torch.randint(0, ref.V, (2, ref.T), generator=torch.Generator().manual_seed(0))


def test_the_reference_covers_every_variant_norm_kind_and_qk_norm_kind():
    names = set(REFERENCE["models"])
    for variant in [*normlab.VARIANTS, *normlab.LAYERWISE]:
        for kind in normlab.NORM_KINDS:
            for qk in ("False", "head", "full", "l2"):
                assert f"{variant} | {kind} | qk {qk}" in names
    assert set(ref.models()) == names and set(ref.short_runs()) == set(REFERENCE["runs"])


@pytest.mark.parametrize("name", sorted(REFERENCE["models"]))
def test_a_model_is_what_it_was_before_the_reorganisation(name):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = normlab.TransformerLM(ref.V, **ref.models()[name])
    got, want = ref.describe(model, IDX), REFERENCE["models"][name]
    assert [tuple(p) for p in got["params"]] == [tuple(p) for p in want["params"]]  # names, shapes, order
    assert got["buffers"] == want["buffers"]
    assert got["init"] == want["init"], "a different init"
    if got["forward"] != want["forward"]:  # another CPU's kernels: the same function to float rounding
        assert got["forward_mean"] == pytest.approx(want["forward_mean"], rel=1e-5, abs=1e-9)
        assert got["forward_std"] == pytest.approx(want["forward_std"], rel=1e-5)


@pytest.mark.parametrize("name", sorted(REFERENCE["runs"]))
def test_a_short_run_gives_the_same_losses_bit_for_bit(name):
    torch.set_num_threads(1)
    result = normlab.run(ref.short_runs()[name], normlab.TrainConfig(**ref.RUN_CONFIG))
    want = REFERENCE["runs"][name]
    assert result.status == want["status"]
    if [repr(x) for x in result.losses] != want["losses"]:  # another CPU's kernels: to float rounding
        torch.testing.assert_close(torch.tensor(result.losses, dtype=torch.float64),
                                   torch.tensor([float(x) for x in want["losses"]], dtype=torch.float64),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        torch.testing.assert_close(torch.tensor([v for _, v in result.evals], dtype=torch.float64),
                                   torch.tensor([float(x) for x in want["evals"]], dtype=torch.float64),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
