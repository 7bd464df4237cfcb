"""The base install is the node collector alone: no store engine, no model training, no stream framework.

Installs gpufleet without extras into a fresh virtual environment (from PyPI, as a node would) and runs
the collector on fake GPUs there.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("chdb", "sklearn", "numpy", "matplotlib", "scipy", "clickhouse_connect", "faust", "msgspec", "cramjam")


@pytest.mark.slow
def test_the_base_install_runs_the_collector_without_the_heavy_dependencies(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py, gpufleet = venv / "bin" / "python", venv / "bin" / "gpufleet"
    pip = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(ROOT)], capture_output=True, text=True,
                         timeout=900, cwd=tmp_path)
    assert pip.returncode == 0, pip.stderr[-2000:]

    present = subprocess.run([str(py), "-c", "import importlib.util as u, json; "
                              f"print(json.dumps([m for m in {HEAVY!r} if u.find_spec(m)]))"],
                             capture_output=True, text=True, check=True)
    assert json.loads(present.stdout) == [], "the base install pulled in heavy dependencies"

    out = subprocess.run([str(gpufleet), "collect", "--fake-gpus", "2", "--once", "--node", "n1"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    msg = json.loads(out.stdout)
    assert msg["schema"] == "gpufleet.telemetry.v1" and msg["node"] == "n1" and len(msg["gpus"]) == 2

    # a command of another role says which install it needs, in one line
    other = subprocess.run([str(gpufleet), "summary"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert other.returncode == 2 and "pip install 'gpufleet[store]'" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1, other.stderr
    series = tmp_path / "d.csv"
    series.write_text("ts,gpus\n0,1\n600,2\n")
    forecast = subprocess.run([str(gpufleet), "forecast", "backtest", "--series", str(series)], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
    assert forecast.returncode == 2 and "pip install 'gpufleet[forecast]'" in forecast.stderr, forecast.stderr
