"""The model's forward and backward create no tensor on another device and read no value back, so
a GPU runs them without a host transfer or sync: checked on PyTorch's "meta" device, where a CPU
tensor mixed in, or a ``.item()``, is an error (a CPU-only machine has no other device to test on)."""

import pytest
import torch

import normlab


@pytest.mark.parametrize("norm_kind", normlab.NORM_KINDS)
@pytest.mark.parametrize("qk_norm", [False, "head", "full", "l2"])
@pytest.mark.parametrize("variant", [*normlab.VARIANTS, *normlab.LAYERWISE])
def test_forward_and_backward_stay_on_the_models_device(variant, qk_norm, norm_kind):
    model = normlab.TransformerLM(256, 32, 4, 2, norm=variant, qk_norm=qk_norm, norm_kind=norm_kind, max_seq_len=16)
    model = model.to("meta")
    idx = torch.zeros(2, 8, dtype=torch.long, device="meta")
    out = model(idx)
    assert out.device.type == "meta" and out.shape == (2, 8, 256)
    out.sum().backward()
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in model.parameters())


def test_the_probes_explicit_attention_path_stays_on_the_device_too():
    model = normlab.TransformerLM(256, 32, 4, 2, max_seq_len=16).to("meta")
    for a in normlab.probes.record_attention_logits(model, True):
        assert a.record_logits
    out = model(torch.zeros(2, 8, dtype=torch.long, device="meta"))
    assert out.device.type == "meta"
    assert all(
        a.logit_stats["max_logit"].device.type == "meta" for a in normlab.probes.record_attention_logits(model, False)
    )
