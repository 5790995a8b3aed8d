"""Read a checkpoint's ``training_args.bin`` (``torch.save`` of the HF ``TrainingArguments`` / TRL ``GRPOConfig``)
without unpickling code: every class or function the pickle names becomes an inert record of its name, arguments
and state, and nothing it names is ever imported or called. What comes out is plain data: the arguments' fields
as a dict."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

MAX_BYTES = 16 * 2**20
_PLAIN = {("builtins", n) for n in ("set", "frozenset", "complex", "slice", "bytearray")}
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
        if (module, name) in _PLAIN:
            return {"set": set, "frozenset": frozenset, "complex": complex, "slice": slice,
                    "bytearray": bytearray}[name]
        if (module, name) in _DICTS:
            return _dict
        if module in ("copyreg", "copy_reg") and name == "__newobj__":
            return _newobj
        return type(name, (_Record,), {"qualname": f"{module}.{name}"})

    def persistent_load(self, pid):  # tensor storages: not needed for a config
        return None


def _dict(*args):
    return dict(args[0]) if args and isinstance(args[0], (dict, list)) else {}


def plain(value, depth: int = 0):
    """Records turned into data: an enum-like record (one argument, no state) is its value; a record with a state
    dict is that dict; anything else is its qualified name."""
    if depth > 20:
        return None
    if isinstance(value, _Record):
        if isinstance(value.state, tuple) and value.state and isinstance(value.state[0], dict):
            value.state = value.state[0]
        if isinstance(value.state, dict):
            return {str(k): plain(v, depth + 1) for k, v in value.state.items()}
        if len(value.args) == 1 and value.state is None:
            return plain(value.args[0], depth + 1)
        return value.qualname
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


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
            data = archive.read(names[0])
    try:
        loaded = _Unpickler(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - any failure to take the pickle apart means it is not readable here
        raise UnsafeToRead(f"not a pickle this reader can take apart ({type(e).__name__})") from None
    args = plain(loaded)
    if not isinstance(args, dict) or not args:
        kind = loaded.qualname if isinstance(loaded, _Record) else type(loaded).__name__
        raise UnsafeToRead(f"holds a {kind}, not training arguments")
    return args
