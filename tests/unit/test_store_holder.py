"""One process at a time opens an embedded store. While `gpufleet serve` holds one, `report` and `top` read through
it; any other command is told, in one line, which process holds the store and what to do."""
import os
import re
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow


def gpufleet(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def served(tmp_path):
    dsn = f"chdb://{tmp_path / 'store'}"
    made = gpufleet("db", "migrate", "--dsn", dsn)
    assert made.returncode == 0, made.stderr
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet", "serve", "--dsn", dsn, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    url = re.search(r"serving on (http://[^:]+:\d+)", line)
    assert url, line + proc.stderr.read()
    yield dsn, proc
    proc.terminate()
    proc.wait(timeout=30)


def test_report_and_top_read_through_the_server_holding_the_store(served, tmp_path):
    dsn, proc = served
    out = tmp_path / "report.html"
    report = gpufleet("report", "--dsn", dsn, "--from", "2026-01-05", "--to", "2026-01-06", "-o", str(out))
    assert report.returncode == 0, report.stderr
    assert f"gpufleet serve (pid {proc.pid}): reading through it" in report.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    top = gpufleet("top", "--once", "--dsn", dsn)
    assert top.returncode == 0, top.stderr
    assert top.stdout.startswith("gpufleet top · no telemetry stored yet")


def test_a_writer_is_told_who_holds_the_store(served):
    dsn, proc = served
    migrate = gpufleet("db", "migrate", "--dsn", dsn)
    assert migrate.returncode == 1
    err = migrate.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "DB::Exception" not in err, err
    assert f"pid {proc.pid} (gpufleet serve --dsn {dsn}" in err and "ClickHouse server" in err


def test_the_holder_record_goes_with_its_process(served, tmp_path):
    dsn, proc = served
    path = dsn[len("chdb://"):]
    assert os.path.exists(os.path.join(path, "gpufleet-holder.json"))
    proc.terminate()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while os.path.exists(os.path.join(path, "gpufleet-holder.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(os.path.join(path, "gpufleet-holder.json"))
    again = gpufleet("report", "--dsn", dsn, "--from", "2026-01-05", "--to", "2026-01-06", "-o",
                     str(tmp_path / "r.html"))
    assert again.returncode == 0 and "reading through" not in again.stderr, again.stderr
