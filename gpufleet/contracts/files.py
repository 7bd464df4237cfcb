"""Files a user hands to gpufleet (settings, routing files, price books, policies, models, label files), read so
that whatever they hold ends in one line naming what is wrong, never a traceback or a hang.

A file is read whole, at most :data:`MAX_FILE_BYTES` (a configuration of more is a mistake, and parsing one
could take minutes), as UTF-8, then parsed; :class:`FileError` says which of those failed and where. The
caller adds the setting or argument that named the file.

This module depends on the standard library only: the collector (the lightest install) reads files too.
"""
from __future__ import annotations

import json
import os
import stat
import tomllib

MAX_FILE_BYTES = 16 << 20


class FileError(ValueError):
    """A file that cannot be used: one line, starting with its path."""


def read_text(path: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text: it must exist, be a regular file of at most ``max_bytes`` and be UTF-8."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise FileError(f"{path}: is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):           # a FIFO or a device would block or never end
            raise FileError(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise FileError(f"{path}: {st.st_size:,} bytes, more than the {max_bytes:,} a file of this kind may have")
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise FileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FileError(f"{path}: is a directory, not a file") from None
    except OSError as err:
        raise FileError(f"{path}: cannot be read: {err.strerror or type(err).__name__}") from None
    if len(data) > max_bytes:
        raise FileError(f"{path}: more than the {max_bytes:,} bytes a file of this kind may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise FileError(f"{path}: not UTF-8 text (line {line}, byte {err.start})") from None


def read_toml(path: str, max_bytes: int = MAX_FILE_BYTES) -> dict:
    """The file as TOML (a table)."""
    text = read_text(path, max_bytes)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise FileError(f"{path}: not TOML: {err}") from None
    except RecursionError:
        raise FileError(f"{path}: not TOML gpufleet reads: arrays or tables nested too deeply") from None


def read_json(path: str, max_bytes: int = MAX_FILE_BYTES) -> object:
    """The file as one JSON value."""
    return parse_json(read_text(path, max_bytes), path)


def parse_json(text: str, where: str) -> object:
    """One JSON value from text; ``where`` (a path, or ``path:line``) starts the error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise FileError(f"{where}: not JSON: {err.msg} (line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        raise FileError(f"{where}: not JSON gpufleet reads: nested too deeply") from None
    except ValueError as err:            # e.g. a number with more digits than Python converts
        raise FileError(f"{where}: not JSON gpufleet reads: {str(err).splitlines()[0][:200]}") from None
