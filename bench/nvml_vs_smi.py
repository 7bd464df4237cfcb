"""The collector's readings against nvidia-smi's, field by field, on a machine with a real NVIDIA GPU.

    .venv/bin/python bench/nvml_vs_smi.py [--seconds 60]

For --seconds, nvidia-smi samples every GPU once a second (``--query-gpu=... --format=csv,noheader,nounits
-lms 1000``) while the collector's NVML reader samples every second too; each collector sample is paired with
the nvidia-smi line of the same GPU nearest in time. Per field: the pairs compared, the median and the largest
difference, and whether the median is within the field's tolerance (sampling windows differ: utilization is
a mean over the interval for the collector and NVML's last period for nvidia-smi). Exit code 0 when every
field agrees, 1 otherwise, 2 without a driver or nvidia-smi. PCIe throughput and processes have no
nvidia-smi --query-gpu counterpart and are not compared.
"""
from __future__ import annotations

import argparse
import bisect
import shutil
import statistics
import subprocess
import sys
import threading
import time

# telemetry field, nvidia-smi query field, scale to the telemetry's unit, tolerance (absolute, relative)
FIELDS = (
    ("util_pct", "utilization.gpu", 1.0, (10.0, 0.0)),
    ("mem_util_pct", "utilization.memory", 1.0, (10.0, 0.0)),
    ("mem_used_bytes", "memory.used", 2**20, (64 * 2**20, 0.02)),
    ("mem_total_bytes", "memory.total", 2**20, (2**20, 0.0)),
    ("power_w", "power.draw", 1.0, (10.0, 0.05)),
    ("power_limit_w", "enforced.power.limit", 1.0, (1.0, 0.0)),
    ("temp_c", "temperature.gpu", 1.0, (2.0, 0.0)),
    ("sm_clock_mhz", "clocks.sm", 1.0, (30.0, 0.05)),
    ("sm_clock_max_mhz", "clocks.max.sm", 1.0, (1.0, 0.0)),
    ("ecc_dbe_total", "ecc.errors.uncorrected.volatile.total", 1.0, (0.0, 0.0)),
)


def smi(seconds: float, out: list) -> None:
    """nvidia-smi once a second for ``seconds``: (time, uuid, {query field: text}) per GPU and line."""
    query = ["uuid"] + [f for _, f, _, _ in FIELDS]
    proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv,noheader,nounits",
                             "-lms", "1000"], stdout=subprocess.PIPE, text=True)
    end = time.time() + seconds
    assert proc.stdout is not None
    for line in proc.stdout:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(query):
            out.append((time.time(), parts[0], dict(zip(query[1:], parts[1:]))))
        if time.time() > end:
            break
    proc.terminate()


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:                 # "[N/A]", "[Not Supported]"
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    from gpufleet.collectors.nvml import NvmlReader, NvmlUnavailable
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi is not on PATH", file=sys.stderr)
        return 2
    reader = NvmlReader(slow_interval_s=1.0)
    try:
        reader.open()
    except NvmlUnavailable as err:
        print(err, file=sys.stderr)
        return 2
    reader.start()
    print(f"driver {reader.versions()['driver']}, {len(reader.physical)} GPUs; sampling {args.seconds:g} s",
          file=sys.stderr)
    lines: list = []
    thread = threading.Thread(target=smi, args=(args.seconds, lines))
    thread.start()
    ours = []
    end = time.time() + args.seconds
    while time.time() < end:
        t = time.time()
        ours += [(t, g) for g in reader.read() if g["parent_uuid"] is None]
        time.sleep(max(0.0, 1.0 - (time.time() - t)))
    thread.join()
    reader.close()
    by_gpu: dict[str, list] = {}
    for t, uuid, values in lines:
        by_gpu.setdefault(uuid, []).append((t, values))
    print("| field | nvidia-smi | pairs | median difference | largest | tolerance | agrees |\n"
          "|---|---|---:|---:|---:|---|---|")
    failed = 0
    for name, query, scale, (absolute, relative) in FIELDS:
        diffs, pairs = [], 0
        for t, g in ours:
            theirs = by_gpu.get(g["uuid"], [])
            if not theirs or g[name] is None:
                continue
            times = [x for x, _ in theirs]
            i = min(range(max(0, bisect.bisect(times, t) - 1), min(len(theirs), bisect.bisect(times, t) + 1)),
                    key=lambda k: abs(times[k] - t))
            value = number(theirs[i][1][query])
            if value is None:
                continue
            pairs += 1
            diffs.append((abs(g[name] - value * scale), value * scale))
        if not diffs:
            print(f"| {name} | {query} | 0 | - | - | - | not compared |")
            continue
        median = statistics.median(d for d, _ in diffs)
        level = statistics.median(v for _, v in diffs)
        limit = max(absolute, relative * level)
        ok = median <= limit
        failed += not ok
        print(f"| {name} | {query} | {pairs} | {median:g} | {max(d for d, _ in diffs):g} | {limit:g} | "
              f"{'yes' if ok else 'NO'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
