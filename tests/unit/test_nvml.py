"""The NVML reader on the fake NVML: fields, robustness, MIG, XIDs, costly calls off the tick."""
import time

import pytest

from gpufleet.collectors import fake_nvml
from gpufleet.collectors.fake_nvml import FakeNVML, missing_library
from gpufleet.collectors.nvml import ALL_FIELDS, NvmlReader, NvmlUnavailable
from gpufleet.collectors.telemetry import Gpu


def opened(lib):
    """A reader over ``lib``, open for the test, closed after it."""
    r = NvmlReader(lib, slow_interval_s=0.05)
    r.open()
    yield r
    r.close()


@pytest.fixture
def reader():
    yield from opened(FakeNVML(gpus=4, pcie_delay_s=0.0))


def test_fake_raises_pynvml_shaped_errors():
    err = fake_nvml.NVMLError(fake_nvml.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(err, fake_nvml.NVMLError_NotSupported) and err.value == 3 and str(err) == "Not Supported"
    assert isinstance(fake_nvml.NVMLError_GpuIsLost(), fake_nvml.NVMLError)
    import pynvml
    real = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    assert type(real).__name__ == type(fake_nvml.NVMLError(15)).__name__ == "NVMLError_GpuIsLost"


def test_every_field_is_read_and_schema_valid(reader):
    reader.start()
    gpus = reader.read()
    assert len(gpus) == 4
    for g in gpus:
        assert set(ALL_FIELDS) <= set(g)
        assert all(g[f] is not None for f in ALL_FIELDS), [f for f in ALL_FIELDS if g[f] is None]
        Gpu.model_validate(g | {"tenant": None, "job": None, "attribution": None})
    assert gpus[0]["processes"][0]["pid"] == 4000


def test_idle_bit_is_masked_out(reader):
    reader.lib.devices[0].util = 1.0
    reader.lib.devices[1].util = 99.0
    g0, g1 = reader.read()[:2]
    assert g0["throttle_reasons"] == 0 and g1["throttle_reasons"] == 0x4


def test_utilization_is_averaged_over_the_interval():
    clock = [1000.0]
    lib = FakeNVML(gpus=1, pcie_delay_s=0, clock=lambda: clock[0])
    lib.devices[0].trace = lambda t: (t - 1000.0) * 60      # climbs from 0 to 60% over the second
    r = NvmlReader(lib)
    r.open()
    r.read()
    clock[0] = 1001.0
    (g,) = r.read()
    # five samples at 200 ms read 12, 24, ..., 60: their mean, not the point value 60 at the tick
    assert g["util_pct"] == pytest.approx(36.0)


@pytest.fixture
def ticking_reader():
    """A reader whose fake NVML's clock moves a second at every look: each read finds fresh utilization samples
    (two reads within one 200 ms sample would fall back to one more call, and make call counts depend on timing)."""
    now = [1.7e9]

    def clock():
        now[0] += 1.0
        return now[0]
    yield from opened(FakeNVML(gpus=4, pcie_delay_s=0.0, clock=clock))


def test_a_field_the_gpu_cannot_report_is_null_and_not_asked_again(ticking_reader):
    reader = ticking_reader
    reader.lib.unsupported_on[1] = {"nvmlDeviceGetTemperature"}
    first = reader.read()
    assert first[1]["temp_c"] is None and first[0]["temp_c"] is not None and first[1]["power_w"] is not None
    calls = reader.lib.calls
    reader.read()
    assert reader.lib.calls - calls == calls_per_read(reader) - 1


def calls_per_read(reader):
    before = reader.lib.calls
    reader.lib.unsupported_on.pop(1, None)
    for d in reader.devices:
        d.unsupported.clear()
    reader.read()
    reader.lib.unsupported_on[1] = {"nvmlDeviceGetTemperature"}
    n = reader.lib.calls - before
    reader.read()
    return n


def test_a_lost_gpu_is_reported_and_the_others_go_on(reader, caplog):
    reader.start()
    reader.lib.lose(2)
    gpus = reader.read()
    lost = gpus[2]
    assert lost["uuid"] == reader.devices[2].uuid and lost["index"] == 2
    assert lost["util_pct"] is None and lost["power_w"] is None and lost["xid_events"] == [79]
    assert all(g["util_pct"] is not None for i, g in enumerate(gpus) if i != 2)
    assert "is lost" in caplog.text
    again = reader.read()
    assert again[2]["xid_events"] == [] and again[2]["power_w"] is None and len(again) == 4


def test_xids_are_reported_once_with_the_next_sample(reader):
    reader.lib.xid(0, 48)
    reader.lib.xid(0, 63)
    reader.lib.xid(3, 31)
    first = reader.read()
    assert first[0]["xid_events"] == [48, 63] and first[3]["xid_events"] == [31] and first[1]["xid_events"] == []
    assert reader.read()[0]["xid_events"] == []


def test_mig_instances_are_sampled_with_their_parent_physical_values():
    lib = FakeNVML(gpus=2, mig={1: ["3g.40gb", "4g.40gb"]}, pcie_delay_s=0)
    r = NvmlReader(lib)
    r.open()
    gpus = r.read()
    assert [g["mig_profile"] for g in gpus] == [None, "3g.40gb", "4g.40gb"]
    parent = lib.devices[1]
    for g in gpus[1:]:
        assert g["parent_uuid"] == parent.uuid and g["uuid"].startswith("MIG-") and g["index"] == 1
        assert g["util_pct"] is None and g["mem_util_pct"] is None          # NVML has none for MIG
        assert g["power_w"] == pytest.approx(70 + 6 * parent.util, abs=0.01) and g["temp_c"] is not None
        assert g["mem_total_bytes"] == 40 << 30
    lib.xid(1, 43, gpu_instance=2)
    assert [g["xid_events"] for g in r.read()] == [[], [], [43]]
    r.close()


def test_costly_calls_stay_off_the_tick():
    lib = FakeNVML(gpus=8, pcie_delay_s=0.02)       # each PCIe counter blocks 20 ms, as NVML does
    r = NvmlReader(lib, slow_interval_s=0.5)
    r.open()
    r.start()                                      # reads the slow fields once, then in its thread
    t = time.perf_counter()
    gpus = r.read()
    elapsed = time.perf_counter() - t
    r.close()
    assert all(g["pcie_rx_bytes_per_s"] is not None for g in gpus)
    assert elapsed < 0.1, f"a tick took {elapsed:.3f} s: 8 GPUs x 2 PCIe counters would take 0.32 s inline"


def test_no_driver_is_one_clear_error():
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        NvmlReader(missing_library()).open()


def test_a_read_that_fails_for_another_reason_is_null_counted_and_exported(reader):
    from gpufleet.collectors.daemon import Metrics
    reader.lib.timing_out_on[0] = {"nvmlDeviceGetPowerUsage"}
    gpus = reader.read()
    assert gpus[0]["power_w"] is None and gpus[1]["power_w"] is not None
    reader.read()
    assert reader.errors == 2                       # asked again next tick: a timeout is not "unsupported"
    metrics = Metrics()

    class Publisher:
        delivered = failures = 0
        spool = type("Spool", (), {"dropped_total": 0, "pending": 0, "size": 0})()
    metrics.update(Publisher(), reader)
    assert metrics.read_errors._value.get() == 2
