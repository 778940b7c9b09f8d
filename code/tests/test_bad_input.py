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
        ({"lr": float("nan")}, "finite number > 0"),
        ({"lr": float("inf")}, "finite number > 0"),
        ({"warmup": 301}, r"warmup must be in \[0, steps=300\]"),
        ({"betas": (0.9, 1.0)}, r"betas must be two numbers in \[0, 1\)"),
        ({"eps": 0.0}, "eps > 0"),
        ({"weight_decay_mode": "decoupled"}, "coupled, independent"),
        ({"decay_fraction": 0.0, "schedule": "wsd"}, r"decay_fraction must be in \(0, 1\]"),
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
