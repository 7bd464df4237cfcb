"""The job sample: what the node stage hands the job stage for one job at one tick (a compact wire format).

``{"job", "node", "ts", "tenant", "pool", "interval", "gpus"}`` where each GPU is a list of
``JOB_GPU_FIELDS`` (read through the positions named below), or ``{"job", "node", "ts", "leave": True}``
when the job is gone from the node.
"""
from __future__ import annotations

from operator import attrgetter

from .output import Output

# fields of one GPU in a job sample, in order (a compact wire format: a list per GPU, read through the
# positions named below)
JOB_GPU_FIELDS = ("uuid", "index", "util_pct", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w",
                  "temp_c", "throttle_reasons", "mem_used_bytes", "mem_total_bytes")
(UUID, INDEX, UTIL, CLOCK, CLOCK_MAX, POWER, POWER_LIMIT, TEMP, THROTTLE, MEM_USED, MEM_TOTAL) = \
    range(len(JOB_GPU_FIELDS))
_job_gpu = attrgetter(*JOB_GPU_FIELDS)


def job_samples(msg, out: Output, known: set[str], flags=None) -> set[str]:
    """The job samples of one released node message, and leave marks for jobs gone from the node.

    ``flags`` (models.detectors.NodeFlags) carry what the node's detectors know that the job stage's must
    respect: ``io`` when the job is starved of input on this node, ``quiet`` its GPUs that just restarted."""
    by_job: dict[str, list] = {}
    tenants = {}
    for g in msg.gpus:
        if g.job is not None:
            by_job.setdefault(g.job, []).append(list(_job_gpu(g)))
            tenants[g.job] = g.tenant
    for job, gpus in by_job.items():
        sample = {"job": job, "node": msg.node, "ts": msg.ts, "tenant": tenants[job], "pool": msg.pool,
                  "interval": msg.interval_s, "gpus": gpus}
        if flags is not None:
            if job in flags.starved:
                sample["io"] = True
            quiet = sorted(g[UUID] for g in gpus if g[UUID] in flags.quiet)
            if quiet:
                sample["quiet"] = quiet
        out.job_samples.append(sample)
    for job in known.difference(by_job):
        out.job_samples.append({"job": job, "node": msg.node, "ts": msg.ts, "leave": True})
    return set(by_job)


def silent_leaves(node: str, ts: float, jobs: set[str], out: Output) -> None:
    """Leave marks for the jobs of a node that stopped reporting (its last sample at ``ts``)."""
    for job in sorted(jobs):
        out.job_samples.append({"job": job, "node": node, "ts": ts, "leave": True, "silent": True})


_NUMBER = (int, float)
_GPU_NUMBERS = range(1, len(JOB_GPU_FIELDS))


def _finite(v) -> bool:
    return type(v) in _NUMBER and v - v == 0          # not a bool, not NaN nor infinite


def invalid_job_sample(item) -> str | None:
    """Why ``item`` is not a job sample or leave mark (the by-job topic is read like any input), or None."""
    if type(item) is not dict:
        return f"(item): a job sample is an object, not {type(item).__name__}"
    for name in ("job", "node"):
        v = item.get(name)
        if type(v) is not str or not v:
            return f"{name}: a non-empty string is due"
    if not _finite(item.get("ts")):
        return "ts: a finite number is due"
    if item.get("leave") is not None:
        if item.get("silent") not in (None, True):
            return "silent: true or nothing is due"
        return None if item["leave"] is True else "leave: true is due"
    for name in ("tenant", "pool"):
        if item.get(name) is not None and type(item[name]) is not str:
            return f"{name}: a string or null is due"
    interval = item.get("interval")
    if interval is not None and not (_finite(interval) and interval > 0):
        return "interval: a positive number or null is due"
    gpus = item.get("gpus")
    if type(gpus) is not list:
        return "gpus: a list is due"
    for i, g in enumerate(gpus):
        if type(g) is not list or len(g) != len(JOB_GPU_FIELDS) or type(g[UUID]) is not str:
            return f"gpus.{i}: a list of {len(JOB_GPU_FIELDS)} values ({', '.join(JOB_GPU_FIELDS)}) is due"
        for at in _GPU_NUMBERS:
            if g[at] is not None and not _finite(g[at]):
                return f"gpus.{i}.{JOB_GPU_FIELDS[at]}: a finite number or null is due"
    quiet = item.get("quiet")
    if quiet is not None and (type(quiet) is not list or not all(type(u) is str for u in quiet)):
        return "quiet: a list of GPU uuids is due"
    return None
