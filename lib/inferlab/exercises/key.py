"""The instructor key: the secret that seeds per-student variants (HMAC-SHA-256, see `core.variant_seed`).

One key per course, created by the first `make student ROSTER=... ASSIGNMENT=...` (`ensure_key`) as
`.instructor/variant.key` in the checkout (ignored by git; outside build/student/, which is handed out),
mode 0600 in a 0700 folder. Whoever holds it can compute every student's variant, and so their expected
answers; whoever loses it can no longer grade the variants handed out. Keep it, back it up, never commit it.
The file holds 64 hex digits (32 random bytes) and a newline.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

DEFAULT_KEY_PATH = Path(".instructor") / "variant.key"
KEY_BYTES = 32


class InstructorKeyError(ValueError):
    """The key file is missing, unreadable, malformed or readable by others (one line)."""


def create_key(path=DEFAULT_KEY_PATH) -> bytes:
    """Write a new random key to `path` (mode 0600; its folder made 0700 if created). Refuses to overwrite."""
    path = Path(path)
    if path.parent != Path("") and not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise InstructorKeyError(f"instructor key {str(path)!r} exists already; it is not overwritten") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
    os.chmod(path, 0o600)  # whatever the umask
    return key


def load_key(path=DEFAULT_KEY_PATH) -> bytes:
    """The key in `path`; InstructorKeyError when it is missing, not a regular file, readable by group or others
    (it must be 0600 or stricter), or not 64 hex digits."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InstructorKeyError(f"instructor key {str(path)!r} does not exist; `make student ROSTER=... ASSIGNMENT=...` "
                        "creates it (the variants handed out were seeded with the key that build used)") from None
    except OSError as exc:
        raise InstructorKeyError(f"instructor key {str(path)!r} cannot be opened ({exc.strerror}); expected a regular "
                        "file of mode 0600") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InstructorKeyError(f"instructor key {str(path)!r} is not a regular file")
        if st.st_mode & 0o077:
            raise InstructorKeyError(f"instructor key {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}; allowed: 0600 "
                            f"or stricter (chmod 600 {path})")
        text = fh.read(200).decode("ascii", errors="replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise InstructorKeyError(f"instructor key {str(path)!r} is not {2 * KEY_BYTES} hex digits")
    return key


def ensure_key(path=DEFAULT_KEY_PATH) -> tuple:
    """(key, created): the key in `path`, created first when there is none."""
    if Path(path).exists() or Path(path).is_symlink():
        return load_key(path), False
    return create_key(path), True
