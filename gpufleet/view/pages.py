"""The HTML documents: the fleet page, an incident's page and the report. Each is one self-contained document:
styles and the one small script (the heat map's read-out under the pointer) inline, charts as inline SVG, no
request for anything else (the icon too is inline)."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from urllib.parse import urlencode

from gpufleet import __version__
from gpufleet.view import sections as sec
from gpufleet.view.charts import esc
from gpufleet.view.data import FleetData, Window, iso

STYLE = """
:root{--ink:#1f2328;--muted:#656d76;--line:#d8dee4;--bg:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;color:var(--ink);
background:var(--bg)}
header{background:#fff;border-bottom:1px solid var(--line);padding:14px 24px}
header h1{font-size:20px;margin:0 0 2px}
header p{margin:0;color:var(--muted)}
nav a{margin-right:14px}
main{max-width:1180px;margin:0 auto;padding:16px 24px 40px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:0 0 16px}
section h2{font-size:17px;margin:0 0 6px;display:flex;justify-content:space-between;align-items:baseline}
section h2 a{font-size:12px;font-weight:normal}
h3{font-size:14px;margin:14px 0 6px}
h3 small{color:var(--muted);font-weight:normal;margin-left:8px}
a{color:#0969da;text-decoration:none}
a:hover{text-decoration:underline}
.note{color:var(--muted);margin:4px 0 8px}
.empty{background:var(--bg);border:1px dashed var(--line);border-radius:6px;padding:12px;color:var(--muted)}
table{border-collapse:collapse;width:100%;margin:8px 0;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.incidents td:nth-child(6){max-width:560px}
.ev{display:inline-block;background:var(--bg);border-radius:4px;padding:0 5px;margin:2px 2px 0 0;font-size:12px}
.ev i{color:var(--muted);font-style:normal}
.kind{color:#fff;border-radius:4px;padding:1px 6px;font-size:12px;white-space:nowrap}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:8px 18px}
.scroll{overflow-x:auto}
svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}
dt{color:var(--muted)}
dd{margin:0}
.tip{position:absolute;display:none;background:#1f2328;color:#fff;font-size:12px;padding:3px 7px;border-radius:4px;
pointer-events:none;white-space:nowrap}
footer{color:var(--muted);font-size:12px;text-align:center;padding:8px}
"""

# The heat map's read-out: which GPU, when, and the cell's value under the pointer (the cells are one PNG).
SCRIPT = """
(function(){
var tip=document.createElement('div');tip.className='tip';document.body.appendChild(tip);
var maps=document.querySelectorAll('svg[data-chart=heatmap]');
for(var k=0;k<maps.length;k++){(function(svg){
var a=function(n){return svg.getAttribute(n);};
var rows=JSON.parse(a('data-rows')),cells=atob(a('data-cells')),cols=+a('data-cols'),left=+a('data-left'),
tenants=JSON.parse(a('data-tenants')||'[]'),tc=atob(a('data-tenant-cells')||''),
top=+a('data-top'),rh=+a('data-row-h'),pw=+a('data-plot-w'),t0=+a('data-t0'),b=+a('data-bucket');
svg.addEventListener('mousemove',function(e){
var r=svg.getBoundingClientRect(),s=svg.viewBox.baseVal.width/r.width;
var c=Math.floor(((e.clientX-r.left)*s-left)/pw*cols),i=Math.floor(((e.clientY-r.top)*s-top)/rh);
if(c<0||c>=cols||i<0||i>=rows.length){tip.style.display='none';return;}
var v=cells.charCodeAt(i*cols+c),t=new Date((t0+c*b)*1000).toISOString().slice(0,16).replace('T',' ');
var what=v==255?'no telemetry':v==254?'not rented':v>=128?(v-128)+'% utilization, idle':v+'% utilization';
var k=2*(i*cols+c),ti=tc.length>k+1?tc.charCodeAt(k)+256*tc.charCodeAt(k+1):0;
var who=v==255||v==254?'':ti?'rented by '+tenants[ti-1]+' \\u00b7 ':'';
tip.textContent=rows[i]+' \\u00b7 '+t+' UTC \\u00b7 '+who+what;tip.style.display='block';
tip.style.left=(e.pageX+12)+'px';tip.style.top=(e.pageY+12)+'px';});
svg.addEventListener('mouseleave',function(){tip.style.display='none';});
})(maps[k]);}
})();
"""


def document(title: str, header: str, sections: Sequence[sec.Section], refresh_s: int = 0, footer: str = "",
             nav: bool = True) -> str:
    """One HTML document: a header, the sections in order, a footer."""
    meta = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s > 0 else ""
    links = ('<nav>' + "".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections) + "</nav>"
             if nav and len(sections) > 1 else "")
    body = "".join(
        f'<section id="{esc(s.id)}" data-section="{esc(s.id)}"><h2>{esc(s.title)}'
        + (f'<a class="json" href="{esc(s.json)}">JSON</a>' if s.json else "") + f"</h2>{s.body}</section>"
        for s in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">{meta}'
            f'<link rel="icon" href="data:,"><title>{esc(title)}</title><style>{STYLE}</style></head>'
            f"<body><header>{header}{links}</header><main>{body}</main>"
            f"<footer>{footer}</footer><script>{SCRIPT}</script></body></html>")


def fleet_page(data: FleetData, w: Window, demand_hours: float, ahead_hours: float, refresh_s: int = 0,
               live: bool = True) -> str:
    """The page an operator opens every morning: what is wasting money or slowing tenants now, and since when."""
    latest = data.latest()
    demand_w = Window(w.end - demand_hours * 3600, w.end, w.tenant)
    parts = [sec.waste_section(data, w), sec.heatmap_section(data, w), sec.alerts_section(data, w),
             sec.usage_section(data, w),
             sec.demand_section(data, demand_w, ahead_hours * 3600), sec.billing_section(data, w)]
    spans = " · ".join(f'<a href="?{urlencode({"hours": h})}">{label}</a>'
                       for h, label in ((6, "6 h"), (24, "24 h"), (168, "7 days")))
    state = (f"telemetry up to {iso(latest)}" if latest else "no telemetry stored yet") + \
        (f"; refreshes every {refresh_s} s" if refresh_s and live else "")
    header = (f"<h1>Fleet at {esc(iso(w.end))}</h1><p>The last {w.hours:g} hours ({esc(state)}). "
              f"Show the last {spans}.</p>")
    footer = f"gpufleet {esc(__version__)} · database {esc(data.store.database)}"
    return document(f"gpufleet · fleet at {iso(w.end)}", header, parts, refresh_s if live else 0, footer)


def incident_page(found: dict) -> str:
    a = found["alert"]
    where = a["node"] + (f" GPU {a['gpu_uuid']}" if a["gpu_uuid"] else "") + (f", job {a['job']}" if a["job"] else "")
    facts = [("status", a["status"]), ("severity", a["severity"]), ("started", iso(a["started_at"])),
             ("detected", iso(a["detected_at"])), ("resolved", iso(a["resolved_at"]) or "not yet"),
             ("node", a["node"]), ("GPU", a["gpu_uuid"] or ""), ("job", a["job"] or ""),
             ("tenant", a["tenant"] or ""), ("pool", a["pool"] or ""), ("score", f"{a['score']:.3f}"),
             ("summary", a["summary"]), ("resolution", a["resolution"] or "")]
    facts += [(f"evidence: {k}", v) for k, v in a["evidence"].items()]
    dl = "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if v != "") + "</dl>"
    peers = sum(g["role"] == "peer" for g in found["gpus"])
    note = (f'<p class="note">Per minute from {esc(iso(found["start"]))} to {esc(iso(found["end"]))}; the incident '
            f"shaded, its detection marked ◆" + (f"; thin lines: {peers} other GPUs of job {esc(a['job'])}"
                                                   if peers else "") + ".</p>")
    parts = [sec.Section("incident", "Incident", dl + note, f"v1/incident?{urlencode({'id': a['id']})}"),
             *sec.incident_sections(found)]
    back = urlencode({"to": int(max(a["resolved_at"] or a["detected_at"], a["detected_at"]) + 60), "hours": 6})
    header = (f"<h1>{esc(a['kind'])} on {esc(where)}</h1><p>{esc(a['summary'])} · "
              f'<a href="{sec.runbook_link(a["kind"])}">the runbook</a> · '
              f'<a href="./?{back}">the fleet then</a> · <a href="./">the fleet now</a></p>')
    return document(f"gpufleet · {a['kind']} on {a['node']}", header, parts, nav=False,
                    footer=f"gpufleet {esc(__version__)} · incident {esc(a['id'])}")


def report(data: FleetData, w: Window, ahead_hours: float = 24) -> str:
    """The report of a period, for finance or (with a tenant) a customer: one file, readable without network."""
    if w.tenant:
        demand = sec.tenant_demand_section(data, w)
    else:
        demand = sec.demand_section(data, w, ahead_hours * 3600, now_label="end of the period")
    parts = [sec.waste_section(data, w, links=False, title="Waste at the end of the period"),
             sec.heatmap_section(data, w, links=False, idle_title="Idle at the end of the period"),
             sec.alerts_section(data, w, links=False, firing_title="Still firing at the end of the period"),
             sec.usage_section(data, w), demand, sec.billing_section(data, w, month=False)]
    parts = [sec.Section(s.id, s.title, s.body) for s in parts]       # no endpoint to link to
    who = f" for {w.tenant}" if w.tenant else ""
    made = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"<h1>GPU fleet report{esc(who)}</h1><p>{esc(iso(w.start))} to {esc(iso(w.end))} "
              f"({w.hours:g} hours). All times UTC.</p>")
    footer = f"made by gpufleet {esc(__version__)} report at {esc(made)} from database {esc(data.store.database)}"
    return document(f"gpufleet report{who}, {iso(w.start)} to {iso(w.end)}", header, parts, footer=footer)
