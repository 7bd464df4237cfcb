"""A job's windows: each GPU's samples, and its lockstep history (compact, saved by name)."""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Self

from ..base import (
    NAN,
    StateError,
    Window,
    add_run,
    forget_runs,
    runs_of,
)
from .constants import LOCKSTEP_EPOCHS, TENTHS_MAX


class JobWindow(Window):
    """One GPU's samples in a job's window: time, utilization, clock and power (shares of the GPU's maximum) and
    temperature in the window's array; the throttle reasons, which seldom change, as runs (a value, NaN where not
    reported, and how many samples in a row had it: a double a sample held 480 bytes a GPU in a minute sampled
    every second, a run 16, one or two a window). The columns read and saved are as before: ``COLUMNS``, the
    throttle reasons as integers in saved state."""

    __slots__ = ("throttle",)
    FIELDS = ("ts", "util", "clock", "power", "temp")
    COLUMNS = ("ts", "util", "clock", "power", "throttle", "temp")

    def __init__(self) -> None:
        super().__init__()
        self.throttle: list = []              # value, count; two runs in a row differ in value

    def append(self, ts: float, util: float | None, clock: float | None, power: float | None,  # type: ignore[override]
               throttle: float | None, temp: float | None) -> None:
        super().append(ts, util, clock, power, temp)
        add_run(self.throttle, NAN if throttle is None else float(throttle))   # a double, as the array held it

    def _throttles(self, i: int, j: int) -> list:
        """The throttle reasons of samples ``i`` to ``j`` (past the last)."""
        return runs_of(self.throttle, 2, 0, i, j)

    def columns(self, i: int, j: int) -> list[list[float]]:
        """Samples ``i`` to ``j`` (past the last), one list per field of ``COLUMNS``."""
        ts, util, clock, power, temp = super().columns(i, j)
        return [ts, util, clock, power, self._throttles(i, j), temp]

    def drop_through(self, cutoff: float) -> int:
        n = Window.drop_through(self, cutoff)
        forget_runs(self.throttle, 2, n)
        return n

    def to_state(self) -> dict:
        saved = super().to_state()
        ts, util, clock, power, temp = (saved[name] for name in self.FIELDS)
        throttle = [None if v != v else int(v) for v in self._throttles(0, len(self))]
        return {"ts": ts, "util": util, "clock": clock, "power": power, "throttle": throttle, "temp": temp}

    @classmethod
    def from_state(cls, state: dict, what: str) -> Self:
        wrong = StateError(f"{what}: a saved window needs the columns {list(cls.COLUMNS)}")
        try:
            w = super().from_state(state, what)
            throttle = state["throttle"]
            if not isinstance(throttle, list) or len(throttle) != len(w):
                raise wrong
            for v in throttle:
                add_run(w.throttle, NAN if v is None else float(v))
        except (StateError, KeyError, TypeError, ValueError):
            raise wrong from None
        return w

W_THROTTLE = JobWindow.COLUMNS.index("throttle")

class Epochs:
    """A job's lockstep history: its last :data:`LOCKSTEP_EPOCHS` epochs, each the GPUs' names (one tuple shared
    by the epochs that saw the same GPUs) and their utilizations in that order, every epoch's in one array (an
    array per epoch cost its header per job and epoch: 2.5 kB for a single-GPU job's 20 epochs, now 0.4 kB). The
    utilizations are kept to a tenth of a point, so the array holds 16-bit tenths (2 bytes a value, not 8), each
    reading back as the double it came as; a value that is not a tenth within 16 bits (none from the detector)
    turns the array into doubles. Iterated, it gives each epoch's ``(names, utilizations)``, oldest first."""

    __slots__ = ("names", "values")

    def __init__(self) -> None:
        self.names: list[tuple[str, ...]] = []
        self.values: array = array("h")      # tenths ("h"), or doubles ("d") once a value is not a tenth

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[tuple[tuple[str, ...], Sequence[float]]]:
        return self._from(self.names, 0)

    def last(self, n: int) -> list[tuple[tuple[str, ...], Sequence[float]]]:
        """The last ``n`` epochs (fewer when fewer are kept), as iteration gives them."""
        names = self.names[-n:]
        return list(self._from(names, len(self.values) - sum(map(len, names))))

    def _from(self, names: list[tuple[str, ...]], at: int) -> Iterator[tuple[tuple[str, ...], Sequence[float]]]:
        """The epochs of ``names``, the first of them at ``at`` in the values."""
        values = self.values
        tenths = values.typecode == "h"
        for epoch in names:
            end = at + len(epoch)
            yield epoch, [v / 10 for v in values[at:end]] if tenths else values[at:end]
            at = end

    def append(self, names: tuple[str, ...], utils: Iterable[float]) -> None:
        if self.names and self.names[-1] == names:
            names = self.names[-1]
        self.names.append(names)
        if self.values.typecode == "h":
            utils = list(utils)
            tenths = [round(v * 10) if v == v and abs(v) < TENTHS_MAX else 0 for v in utils]
            if all(t / 10 == v for t, v in zip(tenths, utils)):
                self.values.extend(tenths)
            else:
                self.values = array("d", [t / 10 for t in self.values])
                self.values.extend(utils)
        else:
            self.values.extend(utils)
        if len(self.names) > LOCKSTEP_EPOCHS:
            del self.values[:len(self.names.pop(0))]

    def clear(self) -> None:
        self.names, self.values = [], array("h")

def history_state(history: list[dict[str, float]]) -> dict:
    """The lockstep history saved compactly: each GPU named once, utilization to a tenth of a point."""
    gpus = sorted({u for epoch in history for u in epoch})
    return {"gpus": gpus, "utils": [[None if u not in epoch else round(epoch[u], 1) for u in gpus]
                                    for epoch in history]}

def history_from_state(saved: dict | None) -> list[dict[str, float]]:
    if not saved:
        return []
    gpus = saved["gpus"]
    return [{u: v for u, v in zip(gpus, utils) if v is not None} for utils in saved["utils"]]
