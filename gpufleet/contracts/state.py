"""Saved processor state: typed values, saved and restored by field name, under a version.

A processor's state outlives the process (the distributed mode keeps it in a
changelog table). It is saved as plain JSON-able dicts keyed by field name,
never as lists read by position, and the root of each saved value carries a
version: a state of another version is refused with a message saying what to
do, never read by guesswork.

In a changelog a saved value is that JSON without spaces, compressed with zlib's
fastest level (:func:`pack`): a node's windows and histories are long runs of
similar numbers, which it makes a quarter of the size for a fifth more time than
the JSON encoding alone. :func:`unpack` reads both that and the plain JSON that
earlier versions saved.
"""
from __future__ import annotations

import dataclasses
import json
import zlib
from typing import Any, TypeVar

T = TypeVar("T")


class StateError(ValueError):
    """Saved state that this gpufleet cannot read."""


def check_version(what: str, state: Any, version: int) -> dict:
    """``state`` as a dict, if it carries ``version``; otherwise a :class:`StateError` naming both versions."""
    found = state.get("v") if isinstance(state, dict) else None
    if found != version:
        raise StateError(
            f"{what}: saved state has version {found!r}, this gpufleet reads version {version}; "
            "start the workers with a new worker.app_id (or delete the <app_id>-nodes/-jobs changelog topics) "
            "to rebuild state from the telemetry topic")
    return state


def pack(state: Any) -> bytes:
    """A saved value for a changelog: compact JSON, compressed with zlib's fastest level."""
    return zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 1)


def unpack(raw: bytes, what: str) -> Any:
    """The state a changelog value holds, packed by :func:`pack` or saved as plain JSON (a JSON object or
    array starts with ``{`` or ``[``, a zlib stream never does); anything else is a :class:`StateError`."""
    try:
        return json.loads(raw if raw[:1] in (b"{", b"[") else zlib.decompress(raw))
    except (zlib.error, ValueError) as e:
        raise StateError(f"{what}: saved state is neither packed nor plain JSON ({e}); start the workers with a "
                         "new worker.app_id to rebuild state from the telemetry topic") from None


def save_fields(obj: Any) -> dict:
    """A flat dataclass as a dict of its fields by name."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def load_fields(cls: type[T], state: dict, what: str) -> T:
    """A flat dataclass from a dict by field name; a missing or unknown field is a :class:`StateError`."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    missing = [n for n in names if n not in state]
    unknown = [k for k in state if k not in names]
    if missing or unknown:
        raise StateError(f"{what}: saved state lacks {missing} or has unknown fields {unknown}")
    return cls(**state)
