"""The embedded mode: an in-process bus from a message source through the pipeline into the store.

A source yields ``(source, payload)`` pairs: ``file.jsonl:42`` and a line of
JSON, or ``sim:7`` and a message dict. Each is validated and processed in
order; every ``DRAIN_EVERY`` messages what processing produced is handed to
the sink and to the event writer. At the end every open window is flushed.
"""
from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterable, Iterator

from .pipeline import Pipeline
from .sink import Sink


class FileSource:
    """Lines of a JSONL file (``.gz`` too), with ``name:line`` as source; blank lines are skipped.

    Whatever a line holds is the pipeline's to judge (and dead-letter). A file that cannot be read on to its
    end (a gzip stream cut short, a read error) ends the lines where it breaks, and ``error`` says where and
    why: what was read before is kept, and the caller reports the error once it has finished with it."""

    def __init__(self, path: str):
        self.path = path
        self.error: str | None = None
        self.lines = 0

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        opener = gzip.open if self.path.endswith(".gz") else open
        try:
            with opener(self.path, "rb") as f:
                for lineno, line in enumerate(f, 1):
                    self.lines = lineno
                    if line.strip():
                        yield f"{self.path}:{lineno}", line
        except (OSError, EOFError, zlib.error) as err:
            self.error = f"{self.path}: unreadable after line {self.lines}: {err}"


def file_source(path: str) -> FileSource:
    return FileSource(path)


def dict_source(messages: Iterable[dict], name: str = "sim") -> Iterator[tuple[str, dict]]:
    for i, m in enumerate(messages):
        yield f"{name}:{i}", m


class JsonLines:
    """Writes dicts as JSON lines to a path (``-`` for none)."""

    def __init__(self, path: str | None):
        self.f: io.TextIOBase | None = open(path, "w", encoding="utf-8") if path else None
        self.count = 0

    def write(self, items: list[dict]) -> None:
        self.count += len(items)
        if self.f is not None:
            for item in items:
                self.f.write(json.dumps(item, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


DRAIN_EVERY = 512          # messages between two hand-overs of what processing produced


def run(source: Iterable[tuple[str, str | bytes | dict]], pipeline: Pipeline, sink: Sink | None,
        events: JsonLines | None = None, dead: JsonLines | None = None,
        progress: Callable[[int], None] | None = None) -> int:
    """Push every message through ``pipeline`` into ``sink``, then flush every open window; returns the number of
    messages."""
    out = pipeline.out

    def drain(final: bool) -> None:
        rows, evs, dls = out.drain()
        out.done.clear()              # references of a log's inputs: none here
        if events is not None:
            events.write(evs)
        if dead is not None:
            dead.write(dls)
        if sink is not None:
            sink.add(rows, evs, dls)
            if final or sink.due():
                sink.flush()

    n = 0
    for n, (src, payload) in enumerate(source, 1):
        pipeline.submit(payload, src)
        if n % DRAIN_EVERY == 0:
            drain(False)
            if progress is not None:
                progress(n)
    pipeline.flush()
    drain(True)
    if progress is not None:
        progress(n)
    return n
