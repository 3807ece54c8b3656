"""dump.json read as places: each entry's byte span in the file, decoded again when its case runs.

Collection needs only a few facts per entry (its key, whether it is an object, whether its recorded
outputs hold an inf or nan). ``scan_dump`` walks the file with json's own C scanner, hands each entry
to a summary function and keeps the summary and the span, not the entry: a 100k-entry dump then
holds no parsed entry after collection. ``SpanEntry.value`` reads and decodes its span when the
case runs, in the same dialect (the bare NaN and Infinity msprobe writes).

The file is untrusted: a span is read only while the file is the one scanned (same size and
modification time), an entry larger than ``MAX_ENTRY_BYTES`` is refused when its case runs, and
anything the scanner does not follow is handed back to ``json.loads`` for its verdict and message.
"""

from __future__ import annotations

import json
import os
import re
from json.decoder import JSONDecodeError, scanstring
from pathlib import Path
from typing import Any, Callable

# json's C scanner (scan_once(text, index) -> (value, end)) and whitespace, as json.load uses them.
_SCAN_ONCE = json.JSONDecoder().scan_once
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_COMMA_OR_CLOSE = re.compile(r"[ \t\n\r]*([,}\]])[ \t\n\r]*")  # and the whitespace after it

# An msprobe entry describes one API call: even a call on thousands of tensors is a few MiB of JSON.
MAX_ENTRY_BYTES = 64 * 2**20


class NotScanned(ValueError):
    """The file is not a JSON object the scanner follows; json.loads says why, or reads it whole."""


class EntryUnreadable(Exception):
    """A case's entry cannot be read back from its dump.json; the message names the file and the entry."""


class Entry:
    """Where a case's entry comes from: ``value`` is the decoded JSON value."""

    __slots__ = ()

    @property
    def value(self) -> Any:
        raise NotImplementedError

    @property
    def size(self) -> int:
        return 0


class LoadedEntry(Entry):
    """An entry already decoded (a file read whole)."""

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        self._value = value

    @property
    def value(self) -> Any:
        return self._value


class SpanEntry(Entry):
    """An entry left in its file: decoded from ``reader`` on each use (the reader keeps the last few)."""

    __slots__ = ("reader", "key", "start", "end")

    def __init__(self, reader: SpanReader, key: str, start: int, end: int):
        self.reader, self.key, self.start, self.end = reader, key, start, end

    @property
    def value(self) -> Any:
        return self.reader.read(self.key, self.start, self.end)

    @property
    def size(self) -> int:
        return self.end - self.start


class SpanReader:
    """Reads entries back from one dump.json while it is the file that was scanned."""

    _KEEP = 4  # a case reads its forward and backward entries several times while it runs

    def __init__(self, path: Path, size: int, mtime_ns: int):
        self.path, self.size, self.mtime_ns = path, size, mtime_ns
        self._recent: dict[int, Any] = {}
        self.duplicates: dict[str, int] = {}  # 'data' keys the file gives more than once: how many times

    def read(self, key: str, start: int, end: int) -> Any:
        if start in self._recent:
            return self._recent[start]
        if end - start > MAX_ENTRY_BYTES:
            raise EntryUnreadable(f"{self.path}: the entry {key} is {(end - start) / 2**20:.0f} MiB of JSON, past the "
                                  f"{MAX_ENTRY_BYTES // 2**20} MiB one API call can need; re-dump this API or delete it")
        try:
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                if (stat.st_size, stat.st_mtime_ns) != (self.size, self.mtime_ns):
                    raise EntryUnreadable(f"{self.path} changed after it was collected, so its entry {key} is no "
                                          f"longer where it was; run pytest again on the finished dump")
                handle.seek(start)
                raw = handle.read(end - start)
            value = json.loads(raw.decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise EntryUnreadable(f"{self.path}: the entry {key} cannot be read back "
                                  f"({(str(exc).splitlines() or [type(exc).__name__])[0]})") from None
        if len(self._recent) >= self._KEEP:
            del self._recent[next(iter(self._recent))]
        self._recent[start] = value
        return value


def read_dump(path: Path, summarize: Callable[[str, Any], Any]) -> tuple[dict[str, Any], SpanReader | None]:
    """The top-level object of dump.json with its 'data' object as {key: (summary, SpanEntry)}, and the
    reader of those spans; or, for a file the scanner does not follow, json.loads's document and None.

    Raises what json.load raises for a file that is not JSON (ValueError, UnicodeDecodeError, OSError).
    """
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        raw = handle.read()
    text = raw.decode("utf-8")
    del raw  # the file's text alone while it is scanned
    reader = SpanReader(path, stat.st_size, stat.st_mtime_ns)
    try:
        document = _scan_object(text, reader, summarize)
    except (NotScanned, JSONDecodeError, StopIteration, IndexError):
        return json.loads(text), None  # its verdict and message, or a file the scanner does not follow
    return document, reader


def _scan_object(text: str, reader: SpanReader, summarize) -> dict[str, Any]:
    """The file's top-level object; its 'data' object, when it is one, as {key: (summary, SpanEntry)}."""
    index = _skip(text, 0)
    if text[index] != "{":
        raise NotScanned("not an object")
    document: dict[str, Any] = {}
    index = _skip(text, index + 1)
    if text[index] == "}":
        return _end(text, index + 1, document)
    offsets = _ByteOffsets(text)
    while True:
        key, index = _key(text, index)
        if key == "data" and text[index] == "{":
            document[key], index = _scan_data(text, index, offsets, reader, summarize)
        else:
            document[key], index = _SCAN_ONCE(text, index)
        index, closed = _comma_or_close(text, index, "}")
        if closed:
            return _end(text, index, document)


def _scan_data(text: str, index: int, offsets: _ByteOffsets, reader: SpanReader, summarize):
    entries: dict[str, tuple[Any, SpanEntry]] = {}
    index = _skip(text, index + 1)
    if text[index] == "}":
        return entries, index + 1
    while True:
        key, index = _key(text, index)
        value, end = _SCAN_ONCE(text, index)
        # Same dict semantics as json.load: a key given twice keeps its first place and its last value;
        # the reader counts it, for its case cannot tell which entry the key names.
        if key in entries:
            reader.duplicates[key] = reader.duplicates.get(key, 1) + 1
        entries[key] = (summarize(key, value), SpanEntry(reader, key, offsets.at(index), offsets.at(end)))
        index, closed = _comma_or_close(text, end, "}")
        if closed:
            return entries, index


def _key(text: str, index: int) -> tuple[str, int]:
    """A member's key and the index of its value, after the colon."""
    if text[index] != '"':
        raise NotScanned("a key is not a string")
    key, index = scanstring(text, index + 1)
    colon = _COLON.match(text, index)
    if colon is None:
        raise NotScanned("no colon after a key")
    return key, colon.end()


def _comma_or_close(text: str, index: int, close: str) -> tuple[int, bool]:
    found = _COMMA_OR_CLOSE.match(text, index)
    if found is None or found[1] not in (",", close):
        raise NotScanned("no comma between members")
    return found.end(), found[1] == close


def _end(text: str, index: int, document: dict[str, Any]) -> dict[str, Any]:
    if _skip(text, index) != len(text):
        raise NotScanned("extra data after the object")
    return document


def _skip(text: str, index: int) -> int:
    return _WHITESPACE.match(text, index).end()


class _ByteOffsets:
    """Byte offsets of character indices, met in increasing order: equal for an ASCII file."""

    def __init__(self, text: str):
        self.text, self.ascii = text, text.isascii()
        self.char = self.byte = 0

    def at(self, index: int) -> int:
        if self.ascii:
            return index
        self.byte += len(self.text[self.char:index].encode("utf-8"))
        self.char = index
        return self.byte
