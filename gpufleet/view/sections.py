"""The sections of the fleet page and the report: each a chart (or the reason it is empty) and its table.

A section is made from the values of ``data.py`` only, so the page, the report and the JSON endpoints show the same
numbers. ``links`` says whether incidents link to their page (the report is read without the service).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import urlencode

from gpufleet.view import charts
from gpufleet.view.charts import Marker, Series, esc, kind_colors
from gpufleet.view.data import FleetData, Window, iso


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    body: str                 # HTML
    json: str | None = None   # the endpoint with the same data, relative to the page


class Raw(str):
    """HTML that a table cell shows as it is (already escaped)."""


def table(headers: Sequence[str], rows: Sequence[Sequence], numeric: Sequence[int] = (), cls: str = "") -> str:
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for r in rows:
        cells = "".join(f'<td{" class=num" if i in numeric else ""}>' +
                        (v if isinstance(v, Raw) else esc("" if v is None else v)) + "</td>" for i, v in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def empty(why: str) -> str:
    return f'<p class="empty">{esc(why[0].upper() + why[1:])}.</p>'


def _when(ts: float | None) -> str:
    return "" if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%m-%d %H:%M")


def _duration(seconds: float) -> str:
    m = seconds / 60
    if m < 90:
        return f"{m:.0f} min"
    if m < 48 * 60:
        return f"{m / 60:.1f} h"
    return f"{m / 1440:.1f} d"


def _money(value: str | None, currency: str) -> str:
    return "" if value is None else f"{Decimal(value):,.2f} {currency}"


def _query(w: Window, **extra) -> str:
    q = {"to": int(w.end), "hours": round(w.hours, 4), **extra}
    if w.tenant:
        q["tenant"] = w.tenant
    return urlencode(q)


# -- utilization by node and GPU -------------------------------------------------------
def heatmap_section(data: FleetData, w: Window, links: bool = True, title: str | None = None,
                    idle_title: str = "Idle now") -> Section:
    h = data.heatmap(w)
    if h.get("empty"):
        return Section("heatmap", title or "Utilization by node and GPU", empty(h["empty"]),
                       f"v1/fleet/heatmap?{_query(w)}")
    cur = h["currency"]
    if w.end >= (data.latest() or 0):      # the heat map ends now: mark the GPUs underused now
        h = {**h, "underused_now": [g for g in data.waste(w.end, w.tenant)["gpus"] if g["state"] == "underused"]}
    idle_rows = [(r["node"], r["gpu_index"], r["pool"], r["tenant"], r["job"] or "", _when(r["start"]),
                  _duration(r["idle_s"]), _money(r["price_per_gpu_hour"], cur),
                  Raw(f"<b>{esc(_money(r['cost_so_far'], cur))}</b>"),
                  Raw(f'<a href="incident?id={esc(r["incident"])}">incident</a>') if links and r["incident"]
                  else (r["incident"] or "")) for r in h["idle_now"]]
    bucket = h["bucket_s"]
    note = (f'<p class="note">{len(h["gpus"])} GPUs, mean utilization per {bucket // 60} min from {iso(h["start"])} '
            f"to {iso(h['end'])}. Red: in an idle window (rented, below the idle threshold for the idle window or "
            "longer) for at least half the cell. Marked at the right: GPUs idle now (red) and underused now "
            "(purple: busy below the underuse threshold over the last hour)." +
            (f" Only {esc(w.tenant)}'s rentals: other times are blank." if w.tenant else "") + "</p>")
    idle = (f'<h3>{esc(idle_title)} ({len(idle_rows)})</h3>' + table(
        ["node", "GPU", "pool", "tenant", "job", "idle since", "for", "price / GPU-hour", "cost so far", ""],
        idle_rows, numeric=(1, 6, 7, 8)) if idle_rows else
            f'<p class="note">No rented GPU is idle at {esc(iso(w.end))}.</p>')
    silent = h["silent"]
    quiet = (f'<h3>Silent nodes ({len(silent)})</h3><p class="note">No telemetry for {_duration(data.silent_after_s)} '
             "or more: their alerts are resolved as silent and nothing watches their GPUs until they report "
             "again.</p>" + table(["node", "pool", "GPUs", "last telemetry", "silent for"],
                                  [(r["node"], r["pool"], r["gpus"], _when(r["last_seen"]), _duration(r["silent_s"]))
                                   for r in silent], numeric=(2, 4))) if silent else ""
    return Section("heatmap", title or "Utilization by node and GPU",
                   note + '<div class="scroll">' + charts.heatmap(h) + "</div>" + quiet + idle,
                   f"v1/fleet/heatmap?{_query(w)}")


# -- waste -------------------------------------------------------------------------------
def _hours(h: float) -> str:
    return f"{h:,.1f}"


def waste_section(data: FleetData, w: Window, links: bool = True, title: str = "Waste") -> Section:
    """Idle and underused GPUs now, the money they waste per hour, and the waste billed today and this month, by
    pool and tenant (one definition: gpufleet/contracts/waste.py)."""
    x = data.waste(w.end, w.tenant)
    json_url = f"v1/fleet/waste?{urlencode({'to': int(w.end), **({'tenant': w.tenant} if w.tenant else {})})}"
    t, cur = x["total"], x["currency"]
    if not t["gpus"] and not x["pools"]:
        return Section("waste", title, empty(data._no_telemetry(Window(w.end - 300, w.end, w.tenant))), json_url)
    today, month = t["today"], t["month"]
    unknown = (f" ({t['price_unknown']} without a billing record yet, not priced)" if t["price_unknown"] else "")
    unsold = Decimal(month["unsold_amount"])
    lead = (f"<b>{esc(_money(t['waste_per_hour'], cur))} an hour</b> wasted at {esc(iso(x['at']))}: "
            f"{t['idle']} idle and {t['underused']} underused of {t['rented']} rented GPUs{esc(unknown)}. Billed "
            f"today: <b>{esc(_money(today['tenant_waste_amount'], cur))}</b> paid by tenants for idle and unused time "
            f"({_hours(today['idle_hours'])} idle, {_hours(today['underused_hours'])} underused GPU-hours); this "
            f"month <b>{esc(_money(month['tenant_waste_amount'], cur))}</b>" +
            (f", and {esc(_money(month['unsold_amount'], cur))} of the provider's unsold capacity (tenants billed "
             "by use)" if unsold else "") + ".")
    if data.price_note:
        lead += f' <b class="default-price">Note: {esc(data.price_note)}.</b>'
    note = (f'<p class="note">{lead}</p><p class="note">Idle: rented, in an idle window. Underused: busy, below '
            f"{x['underuse_pct']:g} % utilization on average (over the last hour now; per billing period on the "
            "bill), its unused share counted as waste. Money at each GPU's price per GPU-hour; billed amounts from "
            "the closed billing records of today and this month (UTC).</p>")

    def row(a: dict, name) -> tuple:
        return (name, a["rented"], a["idle"], a["underused"], _money(a["waste_per_hour"], cur),
                _money(a["today"]["tenant_waste_amount"], cur), _money(a["month"]["tenant_waste_amount"], cur),
                _money(a["month"]["unsold_amount"], cur))
    heads = ["rented GPUs", "idle", "underused", "waste / hour now", "waste today", "waste this month",
             "unsold this month"]
    pools = table(["pool", *heads], [row(p, Raw(f'<a href="#waste-{esc(p["pool"])}">{esc(p["pool"])}</a>'))
                                     for p in x["pools"]], numeric=range(1, 8))
    tenants = table(["tenant", *heads], [row(a, Raw(f'<a href="?{urlencode({"tenant": a["tenant"]})}">'
                                                   f'{esc(a["tenant"])}</a>') if links else a["tenant"])
                                         for a in x["tenants"]], numeric=range(1, 8))
    gpus = ""
    for p in x["pools"]:
        mine = [g for g in x["gpus"] if g["pool"] == p["pool"]]
        if not mine:
            continue
        gpus += (f'<h3 id="waste-{esc(p["pool"])}">{esc(p["pool"])}: idle and underused GPUs now '
                 f"<small>{len(mine)}</small></h3>" + table(
                     ["node", "GPU", "tenant", "job", "state", "utilization, last hour", "price / GPU-hour",
                      "waste / hour"],
                     [(g["node"], g["gpu_index"], g["tenant"], g["job"] or "", g["state"],
                       "" if g["util_pct"] is None else f"{g['util_pct']:.0f} %",
                       _money(g["price_per_gpu_hour"], cur), _money(g["waste_per_hour"], cur)) for g in mine],
                     numeric=(1, 5, 6, 7)))
    return Section("waste", title, note + "<h3>By pool</h3>" + pools + "<h3>By tenant</h3>" + tenants + gpus,
                   json_url)


# -- alerts ------------------------------------------------------------------------------
def _evidence(ev: dict) -> str:
    parts = []
    for k, v in ev.items():
        if isinstance(v, dict | list):
            v = ", ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict) else ", ".join(map(str, v))
        parts.append(f"<span class=ev><i>{esc(k)}</i> {esc(v)}</span>")
    return " ".join(parts)


def runbook_link(kind: str) -> str:
    """The runbook of ``kind`` in the manual ``gpufleet serve`` serves beside the pages (/manual/)."""
    return f"manual/runbooks/{esc(kind)}/"


def _incident_rows(incidents: list[dict], links: bool, resolved: bool = False) -> list[tuple]:
    rows = []
    for a in incidents:
        target = a["node"] + (f" · {a['gpu_uuid']}" if a["gpu_uuid"] else "") + (f" · job {a['job']}" if a["job"]
                                                                                  else "")
        kind = Raw(f'<span class="kind" style="background:{kind_colors().get(a["kind"], "#9498a0")}">'
                   f'{esc(a["kind"])}</span>')
        link = Raw(f'<a href="incident?id={esc(a["id"])}">telemetry</a> · '
                   f'<a href="{runbook_link(a["kind"])}">runbook</a>') if links else a["id"]
        since = _when(a["started_at"]) + (f" – {_when(a['resolved_at'])}" if resolved else "")
        rows.append((kind, a["severity"], since, target, a["tenant"] or "", Raw(
            f"{esc(a['summary'])}<br>{_evidence(a['evidence'])}"), link))
    return rows


def alerts_section(data: FleetData, w: Window, links: bool = True, firing_title: str = "Firing") -> Section:
    a = data.alerts(w)
    json_url = f"v1/fleet/alerts?{_query(w)}"
    if a.get("empty"):
        return Section("alerts", "Alerts", empty(a["empty"]), json_url)
    counts = ", ".join(f"{k}: {c['firing']} firing, {c['resolved']} resolved" for k, c in sorted(a["counts"].items()))
    body = f'<p class="note">{esc(counts)}.</p>'
    shown = a["firing"] + a["resolved"]
    body += charts.timeline("incidents", shown, w.start, w.end)
    headers = ["kind", "severity", "since", "where", "tenant", "summary and evidence", ""]
    # what pages people first; the information ones (underused rentals: money, not an outage) folded under it
    paging = [x for x in a["firing"] if x["severity"] != "info"]
    info = [x for x in a["firing"] if x["severity"] == "info"]
    n_info = a["firing_by_severity"].get("info", 0)
    if paging:
        body += f"<h3>{esc(firing_title)} ({a['firing_total'] - n_info})</h3>" + table(
            headers, _incident_rows(paging, links), cls="incidents")
    else:
        body += f'<p class="note">Nothing but information firing at {esc(iso(w.end))}.</p>' if info else \
            f'<p class="note">Nothing firing at {esc(iso(w.end))}.</p>'
    if info:
        body += (f'<details class="info"><summary>{esc(firing_title)}, information: underused rentals and the like '
                 f"({n_info}; the waste section above sums them)</summary>" +
                 table(headers, _incident_rows(info, links), cls="incidents") + "</details>")
    if a["resolved"]:
        body += (f"<details><summary>Resolved since {esc(iso(w.start))} ({a['resolved_total']})</summary>" +
                 table(headers, _incident_rows(a["resolved"], links, resolved=True), cls="incidents") + "</details>")
    return Section("alerts", "Alerts", body, json_url)


# -- utilization and idle cost by pool and tenant ------------------------------------------
def usage_section(data: FleetData, w: Window) -> Section:
    u = data.usage(w)
    json_url = f"v1/fleet/usage?{_query(w)}"
    title = "Utilization and idle cost by pool and tenant"
    if u.get("empty"):
        return Section("usage", title, empty(u["empty"]), json_url)
    cur = u["currency"]
    pools, tenants = u["pools"], u["tenants"]

    def cost(row):
        return float(row["idle_cost"])
    money_text = lambda v: f"{v:,.2f} {cur}"   # noqa: E731
    any_idle = any(cost(r) for r in (*pools, *tenants))
    grid = ['<div class="grid">',
            charts.bars("pool-utilization", "Utilization by pool",
                        [(p["pool"], [p["util_pct"], p["rented_util_pct"]]) for p in pools],
                        [("all GPUs", charts.color(0)), ("rented GPUs", charts.color(3))],
                        charts.BarStyle(unit="%", max_value=100)),
            charts.bars("tenant-utilization", "Utilization by tenant",
                        [(t["tenant"], [t["util_pct"]]) for t in tenants], [("rented GPUs", charts.color(3))],
                        charts.BarStyle(unit="%", max_value=100))]
    if any_idle:            # no empty panels: the idle cost charts only where something was idle
        grid += [charts.bars("pool-idle-cost", "Idle cost by pool", [(p["pool"], [cost(p)]) for p in pools],
                             [(f"idle cost ({cur})", charts.hex_rgb(charts.IDLE))],
                             charts.BarStyle(value_text=money_text)),
                 charts.bars("tenant-idle-cost", "Idle cost by tenant", [(t["tenant"], [cost(t)]) for t in tenants],
                             [(f"idle cost ({cur})", charts.hex_rgb(charts.IDLE))],
                             charts.BarStyle(value_text=money_text))]
    grid.append("</div>" + ("" if any_idle else '<p class="note">No rented GPU was idle in this period: no idle '
                                                  "cost.</p>"))
    rows = [(p["pool"], p["gpus"], p["gpus_mean"], p["gpu_hours"], p["billed_rented_hours"], p["util_pct"],
             p["rented_util_pct"], p["idle_gpu_hours"], _money(p["idle_cost"], cur) +
             (" (some unpriced)" if p["idle_cost_partial"] else "")) for p in pools]
    trows = [(t["tenant"], t["gpus"], t["gpus_mean"], t["billed_rented_hours"], t["util_pct"], t["idle_gpu_hours"],
              _money(t["idle_cost"], cur)) for t in tenants]
    body = (f'<p class="note">From {esc(iso(w.start))} to {esc(iso(w.end))}. Idle cost: the idle windows\' time in '
            "this period at the price the idle alert priced it (setting billing.prices). GPU-hours: minutes of "
            "telemetry; rented GPU-hours: the billing records' rented time of the periods that start in this "
            "period, as the billing section counts it.</p>" + "".join(grid) +
            table(["pool", "GPUs", "mean GPUs", "GPU-hours", "rented GPU-hours", "util %", "rented util %",
                   "idle GPU-hours", "idle cost"], rows, numeric=range(1, 9)) +
            table(["tenant", "GPUs", "mean GPUs", "rented GPU-hours", "util %", "idle GPU-hours", "idle cost"], trows,
                  numeric=range(1, 7)))
    return Section("usage", title, body, json_url)


# -- demand, forecasts and scale decisions ----------------------------------------------
FORECAST = charts.color(6)      # the forecast and its band (purple): apart from the history and the scale target


def demand_section(data: FleetData, w: Window, ahead_s: float, now_label: str = "now") -> Section:
    d = data.demand(w, ahead_s)
    json_url = f"v1/fleet/demand?{_query(w, ahead_hours=round(ahead_s / 3600, 4))}"
    title = "Demand, forecast and scale decisions"
    if d.get("empty"):
        return Section("demand", title, empty(d["empty"]), json_url)
    # the history drawn from where it starts (a young store holds less than the window)
    t0 = max(w.start, min((p["demand"][0]["ts"] for p in d["pools"] if p["demand"]), default=w.start))
    parts = [f'<p class="note">GPUs per pool every 5 minutes from {esc(iso(t0))}; the latest forecast made by '
             f"{esc(iso(w.end))} with its p10–p90 band; the scale target of each decision (▲ up, ▼ down, ● hold "
             "against the GPUs present; hollow when a dry run), which never goes above the pool's capacity (dotted); "
             "demand beyond the pool is a capacity request, under the chart.</p>"]
    if d.get("no_forecast"):
        parts.append(f'<p class="note">{esc(d["no_forecast"][0].upper() + d["no_forecast"][1:])}.</p>')
    history = w.end - t0
    for p in d["pools"]:
        f = p["forecast"]
        # busy under rented as a wide pale band, so that both show where they are equal
        series = [Series("total GPUs", [(x["ts"], x["total_gpus"]) for x in p["demand"]], "#9498a0", width=1.4),
                  Series("busy", [(x["ts"], x["busy_gpus"]) for x in p["demand"]], charts.color(4), width=5,
                         opacity=0.45),
                  Series("rented", [(x["ts"], x["rented_gpus"]) for x in p["demand"]], charts.color(0), width=1.6)]
        band = None
        if f:
            series.append(Series("forecast (rented)", [(x["ts"], x["demand_gpus"]) for x in f["points"]],
                                 FORECAST, dash="5,3"))
            band = [(x["ts"], x["p10"], x["p90"]) for x in f["points"]]
        events = p["scale_events"]
        if events:
            # what the pool has: no target goes above it (rows from before capacities were recorded have 0)
            known = [e for e in events if e["capacity_gpus"]]
            if known:
                series.append(Series("pool capacity", [(e["at"], e["capacity_gpus"]) for e in known] +
                                     [(w.end, known[-1]["capacity_gpus"])], "#5f6368", width=1.0, dash="2,3",
                                     step=True))
            series.append(Series("scale target", [(e["at"], e["target_gpus"]) for e in events] +
                                 [(w.end, events[-1]["target_gpus"])], charts.color(2), width=1.6, step=True))
        markers = [Marker(e["at"], f"decided {iso(e['at'])}{' (dry run)' if e['dry_run'] else ''}: {e['reason']}",
                          charts.color(2), _symbol(e)) for e in events]
        # the forecast drawn as far ahead as the history shown goes back (3 hours at least): a young store's few
        # hours of history keep half the width
        ahead = min(f["points"][-1]["ts"] - w.end, max(history, 3 * 3600)) if f else 0.0
        end = w.end + max(ahead, 0.0)
        made = f"forecast made {iso(f['made_at'])}" if f else "no forecast"
        parts.append(f"<h3>{esc(p['pool'])} <small>{esc(made)}</small></h3>" +
                     charts.lines(f"demand-{p['pool']}", f"Demand of {p['pool']}", series, t0, end, charts.LineStyle(
                         band=band, band_color=FORECAST, markers=markers, now=w.end, height=210, now_label=now_label,
                         y_label="GPUs")) + _latest_decision(events, w.end))
    return Section("demand", title, "".join(parts), json_url)


def _latest_decision(events: list[dict], end: float) -> str:
    """Under a pool's chart: its latest decision, when it was made (and how long before the window's end), its
    reason, and the GPUs asked for beyond the pool."""
    if not events:
        return '<p class="note">No scale decision yet.</p>'
    e = events[-1]
    before = end - e["at"]
    ago = f", {_span(before)} before {iso(end)}" if before >= 60 else ""
    out = (f'<p class="note decision"><b>Latest decision, made {esc(iso(e["at"]))}{esc(ago)}'
           f'{" (dry run: nothing acts on it)" if e["dry_run"] else ""}:</b> {esc(e["reason"])}')
    if e["capacity_gpus"]:
        out += f" The pool has {e['capacity_gpus']} GPUs; {e['rented_gpus']} are rented."
    out += "</p>"
    r = e.get("capacity_request")
    if r:
        out += (f'<p class="note request"><b>Capacity request:</b> {r["gpus"]} more GPUs than the pool has, from '
                f'{esc(iso(r["from"]))} until {esc(iso(r["until"]))}, for a demand of up to {r["p90"]:.1f} GPUs '
                "(the forecast's p90, or the peak rented where that is already beyond the pool; not a scale target: "
                "the pool cannot hold them).</p>")
    return out


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _symbol(event: dict) -> str:
    filled, hollow = {"scale_up": ("▲", "△"), "scale_down": ("▼", "▽")}.get(event["action"], ("●", "○"))
    return hollow if event["dry_run"] else filled


def tenant_demand_section(data: FleetData, w: Window) -> Section:
    bucket = next((b for b in (300, 900, 3600, 3 * 3600, 6 * 3600) if (w.end - w.start) / b <= 300), 86400)
    d = data.tenant_demand(w, bucket)
    title = f"GPUs rented by {w.tenant}"
    if d.get("empty"):
        return Section("demand", title, empty(d["empty"]))
    series = [Series(p["pool"], [(x["ts"], x["gpus"]) for x in p["demand"]], charts.color(i))
              for i, p in enumerate(d["pools"])]
    return Section("demand", title, f'<p class="note">Mean GPUs in use per {bucket // 60} min, by pool.</p>' +
                   charts.lines("tenant-demand", title, series, w.start, w.end, charts.LineStyle(height=210)))


# -- billing -----------------------------------------------------------------------------
def billing_section(data: FleetData, w: Window, month: bool = True) -> Section:
    b = data.billing(w, month=month)
    title = f"Billing, {b['month']}" if month else "Billing"
    json_url = f"v1/fleet/billing?{_query(w)}" if month else None
    if b.get("empty"):
        return Section("billing", title, empty(b["empty"]), json_url)
    by_pool = w.tenant is not None
    if by_pool:       # one tenant: its lines by pool
        rows = [(x["pool"], [float(x["amount"]) - float(x["idle_amount"]), float(x["idle_amount"])])
                for x in b["lines"]]
    else:
        rows = [(t["tenant"], [float(t["amount"]) - float(t["idle_amount"]), float(t["idle_amount"])])
                for t in b["tenants"]]
    cur = b["totals"][0]["currency"] if len(b["totals"]) == 1 else ""
    totals = "; ".join(f"{Decimal(t['amount']):,.2f} {t['currency']} billed, of which {Decimal(t['idle_amount']):,.2f}"
                       f" {t['currency']} for idle GPUs" for t in b["totals"])
    through = f" (periods closed up to {iso(b['billed_through'])})" if b["billed_through"] else ""
    chart = charts.bars("billing", title, rows, [("busy", charts.color(0)), ("idle", charts.hex_rgb(charts.IDLE))],
                        charts.BarStyle(stacked=True, width=760, value_text=lambda v: f"{v:,.2f} {cur}".strip()))
    trows: list[tuple]
    if by_pool:
        trows = [(x["pool"], x["gpus"], x["rented_hours"], x["busy_hours"], x["idle_hours"],
                  _money(x["amount"], x["currency"]), _money(x["idle_amount"], x["currency"])) for x in b["lines"]]
        tab = table(["pool", "GPUs", "rented hours", "busy hours", "idle hours", "amount", "idle amount"], trows,
                    numeric=range(1, 7))
    else:
        trows = [(t["tenant"], t["rented_hours"], t["idle_hours"], _money(t["amount"], t["currency"]),
                  _money(t["idle_amount"], t["currency"])) for t in b["tenants"]]
        tab = table(["tenant", "rented hours", "idle hours", "amount", "idle amount"], trows, numeric=range(1, 5))
    period = (f"{iso(b['start'])} to {iso(b['end'])}")
    price = (f' <b class="default-price">Note: {esc(data.price_note)}.</b>' if data.price_note else "")
    return Section("billing", title, f'<p class="note"><b>{esc(totals)}</b>, periods from {esc(period)}'
                   f"{esc(through)}, from the billing ledger.{price}</p>" + chart + tab, json_url)


# -- one incident ------------------------------------------------------------------------
INCIDENT, PEER = "#d1242f", "#8c959f"


def incident_sections(found: dict) -> list[Section]:
    a = found["alert"]
    t0, t1 = found["start"], found["end"]
    spans = [(a["started_at"], a["resolved_at"] or t1, kind_colors().get(a["kind"], "#9498a0"))]
    markers = [Marker(a["detected_at"], f"detected {iso(a['detected_at'])}", charts.INK, "◆")]
    if found.get("empty"):
        return [Section("telemetry", "Telemetry", empty(found["empty"]))]
    out = []
    gpus = found["gpus"]
    peers = sum(g["role"] == "peer" for g in gpus)
    for key, name, unit, scale in (("util_pct", "Utilization", "%", 1.0), ("sm_clock_mhz", "SM clock", " MHz", 1.0),
                                   ("mem_used_bytes", "Memory used", " GB", 1e9), ("power_w", "Power", " W", 1.0)):
        series = []
        for g in sorted(gpus, key=lambda g: g["role"] == "incident"):      # the incident's GPU drawn last, on top
            pts = [(t, None if v is None else v / scale) for t, v in zip(g["minute"], g[key])]
            if g["role"] == "incident":
                series.append(Series(f"{g['node']} GPU {g['gpu_index']}", pts, INCIDENT, width=2.2))
            else:
                series.append(Series(f"{g['node']} GPU {g['gpu_index']}", pts, PEER, width=1.1, opacity=0.7,
                                     legend=False))
        if peers:
            series.append(Series(f"{peers} other GPUs of job {a['job']}", [], PEER))
        out.append(Section(f"gpu-{key}", name, charts.lines(
            f"incident-{key}", f"{name} around the incident", series, t0, t1, charts.LineStyle(
                unit=unit, spans=spans, markers=markers, y_max=100 if key == "util_pct" else None, height=200))))
    host = found["host"]
    if host["minute"]:
        series = [Series("iowait %", list(zip(host["minute"], host["iowait_pct"])), charts.color(1)),
                  Series("host CPU %", list(zip(host["minute"], host["cpu_util_pct"])), charts.color(6)),
                  Series("GPU utilization % (node mean)", list(zip(host["minute"], host["gpu_util_pct"])),
                         charts.color(0))]
        out.append(Section("host", f"Host {host['node']}", charts.lines(
            "incident-host", "Host metrics", series, t0, t1, charts.LineStyle(
                unit="%", spans=spans, markers=markers, y_max=100, height=200))))
    return out
