"""A node's windows: each GPU's samples (its job and process as runs) with its usual utilization, and the host's."""
from __future__ import annotations

from typing import Self

from ..base import (
    NAN,
    StateError,
    Window,
    add_run,
    forget_runs,
    runs_of,
)


class GpuWindow(Window):
    """One GPU's samples in a node's window: the time and utilization of each in the window's array, and what
    seldom changes kept as runs: a job (a name shared with the message's), whether the GPU held a compute process,
    its index, and how many samples in a row had them. A name per sample in a list held 8 bytes a sample and the
    two values 16 more (a minute's window sampled every second: 568 bytes of list and 960 of array a GPU); a run
    takes 32 bytes, one or two a window whatever the sampling. The columns read and saved are as before. The GPU's
    usual utilization (a moving average, the time it was last moved and the job it is of) lives beside them (a
    tuple per GPU in a dict of the node's, replaced every epoch, held about 110 bytes a GPU more)."""

    __slots__ = ("runs", "usual", "usual_at", "usual_job")
    FIELDS = ("ts", "util")
    SAVED = ("ts", "util", "has_process", "job", "gpu_index")
    # a run's values, by name: its job, has_process (1.0 when the GPU held a compute process), gpu_index, and how
    # many samples in a row had them (kept flat, RUN values a run: a run takes 32 bytes)
    JOB, HAS_PROCESS, INDEX, COUNT = range(4)
    RUN = 4

    def __init__(self) -> None:
        super().__init__()
        self.runs: list = []         # RUN values a run, oldest first; two runs in a row differ in one of the three
        self.usual: float | None = None          # the usual utilization (None: not known yet)
        self.usual_at = 0.0
        self.usual_job = ""

    def add(self, ts: float, util: float | None, has_process: float, job: str | None, gpu_index: int,
            cutoff: float) -> None:
        """One sample, and forget those at or before ``cutoff``."""
        self.data.extend((ts, NAN if util is None else util))
        add_run(self.runs, job, has_process, gpu_index)
        if self.data[0] <= cutoff:
            self.drop_through(cutoff)

    def _expand(self, field: int, i: int, j: int) -> list:
        """Field ``field`` of the runs (JOB, HAS_PROCESS, INDEX) for samples ``i`` to ``j`` (past the last)."""
        return runs_of(self.runs, self.RUN, field, i, j)

    @property
    def jobs(self) -> list[str | None]:
        """The job of each sample, oldest first."""
        return self._expand(self.JOB, 0, len(self))

    def columns(self, i: int, j: int) -> list[list[float]]:
        """Samples ``i`` to ``j`` (past the last): ts, util, has_process and gpu_index, one list each."""
        ts, util = super().columns(i, j)
        return [ts, util, self._expand(self.HAS_PROCESS, i, j), self._expand(self.INDEX, i, j)]

    def last_job(self) -> str | None:
        """The newest sample's job (the window is not empty)."""
        return self.runs[self.JOB - self.RUN]

    def _run_of(self, k: int) -> tuple[int, int]:
        """The run holding sample ``k`` (0 is the oldest; its position in ``runs``) and that run's first sample."""
        runs, first = self.runs, len(self)
        r = len(runs)
        while r:                     # from the newest run: the one asked for is usually the last
            r -= self.RUN
            first -= runs[r + self.COUNT]
            if first <= k:
                return r, first
        raise IndexError(k)

    def job_of(self, k: int) -> str | None:
        """The job of sample ``k`` (0 is the oldest)."""
        return self.runs[self._run_of(k)[0] + self.JOB]

    def since_job(self, i: int, j: int) -> int:
        """The first of samples ``i`` to ``j`` (past the last) that belong to the last one's job: the samples of
        the job before it on this GPU say nothing of this one's work."""
        runs = self.runs
        r, first = self._run_of(j - 1)
        job = runs[r + self.JOB]
        # the job's earlier runs (a process came or went)
        while first > i and r and runs[r - self.RUN + self.JOB] == job:
            r -= self.RUN
            first -= runs[r + self.COUNT]
        return max(i, first)

    def drop_through(self, cutoff: float) -> int:
        n = Window.drop_through(self, cutoff)
        forget_runs(self.runs, self.RUN, n)
        return n

    def to_state(self) -> dict:
        columns = super().to_state()
        n = len(self)
        return {"ts": columns["ts"], "util": columns["util"], "has_process": self._expand(self.HAS_PROCESS, 0, n),
                "job": self._expand(self.JOB, 0, n), "gpu_index": self._expand(self.INDEX, 0, n)}  # SAVED's order

    @classmethod
    def from_state(cls, state: dict, what: str) -> Self:
        wrong = StateError(f"{what}: a saved window needs the columns {list(cls.SAVED)}")
        try:
            w = super().from_state(state, what)
        except StateError:
            raise wrong from None
        jobs, has_process, index = cols = [state.get(name) or [] for name in ("job", "has_process", "gpu_index")]
        if not all(isinstance(c, list) and len(c) == len(w) for c in cols) or \
                not all(j is None or isinstance(j, str) for j in jobs) or \
                not all(type(v) in (int, float) for c in (has_process, index) for v in c):
            raise wrong
        for job, p, i in zip(jobs, has_process, index):
            add_run(w.runs, job, float(p), int(i))
        return w

class HostWindow(Window):
    """The host's samples in a node's window."""

    __slots__ = ()
    FIELDS = ("ts", "iowait", "disk_read", "net_rx", "cpu")
