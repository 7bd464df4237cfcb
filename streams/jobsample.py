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
