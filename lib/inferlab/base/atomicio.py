"""Output files written whole or not at all.

`atomic_write(path)` yields a temporary path in the target's folder; the caller writes there, and
only when the block ends without an exception (Ctrl-C included) is it renamed onto `path`
(os.replace: atomic within one filesystem). An interrupted write leaves the old file, or none,
never a partial one; the temporary file is removed.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_write(path):
    """Yield a temporary Path beside `path` (same suffix, for writers that choose the format from it);
    rename it onto `path` on success, delete it on any exception or interrupt."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".part{path.suffix}", dir=path.parent or ".")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)  # mkstemp makes 0600; give the file the mode open() would have
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` whole or not at all (see module doc); return the Path."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)
