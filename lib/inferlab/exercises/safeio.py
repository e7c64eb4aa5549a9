"""Reading what an untrusted submission leaves behind, and writing what an instructor opens.

Four guards, each a pure function, a small wrapper around one system call, or a small parser:

- `read_regular(dir_fd, name, limit_bytes)`: the bytes of the file `name` in the folder open as `dir_fd`,
  opened with O_NOFOLLOW | O_NONBLOCK (a symbolic link is refused by the kernel, a fifo does not block),
  then checked with fstat on the open descriptor: a regular file, one hard link, at most `limit_bytes`.
  Anything else raises `UnsafeFile` with the reason (the grader reads the submitted files this way: a
  submission that is a link to a host file gets that refusal, never the host file's contents).
- `loads_bounded(data, max_bytes, max_depth)`: JSON with its size, nesting depth and numbers bounded
  before Python's parser sees it: deeper than `max_depth` is refused (no RecursionError), integers
  longer than `MAX_INT_DIGITS` digits become `inf` (scored as "not a finite number"), never an
  OverflowError or the 4300-digit ValueError of int().
- `FrameReader(limits)`: the runner's result stream (report, executed notebook) parsed as it arrives,
  every record checked against its name's size limit before its bytes are kept (see the class).
- `cell(text)`: one value for a CSV cell or a Markdown line, neutralised against spreadsheet formulas
  (a leading `=`, `+`, `-`, `@`, tab or carriage return gets a `'` in front, the convention spreadsheets
  read as "text") and against line breaks (every one becomes a space); it always encodes as UTF-8.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat

import numpy as np

MAX_INT_DIGITS = 30  # an answer is never a 31-digit integer; longer ones are read as inf (then "not finite")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Every character a spreadsheet or a Markdown renderer may take as a line break.
_BREAKS = re.compile(r"[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))


class UnsafeFile(ValueError):
    """A file a submission left that the grader refuses to read (link, device, fifo, too big, ...)."""


def read_regular(dir_fd: int, name: str, limit_bytes: int, *, single_link: bool = True) -> bytes:
    """The contents of `name` (one path component) in the folder open as `dir_fd`; UnsafeFile unless it
    is a regular file with at most `limit_bytes` bytes (and one hard link, unless `single_link=False`).
    Links are never followed."""
    if "/" in name or name in ("", ".", ".."):
        raise UnsafeFile(f"{name!r} is not a plain file name")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(f"{name} is a symbolic link") from None
        raise UnsafeFile(f"{name} cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a fifo" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file")
            raise UnsafeFile(f"{name} is {kind}")
        if single_link and st.st_nlink != 1:
            raise UnsafeFile(f"{name} has {st.st_nlink} hard links")
        if st.st_size > limit_bytes:
            raise UnsafeFile(f"{name} is larger than {limit_bytes / 1e6:g} MB")
        chunks, left = [], limit_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit_bytes:
            raise UnsafeFile(f"{name} is larger than {limit_bytes / 1e6:g} MB")
        return data
    finally:
        os.close(fd)


def json_depth(data: bytes) -> int:
    """The deepest nesting of [ and { in JSON text (brackets inside strings not counted)."""
    brackets = np.frombuffer(_STRING.sub(b'""', data).translate(None, _NOT_BRACKET), dtype=np.uint8)
    if brackets.size == 0:
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def _int(text: str):
    digits = text.lstrip("-")
    return int(text) if len(digits) <= MAX_INT_DIGITS else float("-inf" if text.startswith("-") else "inf")


def loads_bounded(data: bytes | str, *, max_bytes: int, max_depth: int):
    """json.loads with the size, the depth and the length of integers bounded (ValueError otherwise)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise ValueError(f"JSON larger than {max_bytes / 1e6:g} MB")
    depth = json_depth(raw)
    if depth > max_depth:
        raise ValueError(f"JSON nested {depth} deep (at most {max_depth})")
    try:
        return json.loads(raw, parse_int=_int)
    except RecursionError:  # not reachable below max_depth, kept as a guard
        raise ValueError("JSON nested too deeply") from None


def one_line(text) -> str:
    """`text` with every line break replaced by a space, and what UTF-8 cannot encode (lone surrogates, from a
    forged report or an undecodable file name) written as a backslash escape."""
    return _BREAKS.sub(" ", str(text)).encode("utf-8", "backslashreplace").decode("utf-8")


def cell(value) -> str:
    """A CSV cell or a Markdown line a spreadsheet reads as text: one line, no leading formula sign."""
    text = one_line(value)
    return "'" + text if text.lstrip(" ").startswith(FORMULA_START) else text


FRAME_MAGIC = b"inferlab-frame"
_FRAME_HEADER_BYTES = 128


class FrameReader:
    """Parse the runner's result stream as it arrives, with every record bounded before it is kept.

    The stream is a sequence of records, each a header line `inferlab-frame NAME LENGTH\\n` followed by exactly
    LENGTH bytes. `limits` maps each accepted NAME to its largest LENGTH. A later record of a name replaces
    the earlier one (the runner re-sends its report after every cell; the last complete one counts); a record
    cut short by the end of the stream is dropped. Anything else (an unknown name, a length past its limit,
    a header that is not one, more than `_FRAME_HEADER_BYTES` bytes without a line break) sets `error` and
    the rest of the stream is read and discarded. Memory held: at most the largest limit plus one header."""

    def __init__(self, limits: dict):
        self.limits = dict(limits)
        self.frames: dict = {}
        self.error: str | None = None
        self._buf = bytearray()
        self._name: str | None = None
        self._length = 0

    def feed(self, data: bytes) -> None:
        if self.error is not None:
            return
        self._buf += data
        while self.error is None:
            if self._name is None:
                end = self._buf.find(b"\n", 0, _FRAME_HEADER_BYTES)
                if end < 0:
                    if len(self._buf) >= _FRAME_HEADER_BYTES:
                        self._fail("a record header that is not one")
                    return
                parts = bytes(self._buf[:end]).split(b" ")
                if len(parts) != 3 or parts[0] != FRAME_MAGIC or not parts[2].isdigit() or len(parts[2]) > 15:
                    self._fail("a record header that is not one")
                    return
                name = parts[1].decode("ascii", "replace")
                if name not in self.limits:
                    self._fail(f"an unknown record ({one_line(name)[:40]!r})")
                    return
                length = int(parts[2])
                if length > self.limits[name]:
                    self._fail(f"{name} larger than {self.limits[name] / 1e6:g} MB")
                    return
                del self._buf[:end + 1]
                self._name, self._length = name, length
            if len(self._buf) < self._length:
                return
            self.frames[self._name] = bytes(self._buf[:self._length])
            del self._buf[:self._length]
            self._name = None

    def _fail(self, why: str) -> None:
        self.error = f"result stream: {why}"
        self._buf = bytearray()
        self._name = None
