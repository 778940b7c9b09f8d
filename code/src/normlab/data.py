"""An offline byte-level corpus: 38 source files of the Python standard library, shipped inside the
package (CPython 3.11.7, PSF licence in ``corpus/LICENSE-PSF.txt``), so every Python reads the same bytes.

A fixed list of files in a fixed order; the first 90% of each file trains, the last 10% validates.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import math
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

__all__ = ["STDLIB_FILES", "VOCAB_SIZE", "CORPUS_SHA256", "Corpus", "CorpusSpec", "load_corpus"]

VOCAB_SIZE = 256  # bytes

# Plain-module files that exist, as files, from Python 3.9 to 3.13 (pathlib and zipfile became
# packages, so they are left out). The order is the order of the concatenation.
STDLIB_FILES = (
    "argparse.py", "ast.py", "bisect.py", "calendar.py", "collections/__init__.py",
    "configparser.py", "contextlib.py", "copy.py", "csv.py", "dataclasses.py", "difflib.py",
    "enum.py", "fractions.py", "functools.py", "heapq.py", "inspect.py", "json/decoder.py",
    "json/encoder.py", "logging/__init__.py", "pprint.py", "queue.py", "random.py", "shutil.py",
    "string.py", "subprocess.py", "tempfile.py", "textwrap.py", "threading.py", "tokenize.py",
    "typing.py", "statistics.py", "shlex.py", "glob.py", "fnmatch.py", "gettext.py", "weakref.py",
    "operator.py", "locale.py",
)  # fmt: skip
SPLITS = ("train", "val")
SNAPSHOT = Path(__file__).parent / "corpus" / "stdlib-3.11.7.tar.xz"
CORPUS_SHA256 = "d7e124989c32aa89ae48"  # first 20 hex digits of the shipped snapshot's fingerprint (split 0.1)


def unigram_logp(train: torch.Tensor) -> torch.Tensor:
    """log P(byte) under the add-one smoothed byte frequencies of ``train``: the unigram model every
    run's unigram level and `normlab.ngram`'s unigram level use."""
    counts = torch.bincount(train.long(), minlength=VOCAB_SIZE).double() + 1.0
    return (counts / counts.sum()).log()


@dataclass
class Corpus:
    """Byte tensors for training and validation, plus where they came from."""

    train: torch.Tensor
    val: torch.Tensor
    files: tuple[str, ...]
    fingerprint: str  # sha256 of every file's name and bytes and of the split: two corpora that differ differ here
    root: Optional[str] = None  # where the files came from: None for the shipped snapshot
    val_fraction: float = 0.1
    _unigram: Optional[float] = field(default=None, repr=False)
    _eval_sets: dict = field(default_factory=dict, repr=False)
    _levels: dict = field(default_factory=dict, repr=False)  # normlab.ngram's levels per window shape

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def batch(
        self, split: str, batch_size: int, seq_len: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows (x, y) of shape [batch_size, seq_len], y shifted by one byte."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid choices: {', '.join(SPLITS)}")
        data = self.train if split == "train" else self.val
        if not 0 < seq_len < len(data) - 1:
            raise ValueError(f"seq_len must be in [1, {len(data) - 2}], got {seq_len}")
        start = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=generator)
        offsets = torch.arange(seq_len + 1)
        window = data[start[:, None] + offsets]
        return window[:, :-1].long(), window[:, 1:].long()

    def eval_set(self, seq_len: int, n_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed validation set: ``n_windows`` windows (x, y) spread evenly over the validation
        bytes (every file contributes), the same for every seed and run. Each call hands out fresh
        copies, so a caller that edits them in place cannot change what later runs are scored on."""
        key = (seq_len, n_windows)
        if key not in self._eval_sets:
            if not 0 < seq_len < len(self.val) - 1 or n_windows <= 0:
                raise ValueError(
                    f"need seq_len in [1, {len(self.val) - 2}] and n_windows > 0, got {seq_len}, {n_windows}"
                )
            start = torch.linspace(0, len(self.val) - seq_len - 1, n_windows).long()
            window = self.val[start[:, None] + torch.arange(seq_len + 1)]
            self._eval_sets[key] = (window[:, :-1].long(), window[:, 1:].long())
        x, y = self._eval_sets[key]
        return x.clone(), y.clone()

    def _unigram_logp(self) -> torch.Tensor:
        return unigram_logp(self.train)

    def unigram_loss(self, targets: torch.Tensor) -> float:
        """Cross-entropy (nats/byte) of ``targets`` under the training bytes' frequencies (add-one
        smoothed): what a model that learned byte frequencies and nothing else scores on them."""
        return float(-self._unigram_logp()[targets.long().flatten().cpu()].mean())

    def unigram_entropy(self) -> float:
        """Cross-entropy (nats/byte) of the validation bytes under the training bytes' frequencies
        (add-one smoothed): the loss of a model that learned byte frequencies and nothing else."""
        if self._unigram is None:
            self._unigram = self.unigram_loss(self.val)
        return self._unigram

    def spec(self) -> CorpusSpec:
        """What a worker process needs to load this same corpus itself (`CorpusSpec.load`)."""
        return CorpusSpec(self.root, self.val_fraction, self.fingerprint)

    def describe(self) -> str:
        return (
            f"{len(self.files)} standard-library files, {len(self.train):,} train + {len(self.val):,} val bytes, "
            f"sha256 {self.fingerprint[:12]}, unigram entropy {self.unigram_entropy():.3f} nats "
            f"(uniform: ln 256 = {math.log(VOCAB_SIZE):.3f})"
        )


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus by name: where its files are and how it is split, plus the fingerprint it must
    have. Small and picklable, so a sweep sends it to its workers instead of the bytes."""

    root: Optional[str]
    val_fraction: float
    fingerprint: str

    def load(self) -> Corpus:
        corpus = load_corpus(self.root, self.val_fraction)
        if corpus.fingerprint != self.fingerprint:
            raise ValueError(
                f"the corpus under {self.root or 'the shipped snapshot'} has fingerprint {corpus.fingerprint[:12]} "
                f"here, not {self.fingerprint[:12]} as where the sweep started: the files differ"
            )
        return corpus


_CACHE: dict[tuple[str, float], Corpus] = {}


def _snapshot_files() -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(SNAPSHOT.read_bytes()))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def load_corpus(root: Optional[str] = None, val_fraction: float = 0.1) -> Corpus:
    """The corpus from the snapshot shipped with normlab (the default: identical on every Python),
    or from the `STDLIB_FILES` under a directory ``root`` (e.g. another Python's Lib/; its files
    differ, and so does the fingerprint). Files missing under ``root`` are skipped; fewer than
    half present is an error.
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be a number in (0, 1), got {val_fraction!r}")
    val_fraction = float(val_fraction)
    root = None if root is None else str(Path(root).resolve())  # a worker may start elsewhere
    key = (str(root), val_fraction)
    if key in _CACHE:
        return _CACHE[key]
    if root is None:
        files = _snapshot_files()
    else:
        base = Path(root)
        files = {n: (base / n).read_bytes() for n in STDLIB_FILES if (base / n).is_file()}
    digest, train, val, used = hashlib.sha256(), [], [], []
    for name in STDLIB_FILES:
        if name not in files:
            continue
        raw = files[name]
        digest.update(name.encode() + b"\0" + raw)
        cut = int(len(raw) * (1 - val_fraction))
        train.append(raw[:cut])
        val.append(raw[cut:])
        used.append(name)
    digest.update(f"split: last {val_fraction!r} of each file validates".encode())
    if len(used) < len(STDLIB_FILES) // 2:
        raise FileNotFoundError(
            f"only {len(used)} of {len(STDLIB_FILES)} standard-library source files found under {root}"
        )

    def as_tensor(parts: list[bytes]) -> torch.Tensor:
        return torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8).clone()

    corpus = Corpus(as_tensor(train), as_tensor(val), tuple(used), digest.hexdigest(), root, val_fraction)
    _CACHE[key] = corpus
    return corpus
