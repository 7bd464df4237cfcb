"""`gpufleet replay` on a recorded file with bad lines: counted, reported with their line, never fatal."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_replay_dead_letters_bad_lines_and_writes_events(tmp_path):
    tel = tmp_path / "t.jsonl"
    gen = subprocess.run([sys.executable, "-m", "gpufleet", "simulate", "--nodes", "2", "--gpus-per-node", "2",
                          "--hours", "1", "--faults", "1", "-o", str(tel)], capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    lines = tel.read_text().splitlines()
    late = json.loads(lines[400])
    bad = ['{"schema": "gpufleet.telemetry.v1", "ts": 1, "node": "n", "gpus": [{"uuid": "u", "index": 0, '
           '"util_pct": 300}]}', "this is not json", ""]
    # a message for node-000 far behind its watermark, placed near the end
    lines = lines[:10] + bad + lines[10:] + [json.dumps(late)]
    tel.write_text("\n".join(lines) + "\n")
    events, dead = tmp_path / "events.jsonl", tmp_path / "dead.jsonl"
    out = subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(tel), "--events", str(events),
                          "--dead-letters", str(dead), "--dsn", f"chdb://{tmp_path / 'db'}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "dead letters: 3 (2 invalid, 1 late)" in out.stdout, out.stdout
    records = [json.loads(x) for x in dead.read_text().splitlines()]
    by_reason = sorted((d["reason_code"], d["source"].rsplit(":", 1)[1]) for d in records)
    assert by_reason == [("invalid", "11"), ("invalid", "12"), ("late", str(len(lines)))]
    invalid = next(d for d in records if d["source"].endswith(":11"))
    assert invalid["reason"].startswith("gpus.0.util_pct:") and "300" in invalid["payload"]
    assert f"{tel}:11: invalid: gpus.0.util_pct" in out.stdout
    emitted = [json.loads(x) for x in events.read_text().splitlines()]
    assert emitted and {e["schema"] for e in emitted} == {"gpufleet.alert.v1", "gpufleet.billing.v1"}
    assert "processed 1,443 messages" in out.stdout


def test_a_replay_of_an_old_recording_keeps_its_raw_samples(tmp_path):
    tel = tmp_path / "old.jsonl"
    gen = subprocess.run([sys.executable, "-m", "gpufleet", "simulate", "--nodes", "1", "--gpus-per-node", "2",
                          "--hours", "0.5", "--start", "2025-01-06", "-o", str(tel)], capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    dsn = f"chdb://{tmp_path / 'db'}"
    out = subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(tel), "--dsn", dsn],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # merges apply TTLs: forced here, a TTL on event time would drop every one of these samples
    q = subprocess.run([sys.executable, "-c", "from gpufleet.sql.store import Store; import sys; "
                        f"s = Store.connect({dsn!r}, 'gpufleet'); s.command('OPTIMIZE TABLE gpu_samples FINAL'); "
                        "print(s.query('SELECT count(), min(ts) FROM gpu_samples')[0])"],
                       capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    assert q.stdout.startswith("(720, datetime.datetime(2025, 1, 6"), q.stdout
