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


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/measure_gpu.sh runs it)")
TINY = dict(d_model=16, n_heads=2, n_layers=2, max_seq_len=16)


def _config(seed: int, **kw) -> normlab.TrainConfig:
    return normlab.TrainConfig(steps=6, batch_size=4, seq_len=16, eval_every=3, log_every=3, seed=seed, **kw)


@CUDA
def test_on_cuda_a_run_a_batched_sweep_and_an_unbatchable_job_agree_with_the_cpu():
    corpus = normlab.load_corpus()
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    on_gpu = normlab.run(TINY, _config(0), corpus=corpus, device=cuda, keep_model=True)
    on_cpu = normlab.run(TINY, _config(0), corpus=corpus, device=cpu)
    torch.testing.assert_close(on_gpu.losses, on_cpu.losses, rtol=1e-3, atol=1e-4)
    jobs = [(TINY, _config(s)) for s in range(3)] + [(TINY, _config(3, track_model_update=True))]
    swept = normlab.run_many(jobs, corpus=corpus, workers=1, batched=True)
    assert [r.config["seed"] for r in swept] == [0, 1, 2, 3]
    torch.testing.assert_close(swept[0].losses, on_gpu.losses, rtol=1e-4, atol=1e-5)


@CUDA
def test_on_cuda_the_probes_and_baselines_take_batches_from_either_device():
    corpus = normlab.load_corpus()
    model = normlab.initial_model(TINY, _config(0), corpus).cuda()
    x, y = corpus.batch("val", 2, 16, torch.Generator().manual_seed(0))
    stats = normlab.attention_stats(model, x)  # a CPU batch, a CUDA model
    assert stats["max_logit"].shape == (2,)
    assert corpus.unigram_loss(y.cuda()) == pytest.approx(corpus.unigram_loss(y))
    torch.manual_seed(1)
    before = torch.cuda.get_rng_state()
    normlab.initial_val_loss(TINY, _config(0), corpus)  # seeds a model of its own, not the caller's streams
    assert torch.equal(torch.cuda.get_rng_state(), before)
