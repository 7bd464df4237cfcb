"""The fleet page for a 1,000-GPU fleet: how long `gpufleet serve` takes to answer it, and a browser to load it,
against the raw SQL of the same reads.

    CLICKHOUSE_URL=... .venv/bin/python bench/bench_view.py [--nodes 8] [--gpus 8] [--hours 6] [--interval 30]
                                                            [--copies 16] [--database DB] [--no-browser]

The store: a simulated fleet of --nodes x --gpus GPUs over --hours, replayed by `gpufleet replay` into a fresh
database on the ClickHouse server (rollups, idle windows and their alerts, the other detectors' incidents,
forecasts, scale decisions, the billing ledger), then copied --copies - 1 times inside ClickHouse under other node
names, GPU UUIDs, jobs and incident ids (8 x 8 x 16 = 1,024 GPUs; the materialized views fill as for real
inserts). --database DB measures an existing store instead (e.g. a 1,000-GPU fleet replayed whole) and keeps it.

Measured, best of 5 each, the fleet page as the service builds it (the last --hours up to the latest telemetry,
48 h of demand, the latest forecast a day ahead):

- raw SQL (the baseline): every query the page issues, recorded once, then sent as they are through
  clickhouse-connect, one after the other, the way the page sends them;
- the page built in-process (the same reads, plus turning rows into chart data, the SVG charts, the heat map's
  PNG and the HTML);
- GET / from `gpufleet serve`'s router over HTTP (the page and its request handling);
- GET /v1/fleet/heatmap (the largest JSON);
- headless Chromium (Debian's chromium and chromedriver, when installed): from navigation to the load event,
  the page drawn.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import best_of, machine  # noqa: E402

from gpufleet import feed, web  # noqa: E402
from gpufleet.settings import ServeSettings  # noqa: E402
from gpufleet.sql.store import Store  # noqa: E402
from gpufleet.view import pages, routes  # noqa: E402
from gpufleet.view.data import FleetData  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# what each copy renames so that it is another node, other GPUs, other jobs and other incidents
RENAMED = {"node": "concat(node, '-copy{k}')", "slowest_node": "concat(slowest_node, '-copy{k}')",
           "gpu_uuid": "if(gpu_uuid = '', '', concat(gpu_uuid, '-copy{k}'))",
           "job": "if(job = '', '', concat(job, '-copy{k}'))", "id": "concat(id, '-copy{k}')"}
COPIED = ("gpu_rollup_1m", "node_rollup_1m", "job_rollup_1m", "idle_windows", "alerts", "billing_ledger")


def gpufleet(*args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    out = subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"gpufleet {args[0]} failed: {out.stderr.strip()}")


def fill(dsn: str, database: str, args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = os.path.join(tmp, "telemetry.jsonl")
        began = time.perf_counter()
        gpufleet("simulate", "--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus), "--hours",
                 str(args.hours), "--interval", str(args.interval), "--faults", "2", "-o", telemetry)
        gpufleet("replay", telemetry, "--dsn", dsn, "--database", database)
    store = Store.connect(dsn, database)
    try:
        for table in COPIED:
            columns = [c for (c,) in store.query("SELECT name FROM system.columns WHERE database = %(d)s AND "
                                                 "table = %(t)s ORDER BY position", {"d": database, "t": table})]
            original = "node NOT LIKE '%-copy%'" if "node" in columns else "job NOT LIKE '%-copy%'"
            for k in range(1, args.copies):
                replace = ", ".join(f"{RENAMED[c].format(k=k)} AS {c}" for c in columns if c in RENAMED)
                store.command(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * REPLACE ({replace}) "
                              f"FROM (SELECT * FROM {table} WHERE {original})")    # (aliases are seen by WHERE)
    finally:
        store.close()
    print(f"filled {database} in {time.perf_counter() - began:.0f} s")


class Recording:
    """The store as the page sees it (``query`` and ``database``), keeping every query it is asked."""

    def __init__(self, store: Store):
        self.store, self.database, self.queries = store, store.database, []

    def query(self, sql: str, parameters: dict | None = None) -> list[tuple]:
        self.queries.append((sql, parameters))
        return self.store.query(sql, parameters)


def browser_load(url: str) -> float | None:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        best = float("inf")
        for _ in range(5):
            driver.get("about:blank")
            driver.get(url)            # returns once the document has loaded
            ms = driver.execute_script("const t = performance.getEntriesByType('navigation')[0];"
                                       "return t.loadEventEnd - t.startTime;")
            best = min(best, ms / 1000)
        return best
    finally:
        driver.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--interval", type=float, default=30.0, help="sampling interval of the simulated fleet (s)")
    ap.add_argument("--copies", type=int, default=16, help="the replayed fleet and its copies (1: no copy)")
    ap.add_argument("--database", help="measure this existing database instead of filling one (kept)")
    ap.add_argument("--no-browser", action="store_true", help="skip the headless Chromium figure")
    args = ap.parse_args()
    dsn = os.environ.get("CLICKHOUSE_URL")
    if not dsn:
        sys.exit("CLICKHOUSE_URL is not set: start the local services (make services-start) and source their env")
    database = args.database or f"bench_view_{uuid.uuid4().hex[:8]}"
    if not args.database:
        fill(dsn, database, args)
    store = Store.connect(dsn, database)
    server = None
    try:
        serve = ServeSettings()
        (gpus, rows, incidents) = store.query(
            "SELECT uniqExact(gpu_uuid), count(), (SELECT uniqExact(id) FROM alerts) FROM gpu_rollup_1m")[0]

        def page() -> str:
            data = FleetData(store)
            w = data.window(None, serve.view_hours)
            return pages.fleet_page(data, w, serve.demand_hours, serve.forecast_ahead_hours, serve.refresh_s,
                                    live=True)
        html = page()
        recording = Recording(store)
        data = FleetData(recording)
        pages.fleet_page(data, data.window(None, serve.view_hours), serve.demand_hours, serve.forecast_ahead_hours,
                         serve.refresh_s, live=True)
        queries = recording.queries

        def raw() -> list:      # the rows as the page gets them, as Python values
            return [store.client.query(sql, parameters=parameters).result_rows for sql, parameters in queries]

        router = web.Router()
        routes.mount(router, store, serve, "USD", feed.mount(router, store))
        server = web.make_server(router, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"

        def get(path: str):
            def go() -> None:
                with urllib.request.urlopen(base + path, timeout=60) as r:
                    assert r.status == 200
                    r.read()
            return go

        results = [("raw SQL of the page's reads (baseline)", best_of(raw, 5)),
                   ("the page built in-process (reads, chart data, SVG, PNG, HTML)", best_of(page, 5)),
                   ("GET / from gpufleet serve over HTTP", best_of(get("/"), 5)),
                   ("GET /v1/fleet/heatmap (JSON)", best_of(get("/v1/fleet/heatmap"), 5))]
        loaded = None if args.no_browser else browser_load(base + "/")
        if loaded is not None:
            results.append(("headless Chromium: navigation to load event", loaded))
        base_s = results[0][1]
        print(f"\n## Fleet page ({machine()})\n")
        print(f"{gpus:,} GPUs, {rows:,} GPU-minute rows, {incidents:,} incidents; the page: {len(queries)} queries, "
              f"{len(html.encode()) / 1024:,.0f} KiB; best of 5\n")
        print("| what | seconds | time vs baseline |")
        print("|---|---:|---:|")
        for label, seconds in results:
            print(f"| {label} | {seconds:.3f} | {seconds / base_s:.2f}x |")
        if loaded is None and not args.no_browser:
            print("\n(no headless Chromium figure: needs Debian's chromium and chromium-driver)")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        if not args.database:
            store.drop()
        store.close()


if __name__ == "__main__":
    main()
