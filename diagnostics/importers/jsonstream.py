"""Streaming JSON for big documents: ijson over a byte stream that turns Python's bare ``NaN`` /
``Infinity`` / ``-Infinity`` tokens (which ``json.dumps`` writes and ijson rejects) into the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; ``to_float`` reads those back as numbers.
Tokens inside JSON strings are left alone.

The filter also counts how deep the document nests, outside strings, and stops it past ``MAX_DEPTH`` levels before
ijson sees them (``TooDeep``): ijson's item builder keeps a path per level, so memory grows with the square of the
depth (a 700 KB file nested 100,000 levels took 10 GB and 40 s). Real logs nest a few levels."""

from __future__ import annotations

import codecs
import io
import json
import os
import re
from collections.abc import Iterator

import numpy as np

# A complete string literal, a bare non-finite token, or a lone quote (a string cut by the chunk end).
_SCAN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|(-?Infinity|NaN)|"')
_LONGEST_TOKEN = len(b"-Infinity") - 1  # a token cut by the chunk end is at most this long
CHUNK = 256 * 1024
MAX_DEPTH = 256
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


class TooDeep(ValueError):
    """A JSON document nested deeper than ``MAX_DEPTH``."""


def _depth_after(depth: int, out: bytes) -> int:
    """The nesting depth after ``out`` (bytes that start and end outside strings), from ``depth``; ``TooDeep`` when
    it passes ``MAX_DEPTH`` on the way."""
    bare = _STRING.sub(b'""', out)
    opens = bare.count(b"[") + bare.count(b"{")
    if depth + opens > MAX_DEPTH:
        data = np.frombuffer(bare, dtype=np.uint8)
        marks = data[np.flatnonzero((data == 91) | (data == 123) | (data == 93) | (data == 125))]
        peak = depth + int(np.cumsum(np.where((marks == 91) | (marks == 123), 1, -1)).max(initial=0))
        if peak > MAX_DEPTH:
            raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep")
    return depth + opens - bare.count(b"]") - bare.count(b"}")


class NonFiniteFilter(io.RawIOBase):
    """A read-only binary stream over ``raw`` with bare NaN/Infinity tokens quoted."""

    def __init__(self, raw, chunk: int = CHUNK):
        self._raw = raw
        self._chunk = chunk
        self._carry = b""
        self._out = b""
        self._eof = False
        self.consumed = 0  # bytes read from ``raw`` so far (for error positions)
        self.depth = 0     # how deep the document nests at the end of what was emitted

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while not self._out and not self._eof:
            data = self._raw.read(self._chunk)
            self.consumed += len(data)
            eof = not data
            buf = self._carry + data
            self._carry = b""
            if eof:
                self._eof = True
            self._out, self._carry = _convert(buf, eof)
            self.depth = _depth_after(self.depth, self._out)

    def readinto(self, b) -> int:
        self._fill()
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            parts = []
            while True:
                self._fill()
                if not self._out:
                    return b"".join(parts)
                parts.append(self._out)
                self._out = b""
        self._fill()
        out, self._out = self._out[:size], self._out[size:]
        return out


def _convert(buf: bytes, eof: bool) -> tuple[bytes, bytes]:
    """(converted bytes safe to emit, bytes to carry into the next chunk). ``buf`` starts outside
    any string literal, and so does the carry."""
    if not eof and b"NaN" not in buf and b"Infinity" not in buf and b"\\" not in buf:
        # Fast path: only quotes matter. Cut where we are outside a string, keeping a tail that
        # may hold the start of a token.
        if buf.count(b'"') % 2:  # inside a string at the end: carry from its opening quote
            cut = buf.rfind(b'"')
        else:
            cut = max(0, len(buf) - _LONGEST_TOKEN)
            last_quote = buf.rfind(b'"', cut)
            if last_quote >= 0:
                cut = last_quote + 1
        return buf[:cut], buf[cut:]
    parts, pos, last_end, cut = [], 0, 0, len(buf)
    for m in _SCAN.finditer(buf):
        if m.group(0) == b'"' and not eof:  # an unterminated string: carry it whole
            cut = m.start()
            break
        if m.group(1):
            parts.append(buf[pos:m.start()])
            parts.append(b'"' + m.group(1) + b'"')
            pos = m.end()
        last_end = m.end()
    else:
        if not eof:
            cut = max(last_end, len(buf) - _LONGEST_TOKEN)
    parts.append(buf[pos:cut])
    return b"".join(parts), buf[cut:]


def json_error(display: str, path: str | os.PathLike, consumed: int | None = None) -> str:
    """A one-line description of where a JSON document breaks (json's own message when the file
    is small enough to re-read; else the byte position ijson reached)."""
    size = os.path.getsize(path)
    if size <= 64 * 2**20:
        with open(path, "rb") as f:
            data = f.read()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            return f"not UTF-8 text at byte {e.start}"
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            byte = len(text[: e.pos].encode("utf-8"))
            if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
                return f"truncated JSON: the document ends at byte {len(data)} before it is complete"
            return f"malformed JSON at byte {byte} (line {e.lineno}, column {e.colno}): {e.msg}"
        except RecursionError:
            return "JSON nested too deeply"
        return "malformed JSON"
    where = f" near byte {consumed}" if consumed is not None else ""
    return f"truncated or malformed JSON{where}"


def stream_items(source, path, prefix: str) -> Iterator[tuple[int, object]]:
    """``(index from 1, item)`` for each item at ``prefix`` (ijson's path, e.g. ``"item"`` or
    ``"log_history.item"``) of a big JSON document, streamed; a broken document is ``source.error``."""
    import ijson

    with open(path, "rb") as raw:
        if raw.read(len(codecs.BOM_UTF8)) != codecs.BOM_UTF8:  # a BOM (Windows editors write one) is no JSON
            raw.seek(0)
        stream = NonFiniteFilter(raw)
        try:
            items = ijson.items(stream, prefix, use_float=True)  # reads the first chunk
        except TooDeep as e:
            raise source.error(str(e)) from None
        index = 0
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            except ijson.JSONError:
                problem = json_error(source.path, path, stream.consumed)
                if not index:
                    raise source.error(problem) from None
                source.note(f"{problem}: read the {index} items before it")  # a run that crashed mid-write
                return
            except UnicodeDecodeError:
                raise source.error("not UTF-8 text") from None
            except TooDeep as e:
                raise source.error(str(e)) from None
            index += 1
            yield index, item


def array_records(source, path) -> Iterator[tuple[str, dict]]:
    """``("item N", object)`` for each element of a JSON document that is one array of objects (a loop's
    ``json.dump(history, f)``); an element that is not an object is an error."""
    for index, item in stream_items(source, path, "item"):
        if not isinstance(item, dict):
            source.skip_line(f"item {index}", f"a {type(item).__name__}, not an object")
            continue
        yield f"item {index}", item
