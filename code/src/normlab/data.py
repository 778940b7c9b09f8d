"""An offline byte-level corpus: the Python standard library's own source files, nothing downloaded.

A fixed list of files in a fixed order; the first 90% of each file trains, the last 10% validates.
The bytes depend on the Python version, so a `Corpus` carries a fingerprint for provenance.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

__all__ = ["STDLIB_FILES", "VOCAB_SIZE", "Corpus", "load_corpus"]

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


@dataclass
class Corpus:
    """Byte tensors for training and validation, plus where they came from."""

    train: torch.Tensor
    val: torch.Tensor
    files: tuple[str, ...]
    fingerprint: str
    _unigram: Optional[float] = field(default=None, repr=False)

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

    def unigram_entropy(self) -> float:
        """Cross-entropy (nats/byte) of the validation bytes under the training bytes' frequencies
        (add-one smoothed): the loss of a model that learned byte frequencies and nothing else."""
        if self._unigram is None:
            counts = torch.bincount(self.train.long(), minlength=VOCAB_SIZE).double() + 1.0
            logp = (counts / counts.sum()).log()
            self._unigram = float(-logp[self.val.long()].mean())
        return self._unigram

    def describe(self) -> str:
        return (
            f"{len(self.files)} stdlib files, {len(self.train):,} train + {len(self.val):,} val bytes, "
            f"sha256 {self.fingerprint[:12]}, unigram entropy {self.unigram_entropy():.3f} nats "
            f"(uniform: ln 256 = {math.log(VOCAB_SIZE):.3f})"
        )


_CACHE: dict[tuple[str, float], Corpus] = {}


def load_corpus(root: Optional[str] = None, val_fraction: float = 0.1) -> Corpus:
    """Read `STDLIB_FILES` from the running interpreter's standard library (or ``root``).

    Files this Python lacks are skipped and left out of ``files``; fewer than half present is an error.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    base = Path(root or sysconfig.get_paths()["stdlib"])
    key = (str(base), val_fraction)
    if key in _CACHE:
        return _CACHE[key]
    digest, train, val, used = hashlib.sha256(), [], [], []
    for name in STDLIB_FILES:
        path = base / name
        if not path.is_file():
            continue
        raw = path.read_bytes()
        digest.update(name.encode() + b"\0" + raw)
        cut = int(len(raw) * (1 - val_fraction))
        train.append(raw[:cut])
        val.append(raw[cut:])
        used.append(name)
    if len(used) < len(STDLIB_FILES) // 2:
        raise FileNotFoundError(
            f"only {len(used)} of {len(STDLIB_FILES)} standard-library source files found under {base}; "
            "this Python ships without its .py sources (install them, or pass root= a CPython Lib/ folder)"
        )

    def as_tensor(parts: list[bytes]) -> torch.Tensor:
        return torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8).clone()

    corpus = Corpus(as_tensor(train), as_tensor(val), tuple(used), digest.hexdigest())
    _CACHE[key] = corpus
    return corpus
