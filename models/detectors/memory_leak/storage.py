"""A GPU's memory history: its per-minute peaks, compact, and its process's track."""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from ..base import (
    StateError,
    load_fields,
    save_fields,
)
from .constants import STEP, WHOLE


class Peaks:
    """A GPU's per-minute memory peaks, oldest first, in two parts: a head of doubles (none, usually), then a
    tail of the oldest of the rest as a double and each next one as its step from the one before in a 32-bit
    integer (4 bytes a minute instead of 8; memory is counted in whole bytes). A peak that is not a whole number
    below 2**53 goes to the head, and one a step beyond 32 bits from the one before (a process loading its model
    can take tens of GiB in a minute) starts the tail again: the tail before it moves to the head, which so holds
    only minutes from the last such peak back and empties as they are forgotten. Every peak reads back as the
    float it came as."""

    __slots__ = ("head", "first", "steps")

    def __init__(self, values: Sequence[float] = ()) -> None:
        self.head: array | None = None           # doubles, while a peak steps could not hold is kept
        self.first: float | None = None          # the tail's oldest peak (None: no tail)
        self.steps = array("i")
        for v in values:
            self.append(v)

    def append(self, v: float) -> None:
        whole = (type(v) is int or v.is_integer()) and -WHOLE < v < WHOLE
        if self.first is not None:
            if whole:
                step = int(v - self.last())
                if -STEP <= step < STEP:
                    self.steps.append(step)
                    return
            self.head = self.doubles()           # the tail moves to the head
            self.first, self.steps = None, array("i")
        if whole:
            self.first = float(v)
        elif self.head is None:
            self.head = array("d", [v])
        else:
            self.head.append(v)

    def keep(self, n: int) -> None:
        """Forget all but the newest ``n``."""
        k = len(self) - n
        if k <= 0:
            return
        if self.head is not None:
            h = len(self.head)
            if k < h:
                del self.head[:k]
                return
            self.head, k = None, k - h
        if k and self.first is not None:
            if k > len(self.steps):
                self.first, self.steps = None, array("i")
            else:
                self.first += sum(self.steps[:k])
                del self.steps[:k]

    def doubles(self) -> array:
        """Every peak, oldest first, as doubles."""
        out = array("d") if self.head is None else array("d", self.head)
        if self.first is not None:
            out.extend(accumulate(self.steps, initial=self.first))
        return out

    def last(self) -> float:
        if self.first is not None:
            return self.first + sum(self.steps)
        assert self.head is not None
        return self.head[-1]

    def __len__(self) -> int:
        return (0 if self.head is None else len(self.head)) + (0 if self.first is None else 1 + len(self.steps))

@dataclass(slots=True)
class MemoryTrack:
    """One GPU's memory, per minute, since its current process started."""

    minute: int                     # the minute being filled
    peak: float                     # the highest value of that minute so far
    minutes: Peaks                  # the last HISTORY_MINUTES complete minutes' peaks, oldest first
    loads: array                    # the last LOAD_MINUTES of those minutes' mean utilization, doubles (a KV cache
                                    # follows the load)
    util_sum: float                 # utilization summed over the minute being filled
    util_n: int
    pid: int | None
    since: float                    # ts of the first sample of this process
    total: float                    # the GPU's memory
    restarted_at: float | None = None   # ts this process replaced another one (without a process: ts the last
                                        # one died)
    last: float = 0.0               # its memory at its latest sample
    job: str | None = None          # the job it ran for

    def to_state(self) -> dict:
        return {**save_fields(self), "minutes": self.minutes.doubles().tolist(), "loads": self.loads.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> MemoryTrack:
        # last and job came with the endings told as they happened: a track saved before takes its minute's peak
        m = load_fields(cls, {"last": state.get("peak", 0.0), "job": None, **state}, "memory track")
        try:
            m.minutes, m.loads = Peaks(state["minutes"]), array("d", state["loads"])
        except (TypeError, AttributeError):
            raise StateError("memory track: saved minutes and loads must be lists of numbers") from None
        return m
