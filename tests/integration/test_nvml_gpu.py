"""The real NVML path, on a machine with an NVIDIA driver (skipped elsewhere)."""
import json
import time

import pytest

from gpufleet.collectors.collector import Collector
from gpufleet.collectors.host import HostSampler
from gpufleet.collectors.nvml import NvmlReader, NvmlUnavailable
from gpufleet.contracts.telemetry import parse

pytestmark = pytest.mark.gpu


@pytest.fixture
def real_nvml():
    reader = NvmlReader(slow_interval_s=1.0)
    try:
        reader.open()
    except NvmlUnavailable as err:
        pytest.skip(f"no NVIDIA driver here: {err}")
    yield reader
    reader.close()


def test_real_gpus_give_valid_telemetry_and_a_cheap_tick(real_nvml):
    assert real_nvml.devices, "NVML started but found no GPU"
    real_nvml.start()
    c = Collector("gpu-test", real_nvml, HostSampler(), interval_s=1.0)
    c.collect()
    time.sleep(1.0)
    msg = parse(json.dumps(c.collect()))
    for g in msg.gpus:
        assert g.uuid.startswith(("GPU-", "MIG-")) and g.mem_total_bytes and g.power_w is not None
        if g.parent_uuid is None:
            assert g.util_pct is not None and g.sm_clock_mhz is not None
    n, start, cpu = 50, time.perf_counter(), time.process_time()
    for _ in range(n):
        c.collect()
    wall, cpu = (time.perf_counter() - start) / n, (time.process_time() - cpu) / n
    print(f"\nreal NVML, {len(msg.gpus)} devices: tick {wall * 1e3:.2f} ms wall, {cpu * 1e3:.2f} ms CPU, "
          f"{cpu / len(msg.gpus) * 1e6:.0f} µs CPU per GPU")
    assert wall < 0.5


def test_a_minute_of_readings_agrees_with_nvidia_smi_field_by_field(real_nvml):
    """bench/nvml_vs_smi.py on this machine's GPUs (its table is printed)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not on PATH")
    real_nvml.close()
    script = Path(__file__).parents[2] / "bench" / "nvml_vs_smi.py"
    out = subprocess.run([sys.executable, str(script), "--seconds", "60"], capture_output=True, text=True,
                         timeout=180)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
