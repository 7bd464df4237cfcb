"""The NVML reader through the real pynvml, over a stand-in for libnvidia-ml.so.1 (collectors/nvml_standin.py):
fields, driver branches, MIG, lost and reset GPUs, XID storms, costly calls off the tick."""
import json
import logging
import time

import pynvml
import pytest

from gpufleet.collectors import nvml_standin as si
from gpufleet.collectors.nvml import ALL_FIELDS, NvmlReader, NvmlUnavailable
from gpufleet.collectors.nvml_standin import Process, StandIn, Timing
from gpufleet.contracts.telemetry import MAX_PROCESSES, MAX_XIDS, Gpu, parse

OLD, NEW = ("R440", "R470", "R525"), ("R535", "R550", "R570")


@pytest.fixture
def standin():
    """Install a stand-in (made by the test) and always take it out again."""
    made = []

    def make(pcie_delay_s=0.0, clock=time.time, **kw):
        s = StandIn(timing=Timing(pcie_delay_s, clock), **kw)
        s.install()
        made.append(s)
        return s
    yield make
    for s in reversed(made):
        s.uninstall()


def opened(**kw) -> NvmlReader:
    r = NvmlReader(slow_interval_s=3600, **kw)       # the background pass runs once, at start(), unless asked
    r.open()
    return r


def test_the_real_pynvml_is_what_the_reader_calls(standin):
    lib = standin(gpus=2)
    r = opened()
    assert r.lib is pynvml and pynvml.nvmlLib is lib
    assert [d.uuid for d in r.devices] == [g.uuid for g in lib.gpus]      # UUIDs come back as bytes: decoded
    assert lib.calls["nvmlDeviceGetCount_v2"] == 1 and lib.calls["nvmlInitWithFlags"] == 1
    r.close()


@pytest.mark.parametrize("profile", OLD + NEW)
def test_every_field_is_read_on_every_driver_branch_and_the_way_is_found_once(standin, profile):
    now = [1.7e9]

    def ticking():                    # a second passes at every look: each tick finds fresh utilization samples
        now[0] += 1.0
        return now[0]
    lib = standin(gpus=2, profile=profile, clock=ticking)
    lib.gpus[0].processes += [Process(7001, 2 << 30, "graphics"), Process(7002, None, "mps")]
    r = opened()
    r.start()
    first = r.read()
    for g in first:
        missing = [f for f in ALL_FIELDS if g[f] is None]
        assert not missing, (profile, missing)
        Gpu.model_validate(g | {"tenant": None, "job": None, "attribution": None})
    assert {p["pid"]: p["mem_used_bytes"] for p in first[0]["processes"]} == {4000: 24 << 30, 7001: 2 << 30,
                                                                              7002: None}
    used = first[0]["mem_used_bytes"]
    reserved = si.RESERVED if profile in ("R440", "R470") else 0     # v1 counts the driver's reserve as used
    assert used == (24 << 30) + (2 << 30) + (300 << 20) + reserved
    calls = sum(lib.calls.values())
    r.read()
    again = sum(lib.calls.values()) - calls
    r.read()
    assert sum(lib.calls.values()) - calls == 2 * again         # the same calls each tick: nothing retried
    assert r.errors == 0
    assert "nvmlDeviceGetCurrentClocksEventReasons" not in lib.calls or profile in NEW
    r.close()


def test_what_the_node_can_read_is_told_by_collect_check(standin, capsys):
    from gpufleet.cli import main
    assert main(["collect", "--check", "--fake-gpus", "2", "--fake-driver", "R470"]) == 0
    out = capsys.readouterr().out
    assert "driver 470.256.02, NVML 11.470.256.02, CUDA 11.4" in out
    assert "throttle_reasons: nvmlDeviceGetCurrentClocksThrottleReasons (older driver)" in out
    assert "processes_compute: nvmlDeviceGetComputeRunningProcesses_v2 (older driver)" in out
    assert "mem_used_bytes/mem_total_bytes: nvmlDeviceGetMemoryInfo (older driver)" in out
    assert out.count("GPU ") >= 2


def test_idle_bit_is_masked_out_and_benign_bits_kept(standin):
    lib = standin(gpus=3)
    lib.gpus[0].util, lib.gpus[1].util, lib.gpus[2].util = 1.0, 99.0, 50.0
    lib.gpus[2].extra_reasons = si.SYNC_BOOST
    r = opened()
    g0, g1, g2 = r.read()
    assert (g0["throttle_reasons"], g1["throttle_reasons"], g2["throttle_reasons"]) == (0, si.SW_POWER_CAP, 0x10)
    r.close()


def test_utilization_is_averaged_over_the_interval(standin):
    clock = [1000.0]
    lib = standin(gpus=1, clock=lambda: clock[0])
    lib.gpus[0].trace = lambda t: (t - 1000.0) * 60      # climbs from 0 to 60% over the second
    r = opened()
    r.read()
    clock[0] = 1001.0
    (g,) = r.read()
    # five samples at 200 ms read 12, 24, ..., 60: their mean, not the point value 60 at the tick
    assert g["util_pct"] == pytest.approx(36.0)
    r.close()


def test_a_field_the_gpu_cannot_report_is_null_and_not_asked_again(standin):
    lib = standin(gpus=4)
    lib.unsupported_on[1] = {"nvmlDeviceGetTemperature"}
    r = opened()
    first = r.read()
    assert first[1]["temp_c"] is None and first[0]["temp_c"] is not None and first[1]["power_w"] is not None
    asked = lib.calls["nvmlDeviceGetTemperature"]
    r.read()
    assert lib.calls["nvmlDeviceGetTemperature"] - asked == 3           # the three GPUs that report it
    r.close()


def test_a_read_that_fails_for_another_reason_is_null_counted_asked_again_and_exported(standin):
    from gpufleet.collectors.daemon import Metrics
    lib = standin(gpus=4)
    lib.failing[(0, "nvmlDeviceGetPowerUsage")] = si.TIMEOUT
    lib.failing[(1, "nvmlDeviceGetTemperature")] = si.UNKNOWN
    lib.failing[(2, "nvmlDeviceGetClockInfo")] = si.NO_PERMISSION
    r = opened()
    gpus = r.read()
    assert gpus[0]["power_w"] is None and gpus[1]["power_w"] is not None and gpus[1]["temp_c"] is None
    assert gpus[2]["sm_clock_mhz"] is None and gpus[2]["temp_c"] is not None
    r.read()
    assert r.errors == 4            # timeout and unknown: asked again next tick; no permission: left out
    metrics = Metrics()

    class Publisher:
        delivered = failures = 0
        spool = type("Spool", (), {"dropped_total": 0, "pending": 0, "size": 0})()
    metrics.update(Publisher(), r)
    assert metrics.read_errors._value.get() == 4
    r.close()


def test_a_library_older_than_pynvml_does_not_stop_the_collector_at_start(standin):
    """pynvml's unversioned process list calls the _v3 symbol and raises NVMLLibraryMismatchError (a plain
    Exception) on a driver without it: start() and the background pass must carry on with _v2."""
    lib = standin(gpus=2, profile="R470")
    r = opened()
    r.start()
    (g, _) = r.read()
    assert g["processes"] == [{"pid": 4000, "mem_used_bytes": 24 << 30}] and g["pcie_rx_bytes_per_s"] is not None
    assert lib.calls.get("nvmlDeviceGetComputeRunningProcesses_v2")
    r.close()


def test_a_lost_gpu_is_reported_the_others_go_on_and_after_a_reset_it_is_sampled_again(standin, caplog):
    now = [0.0]
    lib = standin(gpus=4)
    r = opened(rediscover_s=30, clock=lambda: now[0])
    r.start()
    lib.lose(2)
    gpus = r.read()
    lost = gpus[2]
    assert lost["uuid"] == lib.gpus[2].uuid and lost["index"] == 2 and lost["xid_events"] == [79]
    assert all(g["util_pct"] is not None for i, g in enumerate(gpus) if i != 2)
    assert "is lost" in caplog.text
    again = r.read()                       # a lost GPU makes NVML reopen at once, and then every 30 s
    assert again[2]["xid_events"] == [] and again[2]["power_w"] is None and len(again) == 4
    inits = lib.calls["nvmlInitWithFlags"]
    assert inits == 2 and lib.calls["nvmlShutdown"] == 1      # no handle held across a reset
    lib.reset(2)
    assert r.read()[2]["power_w"] is None                     # before the next pass: still reported lost
    now[0] += 30
    back = r.read()
    assert back[2]["power_w"] is not None and back[2]["uuid"] == lib.gpus[2].uuid and len(back) == 4
    assert "back after a reset" in caplog.text
    r.close()


def test_xids_are_reported_once_with_the_next_sample_and_a_storm_is_capped(standin):
    lib = standin(gpus=4)
    r = opened()
    lib.xid(0, 48)
    lib.xid(0, 63)
    lib.xid(3, 31)
    first = r.read()
    assert first[0]["xid_events"] == [48, 63] and first[3]["xid_events"] == [31] and first[1]["xid_events"] == []
    assert r.read()[0]["xid_events"] == []
    lib.xid(1, 13, count=500)                     # a failing GPU: exactly when the sample must get through
    g = r.read()[1]
    assert len(g["xid_events"]) == MAX_XIDS and g["xids_dropped"] == 500 - MAX_XIDS
    Gpu.model_validate(g | {"tenant": None, "job": None, "attribution": None})
    r.close()


def test_processes_beyond_the_schemas_cap_are_left_out_and_counted(standin):
    lib = standin(gpus=1)
    lib.gpus[0].processes = [Process(10_000 + i, (i + 1) << 20) for i in range(300)]
    r = opened()
    r.start()
    (g,) = r.read()
    assert len(g["processes"]) == MAX_PROCESSES and g["processes_dropped"] == 300 - MAX_PROCESSES
    assert g["processes"][0]["pid"] == 10_299                         # the largest are kept
    Gpu.model_validate(g | {"tenant": None, "job": None, "attribution": None})
    r.close()


def test_mig_instances_carry_their_gpus_values_read_once_per_gpu(standin):
    lib = standin(gpus=2, mig={1: ["3g.40gb", "4g.40gb"]})
    r = opened()
    r.start()
    gpus = r.read()
    assert [g["mig_profile"] for g in gpus] == [None, "3g.40gb", "4g.40gb"]
    parent = lib.gpus[1]
    for g in gpus[1:]:
        assert g["parent_uuid"] == parent.uuid and g["uuid"].startswith("MIG-") and g["index"] == 1
        assert g["util_pct"] is None and g["mem_util_pct"] is None          # NVML has none for MIG
        assert g["power_w"] == pytest.approx(70 + 6 * parent.util, abs=1) and g["temp_c"] is not None
        assert g["mem_total_bytes"] == 40 << 30 and g["processes"]
    power = lib.calls["nvmlDeviceGetPowerUsage"]
    r.read()
    assert lib.calls["nvmlDeviceGetPowerUsage"] - power == 2                # once per physical GPU, not per instance
    lib.xid(1, 43, gpu_instance=2)
    assert [g["xid_events"] for g in r.read()] == [[], [], [43]]
    r.close()


def test_a_mig_reconfiguration_is_followed_at_once(standin):
    lib = standin(gpus=2, mig={1: ["3g.40gb", "4g.40gb"]})
    r = opened(rediscover_s=3600)
    old = [g["uuid"] for g in r.read()]
    lib.reconfigure(1, ["1g.10gb"] * 7)          # the MIG manager: old instances destroyed, seven new ones
    r.read()                                     # the old handles fail: enumerate again
    new = r.read()
    assert [g["mig_profile"] for g in new] == [None] + ["1g.10gb"] * 7
    assert not set(old[1:]) & {g["uuid"] for g in new} and all(g["mem_total_bytes"] == 10 << 30 for g in new[1:])
    lib.reconfigure(1, [])                       # MIG off
    r.read()
    assert [g["mig_profile"] for g in r.read()] == [None, None]
    r.close()


def test_costly_calls_stay_off_the_tick_and_pcie_is_read_once_per_gpu(standin):
    lib = standin(gpus=8, pcie_delay_s=0.02, mig={i: ["1g.10gb"] * 7 for i in range(4)})
    r = NvmlReader(slow_interval_s=60)
    r.open()
    r.start()                                      # reads the slow fields once, then in its thread
    assert lib.calls["nvmlDeviceGetPcieThroughput"] == 16       # 8 GPUs x 2 counters, not 32 devices x 2
    t = time.perf_counter()
    gpus = r.read()
    elapsed = time.perf_counter() - t
    r.close()
    assert len(gpus) == 32 and all(g["pcie_rx_bytes_per_s"] is not None for g in gpus)
    assert elapsed < 0.15, f"a tick took {elapsed:.3f} s: 8 GPUs x 2 PCIe counters would take 0.32 s inline"


@pytest.mark.parametrize(("code", "advice"), [
    (si.LIBRARY_NOT_FOUND, "runtimeClassName: nvidia"), (si.DRIVER_NOT_LOADED, "modprobe nvidia"),
    (si.LIB_RM_VERSION_MISMATCH, "reload the driver, or reboot"), (si.NO_PERMISSION, "/dev/nvidia"),
    (si.UNKNOWN, "dmesg")])
def test_nvml_that_cannot_start_says_what_to_check(standin, code, advice):
    standin(gpus=0, init_error=code)
    with pytest.raises(NvmlUnavailable, match=advice):
        NvmlReader().open()


def test_a_gpu_that_cannot_be_opened_costs_itself_only(standin, caplog):
    lib = standin(gpus=3)
    lib.gpus[1].lost = True
    caplog.set_level(logging.ERROR)
    r = opened(rediscover_s=3600)
    assert [d.index for d in r.devices] == [0, 2] and "GPU 1 cannot be opened" in caplog.text
    r.close()


def test_a_message_from_a_storm_node_is_valid_telemetry(standin):
    from gpufleet.collectors.collector import Collector
    lib = standin(gpus=2)
    r = opened()
    r.start()
    lib.xid(0, 79, count=200)
    msg = Collector("n1", r).collect()
    parse(json.dumps(msg))
    r.close()
