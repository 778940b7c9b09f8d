"""Bad input fails at once with a ValueError that says what would have been valid."""

import pytest
import torch

import normlab
from normlab import Block, TrainConfig, TransformerLM


def test_unknown_variant_lists_the_valid_ones():
    with pytest.raises(ValueError, match="post, pre, sandwich, deepnorm, normformer"):
        Block(32, 4, norm="peri")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"norm_kind": "batch"}, "layer, rms"),
        ({"activation": "swish"}, "gelu, relu"),
        ({"init": "kaiming"}, "gpt2, xavier, torch"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_unknown_options_list_the_valid_ones(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Block(32, 4, **kwargs)


def test_width_not_divisible_by_heads():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        Block(30, 4)


@pytest.mark.parametrize("sizes", [(0, 32, 4, 2), (256, -8, 4, 2), (256, 32, 0, 2), (256, 32, 4, 0)])
def test_non_positive_sizes(sizes):
    with pytest.raises(ValueError, match="must be a positive integer"):
        TransformerLM(*sizes)


def test_sequence_longer_than_max_seq_len():
    model = TransformerLM(256, 32, 4, 1, max_seq_len=8)
    with pytest.raises(ValueError, match="exceeds max_seq_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_unknown_scale_name(monkeypatch):
    monkeypatch.setenv("NORMLAB_SCALE", "huge")
    with pytest.raises(ValueError, match="ci, cpu, gpu"):
        normlab.get_scale()


def test_unknown_schedule_and_bad_train_sizes():
    with pytest.raises(ValueError, match="constant, cosine, inverse-sqrt, wsd"):
        TrainConfig(schedule="step")
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        TrainConfig(steps=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lr": float("nan")}, r"lr must be a finite number in \(0, inf\)"),
        ({"lr": float("inf")}, r"lr must be a finite number in \(0, inf\)"),
        ({"warmup": 301}, r"warmup must be an integer in \[0, steps=300\]"),
        ({"betas": (0.9, 1.0)}, r"betas must be two numbers in \[0, 1\)"),
        ({"eps": 0.0}, r"eps must be a finite number in \(0, inf\)"),
        ({"weight_decay_mode": "decoupled"}, "coupled, independent"),
        ({"weight_decay_on": "gains"}, "matrices, all"),
        ({"decay_fraction": 0.0, "schedule": "wsd"}, r"decay_fraction must be a finite number in \(0, 1\]"),
    ],
)
def test_bad_training_settings_name_the_valid_range(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_unknown_probe_parameter_and_split():
    model = TransformerLM(256, 32, 4, 1)
    x = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="mlp.fc2.weight"):
        normlab.grad_norms(model, x, x, param="mlp.W2")
    with pytest.raises(ValueError, match="train, val"):
        normlab.load_corpus().batch("test", 2, 8, torch.Generator())


@pytest.mark.parametrize(
    "idx, message",
    [
        (torch.tensor([[0, 256]]), r"token ids must be in \[0, vocab_size=256\), got ids from 0 to 256"),
        (torch.tensor([[-1, 3]]), r"token ids must be in \[0, vocab_size=256\)"),
        (torch.tensor([[1.0, 2.0]]), "integer token ids"),
        (torch.tensor([[True, False]]), "integer token ids"),
    ],
)
def test_token_ids_outside_the_vocabulary_or_not_integers(idx, message):
    model = TransformerLM(256, 16, 2, 1)
    with pytest.raises(ValueError, match=message):
        model(idx)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"qk_norm": "yes"}, "qk_norm must be False, True or one of head, full, l2; got 'yes'"),
        ({"eps": -1e-5}, r"eps must be a number >= 0"),
        ({"eps": "1e-5"}, r"eps must be a number >= 0"),
    ],
)
def test_bad_block_settings_name_the_valid_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerLM(256, 16, 2, 1, **kwargs)


# Each of these was accepted silently, or failed later with a bare torch or Python error (issue 19).
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"clip": -1.0}, r"clip \(None for no clipping\) must be a finite number in \(0, inf\)"),
        ({"clip": 0}, r"clip \(None for no clipping\)"),
        ({"min_lr_ratio": -0.1}, r"min_lr_ratio must be a finite number in \[0, 1\]"),
        ({"min_lr_ratio": 1.5}, r"min_lr_ratio must be a finite number in \[0, 1\]"),
        ({"warmup": 2.5}, r"warmup must be an integer in \[0, steps=300\]"),
        ({"seed": 1.5}, r"seed must be an integer >= 0"),
        ({"seed": "0"}, r"seed must be an integer >= 0"),
        ({"seed": -1}, r"seed must be an integer >= 0"),
        ({"batch_size": True}, "batch_size must be a positive integer"),
        ({"lr": "1e-3"}, r"lr must be a finite number in \(0, inf\), got '1e-3'"),
        ({"betas": "ab"}, r"betas must be two numbers in \[0, 1\), got 'ab'"),
        ({"track_attention": "yes"}, "track_attention must be True or False"),
    ],
)
def test_training_settings_that_used_to_pass_silently(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_layers": True}, "n_layers must be a positive integer, got True"),
        ({"dropout": "0.1"}, r"dropout must be a number in \[0, 1\), got '0.1'"),
        ({"norm": "deepnorm", "deepnorm_alpha": -2.0}, "deepnorm_alpha must be a finite number > 0"),
        ({"norm": "deepnorm", "deepnorm_alpha": "2"}, "deepnorm_alpha must be a finite number > 0"),
        ({"norm": "pre", "deepnorm_alpha": 2.0}, "has no DeepNorm alpha"),
        ({"norm": "pre", "deepnorm_beta": 0.5}, "has no DeepNorm alpha"),
        ({"bias": "no"}, "bias must be True or False"),
    ],
)
def test_model_settings_that_used_to_pass_silently(kwargs, message):
    sizes = {"n_layers": 2, **{k: v for k, v in kwargs.items() if k == "n_layers"}}
    rest = {k: v for k, v in kwargs.items() if k != "n_layers"}
    with pytest.raises(ValueError, match=message):
        TransformerLM(256, 16, 2, sizes["n_layers"], **rest)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: normlab.Wrap(norm_in="yes"), "Wrap.norm_in must be True or False, got 'yes'"),
        (lambda: normlab.Wrap(shortcut="alpha"), "Wrap.shortcut must be a Shortcut"),
        (lambda: normlab.Wrap(shortcut_normed=True), "it needs norm_in=True"),
        (lambda: normlab.Placement.same(normlab.Wrap(), head_scale="after"), "head_scale must be None or one of"),
        (lambda: normlab.Placement.same(normlab.Wrap(), branch="gate"), "Placement.branch must be a Branch"),
        (
            lambda: normlab.Placement.same(
                normlab.Wrap(norm_trunk=True, shortcut=normlab.Shortcut.ALPHA), branch=normlab.Branch.ALPHA
            ),
            "applies DeepNorm's alpha twice",
        ),
        (lambda: normlab.Placement(attn=normlab.Wrap(), ffn="pre"), "Placement.ffn must be a Wrap"),
    ],
)
def test_invalid_placements_are_rejected_when_built(build, message):
    # (A head scale "after W_o" without a head scale, or alpha on both sides, cannot even be written
    # any more: the head scale is one field, None or where it sits.)
    with pytest.raises(ValueError, match=message):
        build()


def test_a_block_takes_one_placement_and_says_where_a_list_goes():
    with pytest.raises(ValueError, match=r"one placement per block \(a list\) goes to TransformerLM"):
        Block(16, 2, norm=["pre"])


def test_run_and_run_many_want_a_train_config_not_a_dict():
    kwargs = dict(d_model=16, n_heads=2, n_layers=1)
    with pytest.raises(ValueError, match=r"config must be a normlab.TrainConfig, got dict.*your_dict"):
        normlab.run(kwargs, {"steps": 5})
    with pytest.raises(ValueError, match=r"run_many job 0: the config must be a normlab.TrainConfig"):
        normlab.run_many([(kwargs, {"steps": 5})])
    with pytest.raises(ValueError, match="job 0 must be a"):
        normlab.run_many([kwargs])
    for bad in (True, 0, 1.5):
        with pytest.raises(ValueError, match="workers must be an integer >= 1"):
            normlab.run_many([(kwargs, TrainConfig(steps=2))], workers=bad)


@pytest.mark.parametrize("value", ["GPU ", "Cpu", " ci"])
def test_a_scale_name_must_be_exact(monkeypatch, value):
    monkeypatch.setenv("NORMLAB_SCALE", value)
    with pytest.raises(ValueError, match="valid choices: ci, cpu, gpu"):
        normlab.get_scale()


def test_the_gpu_scale_without_a_gpu_warns(monkeypatch):
    import normlab.scale as scale

    if normlab.get_device().type == "cuda":
        pytest.skip("this machine has a GPU")
    monkeypatch.setattr(scale, "_WARNED", [])
    monkeypatch.setenv("NORMLAB_SCALE", "gpu")
    with pytest.warns(UserWarning, match="no CUDA GPU here"):
        assert normlab.get_scale() == "gpu"


@pytest.mark.parametrize("n", [-3, 0, True, 2.0])
def test_seeds_needs_a_positive_count(n):
    with pytest.raises(ValueError, match="seeds"):
        normlab.seeds(n)


def test_layerwise_constructors_and_deepnorm_constants_check_their_types():
    with pytest.raises(ValueError, match="post_fraction must be a number in"):
        normlab.mix_ln(8, post_fraction=True)
    with pytest.raises(ValueError, match="decoder_layers counts blocks"):
        normlab.deepnorm_coefficients(decoder_layers=2.5)
    with pytest.raises(ValueError, match="encoder_layers counts blocks"):
        normlab.deepnorm_coefficients(2.5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ('{"a": 1}', "needs a 'meta' object and a 'results' list"),
        ("[1, 2]", "needs a 'meta' object"),
        ('{"meta": {"provenance": {}}, "results": [{"x": 1}]}', "result 0 is malformed"),
    ],
)
def test_load_results_on_a_file_that_is_not_a_results_file(tmp_path, text, message):
    path = tmp_path / "not-results.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        normlab.results.load_results(path, check_corpus=False)


def test_check_answer_takes_arrays_and_tensors_as_their_numbers(capsys):
    import numpy as np

    check = normlab.exercises.check_answer
    assert check("x", np.float64(2.0), 2.0)
    assert check("x", torch.tensor(2.0), 2.0)
    assert check("x", np.array([1.0, 2.0]), [1.0, 2.0])
    assert check("x", torch.tensor([1.0, 2.0]), (1.0, 2.0))
    assert not check("x", "2.0", 2.0)


def test_block_from_torch_refuses_what_it_cannot_copy():
    from torch import nn

    with pytest.raises(ValueError, match=r"drops out \(dropout \(after the FFN activation\) = 0.1"):
        normlab.interop.block_from_torch(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True))
    tanh = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, activation=nn.GELU("tanh"))
    with pytest.raises(ValueError, match="approximate='tanh'"):
        normlab.interop.block_from_torch(tanh)


def test_the_training_module_is_reachable_by_its_name():
    # normlab.train is the training function; the module is normlab.training (the README names it).
    assert callable(normlab.train) and normlab.training.make_adamw is not None


def test_no_function_hides_a_module_of_the_package():
    # normlab.train (a function) once hid the module normlab.train; every module is reachable by name.
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(normlab.__path__):
        module = importlib.import_module(f"normlab.{info.name}")
        assert getattr(normlab, info.name) is module, f"normlab.{info.name} is not the module"


def test_a_claim_of_unknown_kind_names_the_valid_kinds():
    from normlab import claims

    with pytest.raises(ValueError, match="valid choices: measured, identity, cited"):
        claims.check("x", "a statement", True, "1.0", kind="finding")


def test_a_failed_identity_fails_as_loudly_as_a_claim(capsys):
    from normlab import claims

    with pytest.raises(AssertionError, match=r"\[identity x\] FAILS"):
        claims.check("x", "a statement", False, "1.0", kind="identity")
