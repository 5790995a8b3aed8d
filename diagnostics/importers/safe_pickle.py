"""Read a checkpoint's ``training_args.bin`` (``torch.save`` of the HF ``TrainingArguments`` / TRL ``GRPOConfig``)
without unpickling code: every class or function the pickle names becomes an inert record of its name, arguments
and state, and nothing it names is ever imported or called. What comes out is plain data: the arguments' fields
as a dict.

Bounded for any input: no constructor is ever called (``bytearray(2**32)`` is a record, not 4 GiB), the file and an
archive's inflated pickle are capped at ``MAX_BYTES`` (a zip bomb is refused after reading that much), and turning
records into data visits at most ``MAX_NODES`` objects (a "billion laughs" pickle, a list of lists that share
their items, refers to 2**30 objects in 300 bytes)."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

MAX_BYTES = 16 * 2**20
MAX_NODES = 200_000
_SETS = {("builtins", "set"), ("builtins", "frozenset"), ("__builtin__", "set"), ("__builtin__", "frozenset")}
_DICTS = {("collections", "OrderedDict"), ("collections", "defaultdict")}


class UnsafeToRead(Exception):
    """The file is not a pickle this reader can take apart safely."""


class _Record:
    """An object of a class the pickle names: its qualified name, the arguments it was built with, its state."""

    qualname = "?"

    def __init__(self, *args):
        self.args = args
        self.state = None

    def __setstate__(self, state):
        self.state = state


def _newobj(cls, *args):
    """copyreg.__newobj__ (protocol 2 dataclass pickles) for a record class."""
    return cls(*args)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _SETS:
            return _set
        if (module, name) in _DICTS:
            return _dict
        if module in ("copyreg", "copy_reg") and name == "__newobj__":
            return _newobj
        return type(name, (_Record,), {"qualname": f"{module}.{name}"})

    def persistent_load(self, pid):  # tensor storages: not needed for a config
        return None


def _dict(*args):
    return dict(args[0]) if args and isinstance(args[0], (dict, list)) else {}


def _set(*args):
    """A pickled set's items, as a list (never a call of ``set`` on what the pickle hands it)."""
    return list(args[0]) if args and isinstance(args[0], (list, tuple)) else []


class _Budget:
    """How many more objects ``plain`` may visit."""

    def __init__(self, nodes: int):
        self.left = nodes

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise UnsafeToRead(f"refers to more than {MAX_NODES:,} objects")


def plain(value, depth: int = 0, budget: _Budget | None = None):
    """Records turned into data: an enum-like record (one argument, no state) is its value; a record with a state
    dict is that dict; anything else is its qualified name. ``UnsafeToRead`` past ``MAX_NODES`` objects."""
    budget = budget or _Budget(MAX_NODES)
    budget.spend()
    if depth > 20:
        return None
    if isinstance(value, _Record):
        state = value.state
        if isinstance(state, tuple) and state and isinstance(state[0], dict):
            state = state[0]
        if isinstance(state, dict):
            return {_short(k): plain(v, depth + 1, budget) for k, v in state.items()}
        if len(value.args) == 1 and state is None:
            return plain(value.args[0], depth + 1, budget)
        return value.qualname
    if isinstance(value, dict):
        return {_short(k): plain(v, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1, budget) for v in value]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, str):
        return value[:10_000]
    return f"<{type(value).__name__}>"


def _short(key) -> str:
    return key[:200] if isinstance(key, str) else f"<{type(key).__name__}>"


def read_training_args(path: str | Path) -> dict:
    """The fields of a ``training_args.bin`` as a plain dict. Raises ``UnsafeToRead`` with the reason."""
    path = Path(path)
    if path.stat().st_size > MAX_BYTES:
        raise UnsafeToRead("larger than 16 MiB")
    data = path.read_bytes()
    if zipfile.is_zipfile(io.BytesIO(data)):  # torch.save's format since torch 1.6
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if not names:
                raise UnsafeToRead("a zip archive without data.pkl")
            with archive.open(names[0]) as member:  # inflated up to the cap, never further (a zip bomb)
                data = member.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise UnsafeToRead("its pickle inflates to more than 16 MiB")
    try:
        loaded = _Unpickler(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - any failure to take the pickle apart means it is not readable here
        raise UnsafeToRead(f"not a pickle this reader can take apart ({type(e).__name__})") from None
    args = plain(loaded)  # UnsafeToRead past MAX_NODES
    if not isinstance(args, dict) or not args:
        kind = loaded.qualname if isinstance(loaded, _Record) else type(loaded).__name__
        raise UnsafeToRead(f"holds a {kind}, not training arguments")
    return args
