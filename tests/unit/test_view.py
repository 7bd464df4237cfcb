"""The operator's view without a store: the PNG encoder, the charts (well-formed SVG, the cells' colours, text
escaped), the time and bucket helpers, top's screen layout, and the commands' argument errors."""
import base64
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.view import charts, png
from gpufleet.view.data import ViewError, Window, bucket_for, next_month, parse_hours, parse_time
from gpufleet.view.top import Snapshot, bar, render

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1767571200.0      # 2026-01-05 00:00 UTC


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg" and root.get("class") == "chart"
    return root


def test_png_round_trip_and_bad_sizes():
    pixels = bytes(range(0, 2 * 3 * 3 * 10, 10))[:18]
    data = png.encode(3, 2, pixels)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert png.decode(data) == (3, 2, pixels)
    with pytest.raises(ValueError, match="needs 18"):
        png.encode(3, 2, pixels[:-1])
    with pytest.raises(ValueError, match="positive size"):
        png.encode(0, 2, b"")
    broken = bytearray(data)
    broken[30] ^= 0xFF                     # a byte inside the IHDR chunk: its CRC no longer matches
    with pytest.raises(ValueError, match="CRC"):
        png.decode(bytes(broken))


def heat(cells):
    """A heat map's data: one GPU per row of (util, rented, idle share) cells."""
    return {"start": T0, "end": T0 + 300 * len(cells[0]), "bucket_s": 300, "columns": len(cells[0]),
            "currency": "USD", "gpus": [{"gpu_uuid": f"GPU-{i}", "node": f"node-{i // 2}", "gpu_index": i % 2,
                                         "pool": "p", "tenant": "acme", "util_pct": [c[0] for c in row],
                                         "rented": [c[1] for c in row], "idle_share": [c[2] for c in row]}
                                        for i, row in enumerate(cells)],
            "idle_now": [{"gpu_uuid": "GPU-1", "node": "node-0", "gpu_index": 1, "tenant": "acme", "idle_s": 1800,
                          "cost_so_far": "1.000000"}]}


def test_heatmap_cells_are_one_png_with_the_states_coloured():
    cells = [[(None, 0, 0), (90.0, 1, 0.0), (3.0, 1, 0.6)],
             [(0.0, 0, 0.0), (50.0, 1, 0.4), (100.0, 1, 0.0)]]
    root = parse(charts.heatmap(heat(cells)))
    assert root.get("data-chart") == "heatmap" and root.get("data-marks") == "5"     # cells with telemetry
    image = root.find(SVG + "image")
    href = image.get("href")
    assert href.startswith("data:image/png;base64,")
    width, height, rgb = png.decode(base64.b64decode(href.split(",", 1)[1]))
    assert (width, height) == (3, 2)
    px = [tuple(rgb[i:i + 3]) for i in range(0, len(rgb), 3)]
    assert px[0] == charts.NO_DATA
    assert px[1] == charts.viridis(0.9)
    assert px[2] == charts.IDLE                      # idle for more than half the cell
    assert px[3] == charts.NOT_RENTED
    assert px[4] == charts.viridis(0.5)              # idle for less than half: its utilization
    assert px[5] == charts.viridis(1.0) == (253, 231, 37)
    codes = base64.b64decode(root.get("data-cells"))
    assert list(codes) == [255, 90, 128 + 3, 254, 50, 100]          # what the pointer read-out decodes
    marker = root.find(SVG + "path[@class='idle-now']")
    assert "idle 30 min" in marker.find(SVG + "title").text and "1.00 USD" in marker.find(SVG + "title").text


def test_charts_escape_text_and_count_their_marks():
    evil = "<script>alert(1)</script>"
    svg = charts.bars("b", "bars", [(evil, [10.0, None]), ("ok", [0.0, 5.0])], [("a", "#000"), ("b", "#111")])
    root = parse(svg)
    assert root.get("data-marks") == "3" and "<script>" not in svg and "&lt;script&gt;" in svg
    pts = [(T0 + 60 * i, float(i) if i != 3 else None) for i in range(10)]
    svg = charts.lines("l", "lines", [charts.Series("s", pts, "#000")], T0, T0 + 600, charts.LineStyle(
        band=[(T0, 1.0, 2.0), (T0 + 600, 2.0, 3.0)], markers=[charts.Marker(T0 + 120, evil, "#f00")],
        spans=[(T0, T0 + 60, "#0f0")], now=T0 + 300))
    root = parse(svg)
    assert root.get("data-marks") == str(9 + 2 + 1)                  # 9 points, the band's 2, one marker
    line = [p for p in root.iter(SVG + "path") if p.get("fill") == "none"][0]
    assert line.get("d").count("M") == 2                             # the missing value breaks the line
    assert "<script>" not in svg
    incidents = [{"kind": "idle", "node": "n", "gpu_uuid": "GPU-1", "job": None, "started_at": T0 + 60,
                  "resolved_at": None, "summary": evil}]
    assert parse(charts.timeline("t", incidents, T0, T0 + 600)).get("data-marks") == "1"


def test_time_ticks_buckets_and_parameters():
    ticks = charts.time_ticks(T0, T0 + 6 * 3600, most=8)
    assert [label for _, label in ticks] == ["Jan 05", "01:00", "02:00", "03:00", "04:00", "05:00", "06:00"]
    assert bucket_for(6 * 3600, 144) == 300 and bucket_for(30 * 86400, 144) == 21600
    assert bucket_for(400 * 86400, 144) == 3 * 86400
    assert parse_time("2026-01-05") == T0 == parse_time("2026-01-05T00:00Z") == parse_time(str(T0))
    for bad in ("yesterday", "0", "99999999999"):
        with pytest.raises(ViewError, match="to:"):
            parse_time(bad, "to")
    with pytest.raises(ViewError, match="hours: -1 is not between"):
        parse_hours("-1")
    with pytest.raises(ViewError, match="must end after it starts"):
        Window(T0, T0)
    assert next_month(T0 + 86400 * 20) == parse_time("2026-02-01") and next_month(parse_time("2026-12-31")) == \
        parse_time("2027-01-01")


def snapshot(**kw):
    pools = [{"pool": "h100-sxm-east", "util_pct": 50.0, "rented_util_pct": 75.0, "gpus_mean": 8.0,
              "rented_gpu_hours": 0.5}]
    idlest = [{"node": "node-001", "gpu_index": 3, "pool": "h100-sxm-east", "tenant": "acme", "job": "j1",
               "util_pct": 0.4, "idle_since": T0, "cost_so_far": "4.500000"}]
    firing = [{"kind": "straggler", "severity": "critical", "node": "node-002", "gpu_uuid": "GPU-abc", "job": "j2",
               "started_at": T0 + 600, "summary": "GPU 2 on node-002 runs 40% below its 7 peers"}]
    return Snapshot(T0 + 3600, pools, idlest, firing, "USD", 5, **kw)


def test_top_screen_layout():
    lines = render(snapshot(), 120, 40)
    text = "\n".join(t for t, _ in lines)
    assert all(len(t) <= 120 for t, _ in lines)
    pool = next(t for t, s in lines if s == "bar")
    assert pool.startswith("h100-sxm-east") and "[" + "█" * 20 + " " * 20 + "]" in pool and "50%" in pool
    assert "6.0" in pool                                 # 0.5 rented GPU-hours in 5 minutes: 6 GPUs
    idle = next(t for t, s in lines if s == "idle")
    assert "node-001" in idle and "60 min" in idle and "4.50 USD" in idle
    assert "FIRING ALERTS (1)" in text and "straggler" in text and ("critical" in s for _, s in lines)
    narrow = next(t for t, s in render(snapshot(), 80, 40) if s == "idle")
    assert narrow.endswith("4.50 USD") and "h100-sxm-east" not in narrow        # the pool column gives way
    short = render(snapshot(), 60, 8)
    assert len(short) == 8 and short[-1][0].startswith("... ") and all(len(t) <= 60 for t, _ in short)
    span = {"tenant_waste_amount": "12.500000", "unsold_amount": "0", "currency": "USD"}
    waste = {"underuse_pct": 60.0, "total": {"rented": 6, "idle": 1, "underused": 2, "waste_per_hour": "3.250000",
                                              "today": span, "month": {**span, "tenant_waste_amount": "40.000000"}},
             "pools": [{"pool": "h100-sxm-east", "idle": 1, "underused": 2, "waste_per_hour": "3.250000"}]}
    lines = render(snapshot(waste=waste), 120, 40)
    assert lines[1] == ("WASTE 3.25 USD/h now: 1 idle, 2 underused (<60% last hour) of 6 rented · paid by tenants "
                        "today 12.50, month 40.00 USD", "idle")
    pool = next(t for t, s in lines if s == "bar")
    assert pool.endswith("75%     1      2     3.25") and len(pool) <= 120
    empty = render(Snapshot(None), 100, 10)
    assert "no telemetry stored yet" in empty[0][0] and "gpufleet replay" in empty[-1][0]
    assert bar(0.5, 4) == "██  " and bar(1 / 16, 2) == "▏ " and bar(2.0, 3) == "███"


@pytest.mark.parametrize("args, names", [
    (["report"], "--from"),
    (["report", "--from", "2026-01-05", "--to", "2026-01-04"], "--to: must be after --from"),
    (["report", "--from", "2026-01-05", "--to", "soon"], "--to"),
    (["report", "--from", "2025-01-01", "--to", "2026-06-01"], "366 days"),
    (["report", "--from", "2026-01-05", "--to", "2026-01-06", "-o", "/no/such/dir/r.html"], "--out"),
    (["top", "--interval", "0"], "--interval"),
    (["top"], "needs a terminal"),
])
def test_bad_arguments_of_report_and_top(args, names, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err, err


def test_the_view_needs_no_forecast_install():
    """serve, report and top run on the store install: nothing the view imports needs numpy or scikit-learn."""
    code = ("import sys\nsys.modules['numpy'] = sys.modules['sklearn'] = None\n"
            "import gpufleet.view.routes, gpufleet.view.pages, gpufleet.view.top, gpufleet.commands.view\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_page_loads_nothing_from_elsewhere():
    """Every reference in the document's shell is inline or relative (the SVG namespace is a name, not a fetch)."""
    from gpufleet.view import pages
    from gpufleet.view.sections import Section
    html = pages.document("t", "<h1>t</h1>", [Section("a", "A", charts.bars("b", "b", [("x", [1.0])],
                                                                              [("s", "#000")]), "v1/x?y=1")])
    refs = re.findall(r'(?:href|src)="([^"]*)"', html)
    assert refs and all(r.startswith(("#", "data:", "v1/")) for r in refs), refs
    assert "<script src" not in html and "@import" not in html and "url(" not in html


def test_the_committed_grafana_dashboards_are_their_rendering():
    """deploy/grafana/*.json are what render.py writes from its panels (edit the panels, then render)."""
    root = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
    out = subprocess.run([sys.executable, str(root / "render.py"), "--check"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    names = sorted(p.name for p in root.glob("*.json"))
    assert names == ["gpufleet-fleet.json", "gpufleet-services.json"]


def test_the_report_replaces_a_file_whole_and_writes_into_a_pipe_or_device_in_place(tmp_path):
    import os
    import stat
    import threading

    from gpufleet.commands.view import write_document

    page = tmp_path / "report.html"
    page.write_text("old")
    write_document(str(page), "<html>new</html>")
    assert page.read_text() == "<html>new</html>" and os.listdir(tmp_path) == ["report.html"]

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()))
    reader.start()
    write_document(str(pipe), "<html>through the pipe</html>")
    reader.join(timeout=10)
    assert got == [b"<html>through the pipe</html>"]
    assert stat.S_ISFIFO(os.stat(pipe).st_mode), "the named pipe was replaced by a file"
    assert sorted(os.listdir(tmp_path)) == ["pipe", "report.html"]


def test_the_demand_chart_gives_history_half_its_width_and_tells_its_lines_apart():
    from gpufleet.view import sections

    end = T0 + 6 * 3600
    history = [{"ts": T0 + k * 300, "total_gpus": 16, "rented_gpus": 12, "busy_gpus": 12} for k in range(72)]
    forecast = {"made_at": end, "step_s": 3600, "points": [{"ts": end + h * 3600, "demand_gpus": 12, "p10": 10,
                                                             "p90": 14} for h in range(1, 25)]}

    class Data:
        def demand(self, w, ahead_s):
            return {"pools": [{"pool": "east", "demand": history, "forecast": forecast, "scale_events": []}]}
    body = sections.demand_section(Data(), Window(end - 24 * 3600, end), 24 * 3600).body
    svg = body[body.index("<svg"):]
    left, width = 58, 1100 - 58 - 16
    now_x = float(re.search(r'<line x1="([\d.]+)" y1="[\d.]+" x2="\1"[^>]*stroke-dasharray="4,3"', svg).group(1))
    assert (now_x - left) / width == pytest.approx(0.5, abs=0.01)       # 6 h of history, 6 h of the 24 h ahead
    assert ">GPUs</text>" in svg
    busy, rented, ahead = (svg.index(f"<title>{name}</title>") for name in ("busy", "rented", "forecast (rented)"))
    assert busy < rented, "busy is drawn under rented, so both show where they are equal"
    colours = {name: colour for colour, name in re.findall(r'stroke="(#[0-9a-f]{6})"[^>]*><title>([^<]+)</title>', svg)}
    assert len({colours.get(k) for k in ("busy", "rented", "forecast (rented)")}) == 3 and ahead > 0, colours


def test_the_demand_section_says_when_the_latest_decision_was_made_why_and_what_the_pool_lacks():
    from gpufleet.view import sections

    end = T0 + 6 * 3600
    history = [{"ts": T0 + k * 300, "total_gpus": 24, "rented_gpus": 0, "busy_gpus": 0} for k in range(72)]
    request = {"gpus": 8, "from": end + 3600, "until": end + 7 * 3600, "p90": 30.5}
    events = [{"at": end - 7200, "action": "hold", "current_gpus": 24, "target_gpus": 24, "rented_gpus": 3,
               "capacity_gpus": 24, "capacity_request": None, "dry_run": False, "reason": "Hold at 24 GPUs: a."},
              {"at": end - 3600, "action": "scale_down", "current_gpus": 24, "target_gpus": 0, "rented_gpus": 0,
               "capacity_gpus": 24, "capacity_request": request, "dry_run": False,
               "reason": "Scale down from 24 to 0 GPUs: nothing rented over the last 60 min."}]

    class Data:
        def demand(self, w, ahead_s):
            return {"pools": [{"pool": "east", "demand": history, "forecast": None, "scale_events": events}]}
    body = sections.demand_section(Data(), Window(end - 24 * 3600, end), 24 * 3600).body
    note = re.search(r'<p class="note decision">(.*?)</p>', body).group(1)
    assert note.startswith("<b>Latest decision, made 2026-01-05 05:00 UTC, 60 min before 2026-01-05 06:00 UTC:</b>")
    assert "Scale down from 24 to 0 GPUs: nothing rented over the last 60 min." in note
    assert "The pool has 24 GPUs; 0 are rented." in note
    asked = re.search(r'<p class="note request">(.*?)</p>', body).group(1)
    assert "8 more GPUs than the pool has, from 2026-01-05 07:00 UTC until 2026-01-05 13:00 UTC" in asked
    assert "not a scale target" in asked
    svg = body[body.index("<svg"):]
    assert "<title>pool capacity</title>" in svg and "<title>scale target</title>" in svg
    # each marker tells when its decision was made and why
    assert "decided 2026-01-05 05:00 UTC: Scale down from 24 to 0 GPUs" in svg
