"""The operator's view as a person uses it, over a ClickHouse server filled once by a replayed simulated fleet
(`gpufleet simulate` then `gpufleet replay`): the fleet page and an incident page in headless Chromium, the report
opened the same way, `gpufleet top` under tmux, every panel query of the Grafana dashboards; and the JSON behind
the charts held against the store's own answers.

Chromium and tmux are Debian's (`apt-get install chromium chromium-driver tmux`, which .ci/run does); a test that
needs one skips, saying so, where it is missing. The screenshots and top's captured screen are kept as test
artifacts in tests/artifacts/views/ (ignored by git; TEST_ARTIFACTS=DIR puts them elsewhere), their paths printed
(pytest -s shows them).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

from gpufleet.sql.store import Store

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
START = "2026-01-05"                     # the simulated fleet's first sample (a Monday)
SECTIONS = ("heatmap", "alerts", "usage", "demand", "billing")
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS") or ROOT / "tests" / "artifacts") / "views"


def gpufleet(*args, timeout=300, env_extra=None, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")} | (env_extra or {})
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


@pytest.fixture(scope="module")
def fleet(clickhouse_url, tmp_path_factory):
    """A database on the ClickHouse server holding a replayed fleet: 4 nodes x 4 GPUs, 5 hours, a fault of each
    kind, forecasts and scale decisions, the billing ledger."""
    work = tmp_path_factory.mktemp("views")
    telemetry = work / "telemetry.jsonl"
    out = gpufleet("simulate", "--nodes", "4", "--gpus-per-node", "4", "--hours", "5", "--faults", "1", "--seed", "5",
                   "-o", str(telemetry))
    assert out.returncode == 0, out.stderr
    database = f"views_{uuid.uuid4().hex[:10]}"
    out = gpufleet("replay", str(telemetry), "--dsn", clickhouse_url, "--database", database)
    assert out.returncode == 0, out.stderr
    store = Store.connect(clickhouse_url, database)
    yield store
    store.drop()
    store.close()


@pytest.fixture(scope="module")
def served(fleet, clickhouse_url):
    """`gpufleet serve` on a free loopback port over that database."""
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet", "serve", "--port", "0", "--dsn", clickhouse_url,
                             "--database", fleet.database], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"serving on http://127\.0\.0\.1:(\d+): ", line)
    assert m, line + (proc.stderr.read() if proc.poll() is not None else "")
    yield f"http://127.0.0.1:{m.group(1)}"
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Content-Type", "")


def get_json(url: str) -> dict:
    status, body, kind = get(url)
    assert status == 200 and kind.startswith("application/json"), (url, status, body[:300])
    return json.loads(body)


# -- the JSON behind the charts, held against the store -----------------------------------
def firing_ids(store, end: float) -> set[str]:
    return {i for (i,) in store.query(
        "SELECT id FROM alerts WHERE status = 'firing' AND id NOT IN (SELECT id FROM alerts WHERE status = "
        "'resolved' AND resolved_at <= toDateTime64(%(e)s, 3, 'UTC'))", {"e": end})}


def test_the_json_behind_every_chart_agrees_with_the_store(fleet, served):
    latest = fleet.query("SELECT toUnixTimestamp(max(minute)) + 60 FROM gpu_rollup_1m")[0][0]
    heat = get_json(f"{served}/v1/fleet/heatmap")
    assert heat["end"] == latest and heat["bucket_s"] == 300 and heat["columns"] == 72
    assert len(heat["gpus"]) == 16
    # one GPU's cell, by the definition: the mean of its minutes' utilization in the bucket
    g = heat["gpus"][5]
    col = 40
    b0 = heat["start"] + col * 300
    (expected,) = fleet.query("SELECT avg(util_pct_mean) FROM gpu_rollup_1m FINAL WHERE gpu_uuid = %(g)s AND "
                              "minute >= toDateTime(%(a)s) AND minute < toDateTime(%(b)s)",
                              {"g": g["gpu_uuid"], "a": int(b0), "b": int(b0 + 300)})[0]
    assert g["util_pct"][col] == pytest.approx(expected, abs=0.05)
    # the GPU idle now is the one whose idle incident is still firing; its cost so far is its price x time
    alerts = get_json(f"{served}/v1/fleet/alerts")
    assert {a["id"] for a in alerts["firing"]} == firing_ids(fleet, latest) != set()
    (idle_now,) = heat["idle_now"]
    (price, started) = fleet.query("SELECT JSONExtractString(evidence, 'price_per_gpu_hour'), "
                                   "toUnixTimestamp64Milli(started_at) FROM alerts WHERE id = %(i)s AND status = "
                                   "'firing'", {"i": idle_now["incident"]})[0]
    assert idle_now["incident"] in firing_ids(fleet, latest)
    seconds = Decimal(str(round(latest - started / 1000, 3)))
    assert Decimal(idle_now["cost_so_far"]) == (Decimal(price) * seconds / 3600).quantize(Decimal("0.000001"))
    assert sum(any(share >= 0.5 for share in gpu["idle_share"]) for gpu in heat["gpus"]) >= 5
    # usage: GPU-hours by pool, and idle cost by tenant from the idle windows and their alerts' prices
    usage = get_json(f"{served}/v1/fleet/usage")
    w0 = latest - 6 * 3600
    hours = dict(fleet.query("SELECT pool, count() / 60 FROM usage_gpu_1m FINAL WHERE minute >= toDateTime(%(a)s) "
                             "GROUP BY pool", {"a": int(w0)}))
    assert {p["pool"]: p["gpu_hours"] for p in usage["pools"]} == pytest.approx(hours, abs=0.01)
    windows = fleet.query("SELECT w.tenant, toUnixTimestamp64Milli(w.started_at), toUnixTimestamp64Milli(w.ended_at),"
                          " JSONExtractString(a.evidence, 'price_per_gpu_hour'), a.id FROM idle_windows AS w FINAL "
                          "JOIN alerts AS a ON a.gpu_uuid = w.gpu_uuid AND a.started_at = w.started_at "
                          "WHERE a.kind = 'idle' AND a.status = 'firing'")
    ongoing = firing_ids(fleet, latest)
    cost: dict[str, Decimal] = {}
    for tenant, s, e, p, id_ in windows:
        end = latest if id_ in ongoing else e / 1000          # a run still idle is counted up to now
        inside = max(0.0, min(end, latest) - max(s / 1000, w0))
        cost[tenant] = cost.get(tenant, Decimal(0)) + (Decimal(p) * Decimal(str(round(inside, 3))) / 3600
                                                       ).quantize(Decimal("0.000001"))
    shown = {t["tenant"]: Decimal(t["idle_cost"]) for t in usage["tenants"] if Decimal(t["idle_cost"])}
    assert shown.keys() == {t for t, c in cost.items() if c}
    for tenant, value in shown.items():
        assert abs(value - cost[tenant]) <= Decimal("0.000002"), tenant
    # demand, forecast and decisions per pool
    demand = get_json(f"{served}/v1/fleet/demand?hours=48&ahead_hours=24")
    made = dict(fleet.query("SELECT pool, toUnixTimestamp(max(made_at)) FROM forecasts GROUP BY pool"))
    assert {p["pool"]: p["forecast"]["made_at"] for p in demand["pools"]} == made
    for p in demand["pools"]:
        assert len(p["demand"]) == 60 and len(p["scale_events"]) == 2
        assert p["forecast"]["points"][-1]["ts"] <= latest + 24 * 3600
    # billing of the month, held against the finance view
    billing = get_json(f"{served}/v1/fleet/billing")
    monthly = dict(fleet.query("SELECT tenant, sum(amount) FROM billing_cost_monthly WHERE month = '2026-01-01' "
                               "GROUP BY tenant"))
    assert {t["tenant"]: Decimal(t["amount"]) for t in billing["tenants"]} == monthly
    assert billing["month"] == "2026-01"
    # a period in the past: the state then (the straggler of 00:49 was firing at 01:00)
    then = get_json(f"{served}/v1/fleet/alerts?to=2026-01-05T01:00&hours=1")
    assert "straggler" in {a["kind"] for a in then["firing"]}
    # errors say what is wrong
    for url, code, words in (("/v1/fleet/heatmap?to=someday", 400, "to: 'someday'"),
                             ("/v1/fleet/usage?hours=0", 400, "hours: 0"),
                             ("/v1/fleet/billing?month=2026-1", 400, "month"),
                             ("/v1/incident", 400, "id is required"),
                             ("/v1/incident?id=nope", 404, "no incident")):
        status, body, _ = get(served + url)
        assert status == code and words in json.loads(body)["error"], (url, body)
    status, body, kind = get(f"{served}/incident?id=nope")
    assert status == 404 and kind.startswith("text/html") and b"no incident" in body


def test_an_empty_store_says_why_each_section_is_empty(server_store):
    import threading

    from gpufleet import feed, web
    from gpufleet.settings import ServeSettings
    from gpufleet.view import routes
    router = web.Router()
    routes.mount(router, server_store, routes.ViewConfig(ServeSettings(), "USD"), feed.mount(router, server_store))
    server = web.make_server(router, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, body, kind = get(base + "/")
        assert status == 200 and kind.startswith("text/html")
        page = body.decode()
        for section in SECTIONS:
            part = page.split(f'data-section="{section}"', 1)[1].split("</section>", 1)[0]
            assert 'class="empty"' in part and 'class="chart"' not in part, section
        assert "No telemetry in the store yet" in page and "No billing records for" in page
        for path in ("heatmap", "usage", "demand", "alerts", "billing"):
            assert get_json(f"{base}/v1/fleet/{path}")["empty"]
    finally:
        server.shutdown()
        server.server_close()


# -- a browser -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def console_errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def charts_in(driver, section: str) -> list[tuple[str, int]]:
    from selenium.webdriver.common.by import By
    found = driver.find_elements(By.CSS_SELECTOR, f'section[data-section="{section}"] svg.chart')
    return [(e.get_attribute("data-chart"), int(e.get_attribute("data-marks"))) for e in found]


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


def screenshot(driver, name: str) -> None:
    """The whole page as a PNG, kept as a test artifact."""
    path = artifact(name)
    path.unlink(missing_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(height + 40, 12000))
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1280, 1000)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    print(f"\nscreenshot: {path}")


def assert_every_chart_has_data(driver, sections=SECTIONS) -> None:
    from selenium.webdriver.common.by import By
    for section in sections:
        found = charts_in(driver, section)
        assert found and all(marks > 0 for _, marks in found), (section, found)
        assert not driver.find_elements(By.CSS_SELECTOR, f'section[data-section="{section}"] .empty'), section


def test_the_fleet_page_in_chromium(browser, served, fleet):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    browser.get_log("browser")                                # forget what came before
    began = time.monotonic()
    browser.get(served + "/")
    loaded = time.monotonic() - began
    assert browser.title.startswith("gpufleet · fleet at 2026-01-05 05:00 UTC"), browser.title
    assert_every_chart_has_data(browser)
    names = {name for s in SECTIONS for name, _ in charts_in(browser, s)}
    assert {"heatmap", "incidents", "pool-utilization", "pool-idle-cost", "tenant-utilization", "tenant-idle-cost",
            "billing"} <= names and sum(n.startswith("demand-") for n in names) == 3
    # the heat map's read-out under the pointer names the GPU, the time, the rental of that cell and the value:
    # a cell early in the window of a GPU whose tenant at the end is another (or none)
    heat = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="heatmap"]')
    h = get_json(f"{served}/v1/fleet/heatmap")
    (i, c, who) = next((i, c, h["tenants"][t]) for i, g in enumerate(h["gpus"]) for c, t in enumerate(g["tenant_col"])
                       if t >= 0 and h["tenants"][t] != g["tenant"] and g["util_pct"][c] is not None)
    box = browser.execute_script(
        "var s=arguments[0],r=s.getBoundingClientRect();return [r.width,r.height,s.viewBox.baseVal.width];", heat)
    scale = box[2] / box[0]
    left, top = float(heat.get_attribute("data-left")), float(heat.get_attribute("data-top"))
    pw, rh = float(heat.get_attribute("data-plot-w")), float(heat.get_attribute("data-row-h"))
    x = (left + (c + 0.5) * pw / h["columns"]) / scale - box[0] / 2
    y = (top + (i + 0.5) * rh) / scale - box[1] / 2
    ActionChains(browser).move_to_element_with_offset(heat, round(x), round(y)).perform()
    tip = browser.find_element(By.CSS_SELECTOR, ".tip")
    g = h["gpus"][i]
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(h["start"] + c * h["bucket_s"]))
    assert tip.text.startswith(f"{g['node']} GPU {g['gpu_index']} · {when} UTC · rented by {who} · "), tip.text
    # GPUs underused now are marked beside those idle now; the demand charts and bars carry their units and axes
    assert browser.find_elements(By.CSS_SELECTOR, 'svg[data-chart="heatmap"] path.underused-now')
    demand = browser.find_element(By.CSS_SELECTOR, 'section[data-section="demand"] svg.chart')
    assert "GPUs" in [t.text for t in demand.find_elements(By.CSS_SELECTOR, "text")]
    bars = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="pool-utilization"]')
    assert {"0%", "50%", "100%"} <= {t.text for t in bars.find_elements(By.CSS_SELECTOR, "text")}
    # billing and usage agree on rented hours, tenant by tenant; the default price is said to be one
    def column(section: str, header: str) -> dict[str, float]:
        table = browser.find_elements(By.CSS_SELECTOR, f'section[data-section="{section}"] table')[-1]
        heads = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
        k = heads.index(header)
        return {tr.find_elements(By.CSS_SELECTOR, "td")[0].text: float(tr.find_elements(By.CSS_SELECTOR, "td")[k].text)
                for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")}
    billed = column("billing", "rented hours")
    assert column("usage", "rented GPU-hours") == billed and sum(billed.values()) > 50
    note = browser.find_element(By.CSS_SELECTOR, 'section[data-section="billing"] .default-price').text
    assert "default price, a flat 2.00 USD per GPU-hour" in note
    # what pages people is listed first; underused rentals (information) are folded under it
    paging = browser.find_element(By.CSS_SELECTOR, 'section[data-section="alerts"] table.incidents').text
    folded = browser.find_element(By.CSS_SELECTOR, 'section[data-section="alerts"] details.info')
    assert "underuse" not in paging and "idle" in paging
    assert "underused rentals" in folded.text and folded.get_attribute("open") is None
    # the idle GPU is marked, with its cost so far
    assert browser.find_elements(By.CSS_SELECTOR, 'svg[data-chart="heatmap"] path.idle-now')
    idle_table = browser.find_element(By.CSS_SELECTOR, 'section[data-section="heatmap"] table').text
    assert "stark-research" in idle_table and "USD" in idle_table
    assert console_errors(browser) == []
    screenshot(browser, "fleet-page.png")
    print(f"fleet page loaded in {loaded:.2f} s")
    # a firing incident's link opens the telemetry around it
    link = browser.find_element(By.CSS_SELECTOR, 'section[data-section="alerts"] table.incidents a[href^="incident"]')
    link.click()
    assert browser.title.startswith("gpufleet · idle on node-001")
    runbook = browser.find_element(By.CSS_SELECTOR, 'header a[href="manual/runbooks/idle/"]')
    assert runbook.text == "the runbook"
    for key in ("util_pct", "sm_clock_mhz", "mem_used_bytes", "power_w"):
        assert [m for _, m in charts_in(browser, f"gpu-{key}")][0] > 0, key
    assert console_errors(browser) == []
    # a straggler's page shows its peers beside it
    (straggler,) = fleet.query("SELECT id FROM alerts WHERE kind = 'straggler' AND status = 'firing'")[0]
    browser.get(f"{served}/incident?id={urllib.parse.quote(straggler)}")
    util = browser.find_element(By.CSS_SELECTOR, 'section[data-section="gpu-util_pct"] svg.chart')
    assert "3 other GPUs of job train-0001" in util.get_attribute("innerHTML")
    assert len(util.find_elements(By.CSS_SELECTOR, "path[fill=none]")) == 4      # the straggler and 3 peers
    assert console_errors(browser) == []
    screenshot(browser, "incident-straggler.png")


def test_the_report_opened_in_chromium(browser, fleet, clickhouse_url):
    report = artifact("report.html")
    report.unlink(missing_ok=True)
    out = gpufleet("report", "--from", START, "--to", "2026-01-05T05:00", "-o", str(report), "--dsn",
                   clickhouse_url, "--database", fleet.database)
    assert out.returncode == 0 and "wrote" in out.stdout, out.stderr
    umask = os.umask(0o022)
    os.umask(umask)
    assert report.stat().st_mode & 0o777 == 0o666 & ~umask        # as any file the user writes, to be shared
    assert not list(report.parent.glob(".report-*"))               # written whole, then renamed
    text = report.read_text()
    refs = re.findall(r'(?:href|src)="([^"]*)"', text)
    assert all(r.startswith(("#", "data:")) for r in refs), [r for r in refs if not r.startswith(("#", "data:"))]
    browser.get_log("browser")
    browser.get(report.as_uri())
    assert browser.title.startswith("gpufleet report, 2026-01-05 00:00 UTC to 2026-01-05 05:00 UTC")
    assert_every_chart_has_data(browser)
    assert console_errors(browser) == []
    screenshot(browser, "report.png")
    # a customer's report holds only what is theirs
    mine = artifact("report-globex.html")
    mine.unlink(missing_ok=True)
    out = gpufleet("report", "--from", START, "--to", "2026-01-05T05:00", "-o", str(mine), "--tenant", "globex",
                   "--dsn", clickhouse_url, "--database", fleet.database)
    assert out.returncode == 0, out.stderr
    others = {t for (t,) in fleet.query("SELECT DISTINCT tenant FROM gpu_rollup_1m WHERE tenant NOT IN ('', "
                                        "'globex')")}
    body = mine.read_text()
    assert others and not [t for t in others if t in body] and "globex" in body
    browser.get(mine.as_uri())
    assert_every_chart_has_data(browser)
    assert console_errors(browser) == []
    screenshot(browser, "report-globex.png")


# -- a terminal --------------------------------------------------------------------------
def test_top_under_tmux(fleet, clickhouse_url):
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux (apt-get install tmux)")
    socket = f"gpufleet-test-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", socket]
    command = (f"env TERM=xterm-256color {sys.executable} -m gpufleet top --interval 1 --dsn {clickhouse_url} "
               f"--database {fleet.database}; echo exit=$?; sleep 60")
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "150", "-y", "45", command], check=True,
                   cwd=ROOT, timeout=30)

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True,
                              timeout=30).stdout

    def wait_for(what, seconds=30) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            shown = screen()
            if what(shown):
                return shown
            time.sleep(0.3)
        raise AssertionError(f"not on the screen after {seconds} s:\n{screen()}")
    try:
        shown = wait_for(lambda s: "FIRING ALERTS" in s)
        artifact("top.txt").write_text(shown)
        print(f"\ntop's screen: {artifact('top.txt')}\n{shown}")
        pools = {p for (p,) in fleet.query("SELECT DISTINCT pool FROM gpu_rollup_1m")}
        for pool in pools:
            assert re.search(rf"^{re.escape(pool)}\s+\[█*[ ▏▎▍▌▋▊▉█]*\]\s+\d+%", shown, re.M), pool
        firing = int(re.search(r"^FIRING ALERTS \((\d+)\)", shown, re.M).group(1))
        kinds = re.findall(r"^(idle|underuse|straggler|io_starvation|memory_leak)\s+(warning|info|critical)\s", shown,
                           re.M)
        assert len(kinds) == firing and kinds[0] == ("idle", "warning") and kinds.count(("idle", "warning")) == 1
        assert kinds.count(("underuse", "info")) == firing - 1 >= 1, "the underused jobs, after the one idle GPU"
        assert re.search(r"^idle\s+warning\s+04:34\s+node-001", shown, re.M)
        assert re.search(r"node-001\s+2\s+h100-sxm-east\s+stark-research\s+nb-0007\s+\d+%\s+\d+ min\s+[\d.]+ USD",
                         shown), "the idle GPU, how long and what it cost, with its pool and job on a wide screen"
        rows = shown.split("RENTED GPUs IDLE NOW")[1].splitlines()
        assert re.match(r"node-001\s+2\s.*\d+ min\s+[\d.]+ USD", rows[2]), "the GPU idle now comes first"
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True, timeout=30)
        wait_for(lambda s: "exit=0" in s, 15)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)


# -- Grafana ---------------------------------------------------------------------------------
def expand(sql: str, variables: dict[str, list[str]], start: int, end: int, interval_s: int = 60) -> str:
    """A panel's SQL as Grafana sends it to ClickHouse: the dashboard's variables (Grafana), then the
    grafana-clickhouse-datasource plugin's macros (pkg/macros: times as toDateTime(<unix seconds>))."""
    def variable(m):
        name, form = m.group(1) or m.group(3), m.group(2)
        values = variables[name]
        if form == "singlequote":
            return ",".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values)
        assert form is None and len(values) == 1, (name, form)
        return values[0]
    sql = re.sub(r"\$\{(\w+)(?::(\w+))?\}|\$(?!__)(\w+)", variable, sql)
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)",
                 lambda m: f"{m.group(1)} >= toDateTime({start}) AND {m.group(1)} <= toDateTime({end})", sql)
    sql = re.sub(r"\$__timeInterval\(([^)]+)\)",
                 lambda m: f"toStartOfInterval(toDateTime({m.group(1)}), INTERVAL {interval_s} second)", sql)
    sql = sql.replace("$__fromTime", f"toDateTime({start})").replace("$__toTime", f"toDateTime({end})")
    assert "$" not in sql, sql
    return sql


def test_every_panel_of_the_clickhouse_dashboard_returns_rows(fleet):
    board = json.loads((ROOT / "deploy" / "grafana" / "gpufleet-fleet.json").read_text())
    start, end = 1767571200, 1767571200 + 5 * 3600 + 24 * 3600        # the fleet's 5 hours and a day ahead
    (pool_var,) = [v for v in board["templating"]["list"] if v["name"] == "pool"]
    pools = [p for (p,) in fleet.query(expand(pool_var["query"]["rawSql"], {"database": [fleet.database]}, start,
                                              end))]
    assert len(pools) == 3
    variables = {"database": [fleet.database], "pool": pools}
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    for panel in panels:
        for target in panel["targets"]:
            assert target["datasource"]["type"] == "grafana-clickhouse-datasource" and target["editorType"] == "sql"
            assert target["format"] in (0, 1)
            rows = fleet.query(expand(target["rawSql"], variables, start, end))
            assert rows, panel["title"]
            if target["format"] == 0:            # a time series: its first column is the time
                assert all(r[0] is not None for r in rows) and hasattr(rows[0][0], "timestamp"), panel["title"]


def test_every_prometheus_panel_names_metrics_and_labels_the_processes_export(served):
    """Each query's metrics and labels are among those the worker, collector, router and serve register."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpufleet.collectors.daemon import Metrics as CollectorMetrics
    from gpufleet.streams.metrics import WorkerMetrics
    from gpufleet.streams.notify.metrics import NotifyMetrics
    worker = WorkerMetrics()
    worker.watch_store(lambda: 0, lambda: 0)
    worker.count("node", {"messages": 1, "clock_skew:node-1": 1})
    worker.batch_done("node", 0.1)
    worker.lag.labels("gpufleet.telemetry", "0").set(3)
    notify = NotifyMetrics()
    notify.watch(lambda: {"slack": 1.0}, lambda: {"slack": 2}, ["slack"])
    notify.sent("slack", "firing", [0.2])
    notify.failed("slack", "rejected", 1)
    notify.retried("slack")
    notify.rate_limited("slack")
    notify.throttled("slack", 1.0)
    notify.muted("slack", "silenced")
    notify.reminder("slack", "firing")
    notify.invalid.inc()
    notify.ledger_failures.inc()
    get(served + "/")                                        # the view's request metrics
    get(served + "/v1/scale?pool=h100-sxm-east")
    texts = [generate_latest(r).decode() for r in (worker.registry, notify.registry, CollectorMetrics().registry)]
    texts.append(get(served + "/metrics")[1].decode())
    labels: dict[str, set[str]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
    board = json.loads((ROOT / "deploy" / "grafana" / "gpufleet-services.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 30
    prefixes = set()
    for expr in exprs:
        names = re.findall(r"\b(gpufleet_[a-z_]+)", expr)
        assert names, expr
        for name in names:
            assert name in labels, f"{name} (in {expr}) is exported by no process"
            prefixes.add("_".join(name.split("_")[:2]))
        known = set().union(*(labels[n] for n in names)) | {"le", "instance", "job"}
        used = set(re.findall(r"\bby \(([^)]*)\)", expr))
        used = {x.strip() for group in used for x in group.split(",")}
        used |= set(re.findall(r"[{,]\s*(\w+)\s*=~?", expr))
        assert used <= known, (expr, used - known)
    assert {"gpufleet_worker", "gpufleet_collector", "gpufleet_notify"} <= prefixes


# -- reading never writes ----------------------------------------------------------------------
def test_report_and_top_on_a_missing_database_name_it_and_create_nothing(clickhouse_url, tmp_path):
    missing = f"nosuch_{uuid.uuid4().hex[:8]}"
    for args in (["report", "--from", START, "--to", "2026-01-06", "-o", str(tmp_path / "r.html")],
                 ["top", "--once"]):
        out = gpufleet(*args, "--dsn", clickhouse_url, "--database", missing)
        assert out.returncode == 2 and missing in out.stderr and "gpufleet db migrate" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()
    server = Store.connect(clickhouse_url, "system")
    try:
        assert missing not in {name for (name,) in server.query("SHOW DATABASES")}
    finally:
        server.close()


# -- fleet gauges and a real Prometheus --------------------------------------------------------
def metric_samples(text: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_fleet_gauges_are_the_waste_the_page_reads(fleet, served):
    got = metric_samples(get(served + "/metrics")[1].decode())
    waste = get_json(f"{served}/v1/fleet/waste")
    latest = fleet.query("SELECT toUnixTimestamp(max(minute)) + 60 FROM gpu_rollup_1m")[0][0]
    assert waste["at"] == latest
    assert got[("gpufleet_telemetry_newest_seconds", ())] == latest
    assert got[("gpufleet_telemetry_age_seconds", ())] == pytest.approx(time.time() - latest, abs=120)
    # installed GPUs per pool are those that reported in the last five minutes, by the store
    reported = dict(fleet.query("SELECT pool, uniqExact(gpu_uuid) FROM gpu_rollup_1m WHERE minute >= "
                                "toDateTime(%(t)s) GROUP BY pool", {"t": int(latest - 300)}))
    for p in waste["pools"]:
        pool = p["pool"]
        assert got[("gpufleet_gpus", (("pool", pool), ("state", "installed")))] == reported[pool] == p["gpus"]
        for state in ("rented", "busy", "idle", "underused"):
            assert got[("gpufleet_gpus", (("pool", pool), ("state", state)))] == p[state]
        assert p["rented"] == p["busy"] + p["idle"] and p["underused"] <= p["busy"]
        assert got[("gpufleet_waste_per_hour", (("currency", "USD"), ("pool", pool)))] == \
            pytest.approx(float(p["waste_per_hour"]))
        # the money billed today: the ledger's own sums
        (idle, unused, unsold) = fleet.query(
            "SELECT sum(idle_amount), sum(unused_amount), sum(unsold_amount) FROM billing_ledger FINAL "
            "WHERE pool = %(p)s AND toDate(period_start) = toDate(toDateTime(%(t)s))",
            {"p": pool, "t": int(latest - 1)})[0]
        assert Decimal(p["today"]["tenant_waste_amount"]) == idle + unused
        assert got[("gpufleet_waste_amount", (("currency", "USD"), ("paid_by", "tenant"), ("period", "today"),
                                              ("pool", pool)))] == pytest.approx(float(idle + unused))
        assert got[("gpufleet_waste_amount", (("currency", "USD"), ("paid_by", "provider"), ("period", "today"),
                                              ("pool", pool)))] == pytest.approx(float(unsold))
    # the waste per hour is each idle GPU's price and each underused one's unused share of it
    per_hour = sum(Decimal(g["price_per_gpu_hour"]) * (1 if g["state"] == "idle" else
                                                       1 - Decimal(str(g["util_pct"])) / 100) for g in waste["gpus"])
    assert Decimal(waste["total"]["waste_per_hour"]) == per_hour.quantize(Decimal("0.000001")) > 0
    assert sum(g["state"] == "underused" for g in waste["gpus"]) == waste["total"]["underused"] >= 1
    # firing incidents by kind and severity: those the alerts JSON lists as firing
    alerts = get_json(f"{served}/v1/fleet/alerts")
    counts: dict[tuple, int] = {}
    for a in alerts["firing"]:
        counts[(a["kind"], a["severity"])] = counts.get((a["kind"], a["severity"]), 0) + 1
    assert {(dict(k)["kind"], dict(k)["severity"]): v for (name, k), v in got.items()
            if name == "gpufleet_alerts_firing"} == counts != {}


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_prometheus_scrapes_serve_and_evaluates_the_rules(served, tmp_path):
    if shutil.which("prometheus") is None:
        pytest.skip("needs Prometheus (apt-get install prometheus)")
    rules = ROOT / "deploy" / "prometheus" / "gpufleet.rules.yml"
    target = served.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        f"scrape_configs:\n  - job_name: gpufleet-serve\n    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    api = f"http://127.0.0.1:{port}/api/v1/query?query="
    try:
        deadline, found = time.monotonic() + 90, []
        while time.monotonic() < deadline and not found:
            time.sleep(1)
            try:
                found = get_json(api + urllib.parse.quote("pool:gpufleet_rented_share:ratio"))["data"]["result"]
            except (OSError, AssertionError):
                continue
        assert found, (tmp_path / "prometheus.log").read_text()[-2000:]
        waste = get_json(f"{served}/v1/fleet/waste")
        expected = {p["pool"]: p["rented"] / max(p["gpus"], 1) for p in waste["pools"]}
        assert {r["metric"]["pool"]: float(r["value"][1]) for r in found} == pytest.approx(expected)
        up = get_json(api + urllib.parse.quote('up{job="gpufleet-serve"}'))["data"]["result"]
        assert [float(r["value"][1]) for r in up] == [1.0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- waste: one definition, the same numbers everywhere ------------------------------------------
def waste_rows(html: str) -> dict[str, list[str]]:
    """The waste section's table by tenant: tenant -> its cells, as the page or the report shows them."""
    section = html[html.index('id="waste"'):]
    section = section[:section.index("</section>")]
    table = section[section.index("<h3>By tenant</h3>"):]
    table = table[:table.index("</table>")]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table)[1:]:
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
        rows[cells[0]] = cells[1:]
    return rows


def test_waste_is_the_same_on_every_surface(fleet, served, clickhouse_url, tmp_path):
    """A fleet whose inference services ran at a few per cent for hours: the page, the report, top, bill, the
    finance views and /metrics give the same underused GPU-hours and the same money."""
    latest = fleet.query("SELECT toUnixTimestamp(max(minute)) + 60 FROM gpu_rollup_1m")[0][0]
    low = fleet.query("SELECT tenant, job, sum(underused_s) / 3600 AS h, sum(busy_s * busy_util_pct) / sum(busy_s) "
                      "FROM billing_ledger FINAL WHERE underused_s > 0 GROUP BY tenant, job HAVING h >= 2 "
                      "ORDER BY h DESC")
    assert low and min(u for *_, u in low) < 10, "the fleet has services at a few per cent for hours"
    # the finance view: per tenant, this month
    view = {t: (Decimal(str(round(h, 3))), i + u, s) for t, h, i, u, s in fleet.query(
        "SELECT tenant, sum(underused_hours), sum(idle_amount), sum(unused_amount), sum(unsold_amount) "
        "FROM billing_waste WHERE month = '2026-01-01' GROUP BY tenant")}
    assert sum(v[1] for v in view.values()) > 0
    # gpufleet bill
    out = gpufleet("bill", "--month", "2026-01", "--format", "json", "--dsn", clickhouse_url, "--database",
                   fleet.database)
    assert out.returncode == 0, out.stderr
    for inv in json.loads(out.stdout)["invoices"]:
        hours, paid, unsold = view[inv["tenant"]]
        low_ = inv["waste"]["low_utilization"] or {"busy_hours": "0.000", "unused_amount": "0", "unsold_amount": "0"}
        assert Decimal(low_["busy_hours"]) == hours, inv["tenant"]
        assert Decimal(inv["total"]["idle_amount"]) + Decimal(low_["unused_amount"]) == paid, inv["tenant"]
        assert Decimal(low_["unsold_amount"]) == unsold
    # the page's JSON and its table, and the report's table, by tenant
    page = get_json(f"{served}/v1/fleet/waste")
    shown = {t["tenant"]: t for t in page["tenants"]}
    for tenant, (hours, paid, unsold) in view.items():
        month = shown[tenant]["month"]
        assert (round(Decimal(str(month["underused_hours"])), 3), Decimal(month["tenant_waste_amount"]),
                Decimal(month["unsold_amount"])) == (hours, paid, unsold), tenant
    status, body, _ = get(f"{served}/")
    html_rows = waste_rows(body.decode())
    report = tmp_path / "report.html"
    out = gpufleet("report", "--from", START, "--to", str(int(latest)), "-o", str(report), "--dsn", clickhouse_url,
                   "--database", fleet.database)
    assert out.returncode == 0, out.stderr
    report_rows = waste_rows(report.read_text())
    for tenant, (_, paid, unsold) in view.items():
        money = f"{paid:,.2f} USD"
        assert html_rows[tenant][5] == report_rows[tenant][5] == money, tenant        # waste this month
        assert html_rows[tenant][6] == report_rows[tenant][6] == f"{unsold:,.2f} USD"
    # top (as it reads through serve) and /metrics: the fleet's totals
    total_paid = sum(v[1] for v in view.values())
    snap = get_json(f"{served}/v1/top")
    assert Decimal(snap["waste"]["total"]["month"]["tenant_waste_amount"]) == total_paid
    out = gpufleet("top", "--once", "--dsn", clickhouse_url, "--database", fleet.database)
    assert out.returncode == 0 and f"month {total_paid:,.2f} USD" in out.stdout, out.stdout + out.stderr
    got = metric_samples(get(served + "/metrics")[1].decode())
    metric = sum(v for (name, k), v in got.items() if name == "gpufleet_waste_amount" and
                 dict(k)["period"] == "month" and dict(k)["paid_by"] == "tenant")
    assert metric == pytest.approx(float(total_paid), abs=1e-5)

