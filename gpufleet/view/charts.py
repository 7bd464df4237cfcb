"""The view's charts, drawn on the server as inline SVG: no script library, no font or file from elsewhere.

Each function takes plain values (those of ``data.py``) and returns one ``<svg class="chart">`` element with
``data-chart`` (its name) and ``data-marks`` (how many data marks it drew: cells, bars, points), so a page can be
checked for charts with data. Text is escaped; colours are fixed here.
"""
from __future__ import annotations

import base64
import datetime as dt
import functools
import html
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufleet.view import png

FONT = "system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif"
INK, MUTED, GRID = "#1f2328", "#656d76", "#e6e8eb"
PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e",
           "#9498a0")
def kind_colors() -> dict[str, str]:
    """Each alert kind's colour (the registry of detectors, and the stream's own kinds)."""
    from gpufleet.models.detectors import colours
    return colours()
IDLE, NOT_RENTED, NO_DATA = (228, 87, 46), (208, 211, 215), (247, 248, 249)
UNDERUSED = (176, 122, 161)         # the underuse alert's colour
# viridis at five stops: utilization 0 (dark) to 100 % (yellow)
VIRIDIS = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)),
           (1.0, (253, 231, 37)))


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def hex_rgb(rgb: tuple[int, int, int]) -> str:
    r, g, b = rgb
    return f"#{r:02x}{g:02x}{b:02x}"


@functools.lru_cache(maxsize=4096)       # a heat map asks for the same few hundred shades tens of thousands of times
def viridis(share: float) -> tuple[int, int, int]:
    share = min(max(share, 0.0), 1.0)
    for (a, ca), (b, cb) in zip(VIRIDIS, VIRIDIS[1:]):
        if share <= b:
            f = (share - a) / (b - a)
            return tuple(round(x + (y - x) * f) for x, y in zip(ca, cb))    # type: ignore[return-value]
    return VIRIDIS[-1][1]


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# -- scales and ticks ------------------------------------------------------------------
def nice_step(span: float, ticks: int = 4) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = nice_step(value)
    return math.ceil(value / step) * step


TIME_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400, 7 * 86400)


def time_ticks(t0: float, t1: float, most: int = 8) -> list[tuple[float, str]]:
    step = next((s for s in TIME_STEPS if (t1 - t0) / s <= most), TIME_STEPS[-1])
    out: list[tuple[float, str]] = []
    t = float(math.ceil(t0 / step) * step)
    while t <= t1:
        d = dt.datetime.fromtimestamp(t, dt.UTC)
        if step >= 86400:
            label = d.strftime("%b %d")
        elif d.hour == 0 and d.minute == 0:
            label = d.strftime("%b %d")
        else:
            label = d.strftime("%H:%M")
        out.append((t, label))
        t += step
    return out


def fmt_number(v: float) -> str:
    if v is None:
        return ""
    a = abs(v)
    if a >= 1e12:
        return f"{v / 1e12:.3g}T"
    if a >= 1e9:
        return f"{v / 1e9:.3g}G"
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


# -- the SVG builder -------------------------------------------------------------------
@dataclass
class Svg:
    chart: str
    width: int
    height: int
    label: str
    parts: list[str] = field(default_factory=list)
    marks: int = 0
    attrs: dict[str, str] = field(default_factory=dict)

    def add(self, part: str) -> None:
        self.parts.append(part)

    def text(self, x: float, y: float, text, anchor: str = "start", size: int = 11, fill: str = INK) -> None:
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}" '
                 f'font-weight="normal">{esc(text)}</text>')

    def line(self, x1, y1, x2, y2, stroke=GRID, width: float = 1, dash: str | None = None) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
                 f'stroke-width="{width}"{d}/>')

    def rect(self, x, y, w, h, fill, title: str | None = None, extra: str = "") -> None:
        t = f"<title>{esc(title)}</title>" if title else ""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}"'
                 f'{extra}>{t}</rect>')

    def legend(self, items: Sequence[tuple[str, str]], x: float, y: float, kind: str = "box") -> float:
        """Draw the items from ``x``; returns where the next item would go."""
        for label, fill in items:
            if kind == "line":
                self.line(x, y - 4, x + 14, y - 4, stroke=fill, width=2.5)
            else:
                self.rect(x, y - 9, 10, 10, fill)
            self.text(x + 18, y, label, fill=MUTED)
            x += 26 + 6.5 * len(label)
        return x

    def render(self) -> str:
        extra = "".join(f' {k}="{esc(v)}"' for k, v in self.attrs.items())
        return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{esc(self.chart)}" '
                f'data-marks="{self.marks}" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" role="img" aria-label="{esc(self.label)}" '
                f'font-family="{esc(FONT)}"{extra}>' + "".join(self.parts) + "</svg>")


def _time_axis(svg: Svg, t0: float, t1: float, box: tuple[float, float, float, float], grid: bool = True) -> None:
    """Time ticks from ``t0`` to ``t1`` under the plot ``box`` (x0, y_top, x1, y_bottom), grid lines if asked."""
    x0, y_top, x1, y_bottom = box
    span = max(t1 - t0, 1e-9)
    for t, label in time_ticks(t0, t1, most=max(2, int((x1 - x0) / 90))):
        x = x0 + (t - t0) / span * (x1 - x0)
        if grid:
            svg.line(x, y_top, x, y_bottom)
        svg.text(x, y_bottom + 14, label, anchor="middle", fill=MUTED)


# -- heat map --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Grid:
    """Where the heat map's rows and columns are drawn."""

    left: int
    top: int
    plot_w: int
    row_h: int
    rows: int


def heatmap(data: dict, width: int = 1100, chart: str = "heatmap") -> str:
    """GPUs (rows, grouped by node) by time buckets (columns): mean utilization, not rented in grey, idle
    windows in red; GPUs idle now marked at the right with how long and what it cost so far."""
    gpus, n = data["gpus"], data["columns"]
    rows = len(gpus)
    row_h = max(2, min(12, 720 // max(rows, 1)))
    grid = _Grid(170, 26, width - 170 - 190, row_h, rows)
    svg = Svg(chart, width, grid.top + rows * row_h + 46, "Utilization by node and GPU")
    codes = _cells(svg, grid, gpus, n)
    _rows(svg, grid, gpus)
    _now(svg, grid, data)
    y_bottom = grid.top + rows * row_h            # the time axis
    _time_axis(svg, data["start"], data["end"], (grid.left, grid.top, grid.left + grid.plot_w, y_bottom), grid=False)
    svg.line(grid.left, y_bottom, grid.left + grid.plot_w, y_bottom, stroke=MUTED)
    lx, ly = grid.left, 14                        # legend: the scale, then the three states
    for k in range(50):
        svg.rect(lx + k * 2, ly - 9, 2.2, 10, hex_rgb(viridis(k / 49)))
    svg.text(lx - 4, ly, "0%", anchor="end", size=10, fill=MUTED)
    svg.text(lx + 104, ly, "100% utilization", size=10, fill=MUTED)
    svg.legend([("idle window", hex_rgb(IDLE)), ("underused now", hex_rgb(UNDERUSED)),
                ("not rented", hex_rgb(NOT_RENTED)), ("no telemetry", "#eceef0")], lx + 210, ly)
    svg.attrs.update({"data-t0": str(data["start"]), "data-bucket": str(data["bucket_s"]), "data-cols": str(n),
                      "data-left": str(grid.left), "data-top": str(grid.top), "data-row-h": str(row_h),
                      "data-plot-w": str(grid.plot_w),
                      "data-rows": json.dumps([f"{g['node']} GPU {g['gpu_index']}" for g in gpus],
                                              separators=(",", ":")),
                      "data-cells": base64.b64encode(bytes(codes)).decode(),
                      # the rental of each cell: an index into data-tenants (+1; 0: not rented), 2 bytes a cell
                      "data-tenants": json.dumps(data.get("tenants", []), separators=(",", ":")),
                      "data-tenant-cells": base64.b64encode(b"".join(
                          (t + 1).to_bytes(2, "little") for g in gpus
                          for t in g.get("tenant_col", [-1] * n))).decode()})
    return svg.render()


def _cells(svg: Svg, grid: _Grid, gpus: list[dict], n: int) -> bytearray:
    """The cells as one image (a pixel a cell); returns each cell's code for the page's tooltips."""
    codes = bytearray()
    pixels = bytearray()
    for g in gpus:
        for util, rented, idle in zip(g["util_pct"], g["rented"], g["idle_share"]):
            if util is None:
                rgb, code = NO_DATA, 255
            elif idle >= 0.5:
                rgb, code = IDLE, 128 + round(util)
            elif not rented:
                rgb, code = NOT_RENTED, 254
            else:
                rgb, code = viridis(util / 100), round(util)
            pixels.extend(rgb)
            codes.append(code)
            svg.marks += util is not None
    if grid.rows:
        image = base64.b64encode(png.encode(n, grid.rows, bytes(pixels))).decode()
        svg.add(f'<image class="cells" x="{grid.left}" y="{grid.top}" width="{grid.plot_w}" '
                f'height="{grid.rows * grid.row_h}" preserveAspectRatio="none" '
                f'style="image-rendering:pixelated;image-rendering:crisp-edges" href="data:image/png;base64,{image}"/>')
    return codes


def _rows(svg: Svg, grid: _Grid, gpus: list[dict]) -> None:
    """Node groups: a rule between nodes, the node's name where there is room; each GPU's name where rows allow."""
    left, top, row_h = grid.left, grid.top, grid.row_h
    last_label_y = -100.0
    for i, g in enumerate(gpus):
        y = top + i * row_h
        if i == 0 or g["node"] != gpus[i - 1]["node"]:
            if i:
                svg.line(left - 4, y, left + grid.plot_w, y, stroke="#ffffff", width=1)
            if y - last_label_y >= 11:
                svg.text(left - (44 if row_h >= 10 else 8), y + min(row_h, 10) - 1, g["node"], anchor="end",
                         size=10)
                last_label_y = y
    if row_h >= 10:
        for i, g in enumerate(gpus):
            svg.text(left - 6, top + i * row_h + row_h - 2, f"GPU {g['gpu_index']}", anchor="end", size=9,
                     fill=MUTED)


def _now(svg: Svg, grid: _Grid, data: dict) -> None:
    """The GPUs idle now and underused now (busy, below the underuse threshold over the last hour), marked at the
    right with how long and what it costs."""
    index = {g["gpu_uuid"]: i for i, g in enumerate(data["gpus"])}
    currency, x = data.get("currency", ""), grid.left + grid.plot_w
    for run in data.get("idle_now", []):
        row = index.get(run["gpu_uuid"])
        if row is None:
            continue
        cy = grid.top + row * grid.row_h + grid.row_h / 2
        minutes = run["idle_s"] / 60
        cost = f" · {float(run['cost_so_far']):.2f} {currency}" if run.get("cost_so_far") else ""
        title = (f"{run['node']} GPU {run['gpu_index']} ({run['tenant']}) idle {minutes:.0f} min{cost} so far")
        svg.add(f'<path class="idle-now" d="M{x + 3},{cy:.1f} l8,-4.5 v9 z" fill="{hex_rgb(IDLE)}">'
                f"<title>{esc(title)}</title></path>")
        if grid.row_h >= 9 or len(data.get("idle_now", [])) * 11 <= grid.rows * grid.row_h:
            svg.text(x + 14, cy + 3.5, f"idle {minutes:.0f} min{cost}", size=10, fill=hex_rgb(IDLE))
    for g in data.get("underused_now", []):
        row = index.get(g["gpu_uuid"])
        if row is None:
            continue
        cy = grid.top + row * grid.row_h + grid.row_h / 2
        per_hour = f" · {float(g['waste_per_hour']):.2f} {currency}/h unused" if g.get("waste_per_hour") else ""
        title = f"{g['node']} GPU {g['gpu_index']} ({g['tenant']}) underused: {g['util_pct']:.0f}%{per_hour}"
        svg.add(f'<path class="underused-now" d="M{x + 3},{cy:.1f} l8,-4.5 v9 z" '
                f'fill="{hex_rgb(UNDERUSED)}"><title>{esc(title)}</title></path>')
        if grid.row_h >= 9:
            svg.text(x + 14, cy + 3.5, f"underused {g['util_pct']:.0f}%{per_hour.split(' unused')[0]}",
                     size=10, fill=hex_rgb(UNDERUSED))


# -- bars -----------------------------------------------------------------------------
@dataclass(frozen=True)
class BarStyle:
    """How bars are drawn: the values' unit, stacked or grouped, the chart's width, the value axis' top (None: from
    the values), how a value is written (None: the number and its unit)."""

    unit: str = ""
    stacked: bool = False
    width: int = 540
    max_value: float | None = None
    value_text: Callable[[float], str] | None = None


def bars(chart: str, label: str, rows: Sequence[tuple[str, Sequence[float | None]]],
         series: Sequence[tuple[str, str]], style: BarStyle = BarStyle()) -> str:
    """Horizontal bars, one row per label: grouped (a bar per series) or stacked."""
    unit, stacked, width, max_value, value_text = (style.unit, style.stacked, style.width, style.max_value,
                                                   style.value_text)
    bar_h = 14 if stacked else max(8, 16 // max(len(series), 1) + 4)
    row_h = (bar_h if stacked else bar_h * len(series)) + 10
    left, right, top = 150, 90, 28
    plot_bottom = top + max(len(rows), 1) * row_h
    height = plot_bottom + 22                      # room for the value axis
    svg = Svg(chart, width, height, label)
    plot_w = width - left - right
    totals = [sum(v or 0 for v in values) if stacked else max((v or 0 for v in values), default=0)
              for _, values in rows]
    top_value = max_value if max_value is not None else nice_max(max(totals, default=0))
    svg.legend(series, left, 14)
    fmt = value_text or (lambda v: f"{fmt_number(v)}{unit}")
    for k in range(0, 5):                        # the value axis: gridlines and their values
        x = left + plot_w * k / 4
        if k:
            svg.line(x, top - 4, x, plot_bottom)
        svg.text(x, plot_bottom + 14, fmt(top_value * k / 4) if top_value else "0", anchor="middle", size=10,
                 fill=MUTED)
    for r, (name, values) in enumerate(rows):
        y = top + r * row_h
        svg.text(left - 8, y + (row_h - 10) / 2 + 4, name if len(name) <= 22 else name[:21] + "…", anchor="end")
        x = left
        for s, ((sname, fill), v) in enumerate(zip(series, values)):
            if v is None:
                continue
            w = plot_w * min(v / top_value, 1.0) if top_value else 0
            if stacked:
                svg.rect(x, y, w, bar_h, fill, title=f"{name}: {sname} {fmt(v)}")
                x += w
            else:
                yy = y + s * bar_h
                svg.rect(left, yy, w, bar_h - 2, fill, title=f"{name}: {sname} {fmt(v)}")
                svg.text(left + w + 4, yy + bar_h - 4, fmt(v), size=10, fill=MUTED)
            svg.marks += 1
        if stacked:
            svg.text(x + 4, y + bar_h - 3, fmt(totals[r]), size=10, fill=MUTED)
    svg.line(left, top - 4, left, plot_bottom, stroke=MUTED)
    svg.line(left, plot_bottom, left + plot_w, plot_bottom, stroke=MUTED)
    return svg.render()


# -- lines over time ---------------------------------------------------------------------
@dataclass
class Series:
    name: str
    points: Sequence[tuple[float, float | None]]
    color: str
    width: float = 1.8
    dash: str | None = None
    opacity: float = 1.0
    legend: bool = True
    step: bool = False


@dataclass
class Marker:
    t: float
    label: str
    color: str
    symbol: str = "▲"


@dataclass(frozen=True)
class LineStyle:
    """What a line chart shows beside its lines: the values' unit, a band (ts, low, high) and its label and
    colour, vertical markers (events), shaded spans (an incident), a "now" rule between history and forecast and
    its label, the value axis' top (None: from the values) and how a value is written, the size, the axis' label."""

    unit: str = ""
    band: Sequence[tuple[float, float, float]] | None = None
    band_label: str = "p10–p90"
    band_color: str = "#4269d0"
    markers: Sequence[Marker] = ()
    spans: Sequence[tuple[float, float, str]] = ()
    now: float | None = None
    y_max: float | None = None
    width: int = 1100
    height: int = 230
    y_format: Callable[[float], str] | None = None
    now_label: str = "now"
    y_label: str = ""


def lines(chart: str, label: str, series: Sequence[Series], t0: float, t1: float,
          style: LineStyle = LineStyle()) -> str:
    """Lines over time (gaps where a value is None), styled by ``style``."""
    st = style
    unit, band, band_label, band_color, markers, spans = (st.unit, st.band, st.band_label, st.band_color, st.markers,
                                                          st.spans)
    now, y_max, width, height, y_format, now_label, y_label = (st.now, st.y_max, st.width, st.height, st.y_format,
                                                               st.now_label, st.y_label)
    left, right, top, bottom = 58, 16, 30, 24
    svg = Svg(chart, width, height, label)
    pw, ph = width - left - right, height - top - bottom
    values = [v for s in series for _, v in s.points if v is not None]
    if band:
        values += [hi for _, _, hi in band]
    top_v = y_max if y_max is not None else nice_max(max(values, default=0) * 1.05)
    span = max(t1 - t0, 1e-9)

    def x(t):
        return left + (min(max(t, t0), t1) - t0) / span * pw

    def y(v):
        return top + ph - min(max(v, 0), top_v) / top_v * ph
    fmt = y_format or (lambda v: f"{fmt_number(v)}{unit}")
    step = nice_step(top_v)
    tick = 0.0
    while tick <= top_v + 1e-9:
        svg.line(left, y(tick), left + pw, y(tick))
        svg.text(left - 6, y(tick) + 4, fmt(tick), anchor="end", size=10, fill=MUTED)
        tick += step
    for s0, s1, fill in spans:
        svg.rect(x(s0), top, x(s1) - x(s0), ph, fill, extra=' opacity="0.18"')
    _time_axis(svg, t0, t1, (left, top, left + pw, top + ph), grid=False)
    if band:
        pts = [(x(t), y(hi)) for t, _, hi in band] + [(x(t), y(lo)) for t, lo, _ in reversed(band)]
        svg.add('<path class="band" d="M' + " L".join(f"{a:.1f},{b:.1f}" for a, b in pts) +
                f' Z" fill="{band_color}" opacity="0.18"/>')
        svg.marks += len(band)
    for s in series:
        path, pen = [], False
        prev: float | None = None
        for t, v in s.points:
            if v is None or not t0 <= t <= t1:
                pen = False
                continue
            if s.step and pen and prev is not None:
                path.append(f"L{x(t):.1f},{y(prev):.1f}")
            path.append(("L" if pen else "M") + f"{x(t):.1f},{y(v):.1f}")
            pen, prev = True, v
            svg.marks += 1
        if path:
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            svg.add(f'<path d="{" ".join(path)}" fill="none" stroke="{s.color}" stroke-width="{s.width}" '
                    f'opacity="{s.opacity}" stroke-linejoin="round"{dash}><title>{esc(s.name)}</title></path>')
    for m in markers:
        if not t0 <= m.t <= t1:
            continue
        svg.line(x(m.t), top, x(m.t), top + ph, stroke=m.color, width=1, dash="2,3")
        svg.add(f'<text class="marker" x="{x(m.t):.1f}" y="{top + 9:.1f}" text-anchor="middle" font-size="10" '
                f'fill="{m.color}">{esc(m.symbol)}<title>{esc(m.label)}</title></text>')
        svg.marks += 1
    if now is not None and t0 < now < t1:
        svg.line(x(now), top - 4, x(now), top + ph, stroke=INK, width=1, dash="4,3")
        svg.text(x(now) + 3, top + ph - 4, now_label, size=10, fill=MUTED)
    svg.line(left, top + ph, left + pw, top + ph, stroke=MUTED)
    if y_label:                                   # the y axis's unit, above its values
        svg.text(left - 6, top - 6, y_label, anchor="end", size=10, fill=MUTED)
    x_next = svg.legend([(s.name, s.color) for s in series if s.legend], left, 14, kind="line")
    if band:
        svg.legend([(band_label, band_color + "55")], x_next, 14)
    return svg.render()


# -- incidents on a timeline ------------------------------------------------------------------
def timeline(chart: str, incidents: Sequence[dict], t0: float, t1: float, width: int = 1100, most: int = 40) -> str:
    """One lane per incident, from when it started to when it resolved (or on, while firing), by kind."""
    shown = sorted(incidents, key=lambda a: a["started_at"])[-most:]
    row_h, left, top = 16, 250, 26
    height = top + max(len(shown), 1) * row_h + 24
    svg = Svg(chart, width, height, "Incidents over time")
    pw = width - left - 16
    span = max(t1 - t0, 1e-9)

    def x(t):
        return left + (min(max(t, t0), t1) - t0) / span * pw
    _time_axis(svg, t0, t1, (left, top - 4, left + pw, top + len(shown) * row_h))
    for i, a in enumerate(shown):
        y = top + i * row_h
        end = a["resolved_at"] if a["resolved_at"] is not None else t1
        where = a["node"] + (f" {a['gpu_uuid'][:12]}" if a.get("gpu_uuid") else "") + \
            (f" {a['job']}" if a.get("job") and not a.get("gpu_uuid") else "")
        svg.text(left - 8, y + 11, f"{a['kind']} · {where}", anchor="end", size=10)
        fill = kind_colors().get(a["kind"], color(i))
        status = "firing" if a["resolved_at"] is None else "resolved"
        svg.rect(x(a["started_at"]), y + 2, max(x(end) - x(a["started_at"]), 2), row_h - 5, fill,
                 title=f"{a['summary']} ({status})",
                 extra=' opacity="0.95"' if status == "firing" else ' opacity="0.55"')
        svg.marks += 1
    svg.legend(list(kind_colors().items()), left, 14)
    return svg.render()
