"""normlab: where the LayerNorm goes in a Transformer block, as code the book imports and shows.

`Block` and `TransformerLM` take the norm placement as data (`Placement`, the `VARIANTS` table, and
`LAYERWISE` for stacks whose blocks differ) and their settings as one `ModelConfig`; the rest is
the data, training loop, sweeps, probes and plots the chapters measure with.
"""

from . import (
    attention,
    batched,
    board,
    board_replay,
    checks,
    claims,
    exercises,
    init,
    interop,
    model,
    ngram,
    norms,
    plot,
    probes,
    record,
    reference,
    replay,
    results,
    stats,
    store,
    sweep,
    timing,
    training,
    variants,
)
from .attention import QK_NORMS, Attention
from .data import CORPUS_SHA256, STDLIB_FILES, VOCAB_SIZE, Corpus, CorpusSpec, load_corpus
from .init import admin_init, data_init_, init_block_
from .jacobian import layernorm_jacobian, rmsnorm_jacobian
from .model import ACTIVATIONS, INIT_SCHEMES, MLP, Block, ModelConfig, TransformerLM
from .ngram import NgramLevels, ngram_levels, run_regime
from .norms import NORM_KINDS, DyT, RMSNorm
from .probes import attention_stats, grad_norms, model_update, norm_input_scale, residual_norms
from .record import OUTCOMES, TrainResult, classify_outcome, divergence_ceiling
from .replay import Replay, replay_or_run, save_sweep, stored_sweep
from .scale import (
    SCALES,
    PerScale,
    configure_threads,
    describe_environment,
    get_device,
    get_scale,
    seed_base,
    seeds,
)
from .store import default_store
from .sweep import SweepError, run_many
from .training import (
    SCHEDULES,
    WEIGHT_DECAY_MODES,
    TrainConfig,
    initial_model,
    initial_val_loss,
    lr_multiplier,
    run,
    train,
)
from .variants import (
    HEAD_SCALES,
    LAYERWISE,
    VARIANTS,
    Branch,
    DeepNormCoefficients,
    Placement,
    Shortcut,
    Wrap,
    deepnorm_coefficients,
    layernorm_scaling,
    mix_ln,
    placement,
    placements,
)

__version__ = "0.1.0"
configure_threads()  # one torch thread unless OMP_NUM_THREADS or NORMLAB_THREADS says otherwise

__all__ = [
    "attention", "init", "model", "ngram", "norms", "reference", "replay", "timing", "variants",
    "NgramLevels", "Replay", "ngram_levels", "replay_or_run", "run_regime", "save_sweep", "stored_sweep",
    "batched", "board", "board_replay", "checks", "claims", "record", "exercises", "interop", "plot", "probes",
    "results", "stats",
    "store", "sweep", "training", "CorpusSpec", "SweepError", "configure_threads", "default_store",
    "divergence_ceiling",
    "run_many", "Branch", "HEAD_SCALES", "ModelConfig", "Shortcut", "Wrap",
    "ACTIVATIONS", "CORPUS_SHA256", "INIT_SCHEMES", "LAYERWISE", "NORM_KINDS", "OUTCOMES", "QK_NORMS", "SCALES",
    "SCHEDULES", "STDLIB_FILES", "VARIANTS", "VOCAB_SIZE", "WEIGHT_DECAY_MODES",
    "MLP", "Attention", "Block", "Corpus", "DeepNormCoefficients", "DyT", "PerScale", "Placement", "RMSNorm",
    "TrainConfig", "TrainResult", "TransformerLM",
    "admin_init", "attention_stats", "classify_outcome", "data_init_", "deepnorm_coefficients",
    "describe_environment", "get_device", "get_scale", "grad_norms", "init_block_", "initial_model",
    "initial_val_loss", "layernorm_jacobian",
    "layernorm_scaling", "load_corpus", "lr_multiplier", "mix_ln", "model_update", "norm_input_scale",
    "placement", "placements", "residual_norms",
    "rmsnorm_jacobian", "run", "seed_base", "seeds", "train",
]  # fmt: skip
