"""bench/forecast_traces.py: the real traces' series derived from the public files, on small files of their shape."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))          # bench/ sits at the repository root, outside the installed package

from bench import forecast_traces as ft  # noqa: E402
from gpufleet.models.series import read_csv  # noqa: E402


def put(root: Path, rel: Path, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_series_and_capacities_come_from_the_public_files(tmp_path, monkeypatch):
    lucid, helios, out = tmp_path / "lucid", tmp_path / "helios", tmp_path / "out"
    # Venus: GPUs started and ended per 10 min; the sum's lowest point (the outage) is nothing running
    put(lucid, ft.VENUS, "time,start_gpu_num,end_gpu_num\n2020-05-09 23:50:00,4,0\n2020-05-10 00:00:00,0,10\n"
                         "2020-05-10 00:10:00,8,0\n2020-09-27 23:50:00,1,0\n2020-09-28 00:00:00,5,0\n")
    put(lucid, ft.VENUS_NODES, ",num\nvcA,9\nvcB,5\n")                         # nodes of 8 GPUs
    # Earth: two virtual clusters per minute, summed, mean per 10 min
    vc = "time,running_gpu_num\n2020-05-01 00:00:00,{}\n2020-05-01 00:05:00,{}\n2020-05-01 00:10:00,{}\n"
    put(helios, ft.EARTH / "vcA" / "cluster_sequence_vc.csv", vc.format(10, 20, 5))
    put(helios, ft.EARTH / "vcB" / "cluster_sequence_vc.csv", vc.format(1, 3, 0))
    put(helios, ft.EARTH / "vcC" / "cluster_sequence_vc.csv", vc.format(0, 1, 0))       # next to no demand
    # the GPUs installed per day: the most common figure of the series' days
    put(helios, ft.EARTH_GPUS, "date,vcA,vcB,vcC,total\n2020-04-30,8,8,8,24\n2020-05-01,64,16,8,88\n"
                               "2020-05-02,64,16,8,88\n2020-05-03,0,0,0,0\n")
    # Philly: active nodes per minute; a 10 minutes without a row stays without a value
    put(helios, ft.PHILLY, "time,active,total\n2017-10-03 00:00:00,300,420\n2017-10-03 00:01:00,303,420\n"
                           "2017-10-03 00:20:00,310,420\n")
    monkeypatch.setattr(sys, "argv", ["forecast_traces", "--lucid", str(lucid), "--helios", str(helios),
                                      "--out", str(out)])
    assert ft.main() == 0

    t, v = read_csv(str(out / "helios-venus-demand.csv"), None, "gpus")
    assert v.tolist() == [10.0, 0.0, 8.0, 9.0]                # the day after 2020-09-27 left out
    assert t[0] == 1589039400.0                              # 2020-05-09 23:50 at UTC+8
    # the most in any minute of each 10 minutes: what the forecast process forecasts
    t, v = read_csv(str(out / "helios-earth-demand.csv"), None, "gpus")
    assert v.tolist() == [24.0, 5.0] and t[1] - t[0] == 600             # every cluster, summed
    assert read_csv(str(out / "earth-vc-vcA.csv"), None, "gpus")[1].tolist() == [20.0, 5.0]
    assert read_csv(str(out / "earth-vc-vcB.csv"), None, "gpus")[1].tolist() == [3.0, 0.0]
    assert not (out / "earth-vc-vcC.csv").exists()
    t, v = read_csv(str(out / "philly-nodes-demand.csv"), None, "nodes")
    assert v.tolist() == [303.0, 310.0] and t[1] - t[0] == 1200
    assert (out / "capacity.csv").read_text().splitlines() == [
        "series,gpus", "helios-venus-demand,112", "helios-earth-demand,88", "earth-vc-vcA,64", "earth-vc-vcB,16",
        "philly-nodes-demand,420"]
