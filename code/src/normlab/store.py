"""A sweep's store: one JSON file per finished run, named by a key of everything that changes its
result, written atomically, so a resumed sweep reloads only runs that are still valid.

The key covers the model kwargs, the config, normlab's own source files, torch, the corpus and its
split, the probes' code and the values they close over, the device, the training path (one by one
or batched) and the AdamW kernel. A probe whose values cannot be keyed is reported, and its runs
are trained again rather than resumed. `NORMLAB_STORE` names a default directory for the chapters.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import sys
import tempfile
import types
import warnings
from enum import Enum
from pathlib import Path, PurePath
from typing import Any, Callable, Optional, Union

import torch
from torch import nn

__all__ = ["Unkeyable", "callable_key", "value_key", "source_hash", "job_key", "atomic_write_text",
           "atomic_write_bytes", "default_store"]  # fmt: skip

PathLike = Union[str, Path]


class Unkeyable(ValueError):
    """A probe (or a value it uses) has no stable description: its runs cannot be resumed safely."""


def source_hash() -> str:
    """sha256 of every .py file of the installed normlab package: any change to normlab's code
    (an init, a norm, the loop) gives every stored run a new key."""
    return _source_hash(str(Path(__file__).resolve().parent))


@functools.cache
def _source_hash(root: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(root).rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _tensor_key(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return {"tensor": hashlib.sha256(raw).hexdigest()[:24], "dtype": str(t.dtype), "shape": list(t.shape)}


def value_key(value: Any, _seen: Optional[set[int]] = None) -> Any:
    """A JSON description of ``value`` that changes when the value does: numbers, strings,
    containers, tensors and arrays (by their bytes), dataclasses, modules by name, functions by
    `callable_key`, torch modules by class and state. Anything else raises `Unkeyable`."""
    seen = set() if _seen is None else _seen
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if type(value).__module__ == "numpy" or type(value).__module__.startswith("numpy."):
        if hasattr(value, "tobytes") and hasattr(value, "dtype"):
            return {"numpy": hashlib.sha256(value.tobytes()).hexdigest()[:24], "dtype": str(value.dtype),
                    "shape": list(getattr(value, "shape", ()))}  # fmt: skip
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if isinstance(value, type):
        return {"class": f"{value.__module__}.{value.__qualname__}"}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value)}
    if isinstance(value, PurePath):
        return {"path": str(value)}
    if isinstance(value, Enum):
        return {"enum": f"{type(value).__qualname__}.{value.name}"}
    if isinstance(value, nn.Module):
        state = {k: _tensor_key(v) for k, v in value.state_dict().items()}
        return {"nn.Module": f"{type(value).__module__}.{type(value).__qualname__}", "repr": repr(value),
                "state": state}  # fmt: skip
    if callable(value) and not dataclasses.is_dataclass(value):
        return callable_key(value, seen)  # it tracks cycles itself
    if id(value) in seen:
        return {"cycle": type(value).__qualname__}
    seen = seen | {id(value)}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [value_key(v, seen) for v in value]]
    if isinstance(value, (set, frozenset)):
        return ["set", sorted(json.dumps(value_key(v, seen), sort_keys=True) for v in value)]
    if isinstance(value, dict):
        items = [(json.dumps(value_key(k, seen), sort_keys=True), value_key(v, seen)) for k, v in value.items()]
        return ["dict", sorted(items, key=lambda kv: kv[0])]
    if dataclasses.is_dataclass(value):
        fields = {f.name: value_key(getattr(value, f.name), seen) for f in dataclasses.fields(value)}
        return {"dataclass": f"{type(value).__module__}.{type(value).__qualname__}", "fields": fields}
    raise Unkeyable(f"a value of type {type(value).__qualname__} ({value!r:.60})")


def _code_key(code: types.CodeType) -> dict[str, Any]:
    consts = [_code_key(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return {"bytecode": hashlib.sha256(code.co_code).hexdigest()[:24], "consts": consts, "names": list(code.co_names)}


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def callable_key(fn: Callable[..., Any], _seen: Optional[set[int]] = None) -> Any:
    """A description of a callable that changes when what it computes can: a plain function by its
    bytecode and constants, its defaults, the values its closure holds and the globals it names;
    a `functools.partial` by its function and arguments; a bound method by its function and
    object; a callable object by its class's ``__call__`` and its attributes; a builtin by name.
    Code from an installed module is named by module and qualified name (the module's version is
    covered elsewhere: normlab's source hash, torch's version)."""
    seen = set() if _seen is None else _seen
    if id(fn) in seen:
        return {"recursive": getattr(fn, "__qualname__", type(fn).__qualname__)}
    seen = seen | {id(fn)}
    if isinstance(fn, functools.partial):
        return {"partial": callable_key(fn.func, seen), "args": value_key(fn.args, seen),
                "keywords": value_key(fn.keywords, seen)}  # fmt: skip
    if isinstance(fn, types.MethodType):
        return {"method": callable_key(fn.__func__, seen), "self": value_key(fn.__self__, seen)}
    if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return {"builtin": f"{getattr(fn, '__module__', None)}.{fn.__qualname__}"}
    if isinstance(fn, types.FunctionType):
        name = f"{fn.__module__}.{fn.__qualname__}"
        version = _installed(fn.__module__)
        if version is not None and "<locals>" not in fn.__qualname__:
            return {"function": name, "version": version}
        g = fn.__globals__
        return {
            "function": name,
            "code": _code_key(fn.__code__),
            "defaults": value_key(fn.__defaults__, seen),
            "kwdefaults": value_key(fn.__kwdefaults__, seen),
            "closure": [value_key(_cell(c), seen) for c in fn.__closure__ or ()],
            "globals": {n: value_key(g[n], seen) for n in sorted(_global_names(fn.__code__)) if n in g},
        }
    if callable(fn) and hasattr(fn, "__dict__"):
        cls = type(fn)
        return {"object": f"{cls.__module__}.{cls.__qualname__}", "call": callable_key(cls.__call__, seen),
                "state": value_key(vars(fn), seen)}  # fmt: skip
    raise Unkeyable(f"a callable of type {type(fn).__qualname__} ({fn!r:.60})")


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: a name the function will define later
        return None


def _installed(module: Optional[str]) -> Optional[str]:
    """The version that names an installed module's code (normlab's is its source hash, the
    standard library's the Python version, another package's its ``__version__``), or None for
    code that is not an installed module's: a notebook's or a script's own (``__main__``), a
    test file's. Code with a version is keyed by its name, the rest by what it is."""
    if not module or module == "__main__":
        return None
    top = module.split(".")[0]
    if top == "normlab":
        return source_hash()[:16]
    if top in getattr(sys, "stdlib_module_names", ()) or top in ("builtins", "math", "functools", "operator"):
        return platform.python_version()
    version = getattr(sys.modules.get(top), "__version__", None)
    return str(version) if version is not None else None


def job_key(spec: dict[str, Any]) -> str:
    """The store name of one run: a hash of its spec (see `normlab.sweep` for what goes in)."""
    text = json.dumps(spec, sort_keys=True, allow_nan=False, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def atomic_write_text(path: PathLike, text: str) -> None:
    """`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file of its own in the same
    directory (two writers never share one), flushed and fsynced, then renamed over ``path``. A
    writer killed half-way leaves ``path`` as it was and a stray ``.tmp`` file behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # the rename itself survives a power cut once the directory is synced (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def check_writable(store: PathLike) -> Path:
    """Create ``store`` if needed and prove a file can be written there, before anything trains."""
    path = Path(store)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-check.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"the store directory {path} cannot be written ({error}); pick another store=") from error
    return path


def set_aside(path: Path, why: str) -> Path:
    """Rename an unreadable stored run out of the way (kept for inspection) and warn."""
    n = 0
    while (target := path.with_name(f"{path.name}.unreadable-{n}")).exists():
        n += 1
    os.replace(path, target)
    warnings.warn(f"stored run {path.name} could not be read ({why}); set aside as {target.name}, training it again",
                  stacklevel=3)  # fmt: skip
    return target


def default_store(name: str) -> Optional[Path]:
    """``$NORMLAB_STORE/<name>`` when the environment variable names a directory, else None (no
    store: nothing is written). On Colab, mount Google Drive and point it there, e.g.
    ``os.environ["NORMLAB_STORE"] = "/content/drive/MyDrive/normlab"``, so a restarted runtime
    reruns a cell and loses only the run that was in flight."""
    root = os.environ.get("NORMLAB_STORE", "").strip()
    if not root:
        return None
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"a store name is one plain directory name, got {name!r}")
    return Path(root).expanduser() / name
