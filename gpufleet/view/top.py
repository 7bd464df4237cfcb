"""``gpufleet top``: the fleet in a terminal, like nvtop for a fleet. Pools with utilization bars, the idlest rented
GPUs and what they cost, the alerts firing; redrawn in place every few seconds; ``q`` quits, ``r`` reads now.

The layout is a plain function of a :class:`Snapshot` (``render``), so it is the same on a terminal (curses, from
the standard library) and with ``--once`` on standard output.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from gpufleet.view.data import FleetData, Window, iso

STYLES = ("title", "head", "bar", "idle", "alert", "critical", "dim", "")


@dataclass
class Snapshot:
    at: float | None                   # end of the latest telemetry, None when there is none
    pools: list[dict] = field(default_factory=list)
    idlest: list[dict] = field(default_factory=list)
    firing: list[dict] = field(default_factory=list)
    currency: str = "USD"
    minutes: int = 5
    read_s: float = 0.0
    waste: dict = field(default_factory=dict)        # FleetData.waste's total and pools
    price_note: str = ""                              # where the prices are the default flat one


def snapshot(data: FleetData, minutes: int = 5, idlest: int = 10) -> Snapshot:
    """What top shows, read now: the pools over the last ``minutes`` of telemetry, the idlest rented GPUs over the
    last 15 minutes, and the incidents firing."""
    began = time.perf_counter()
    at = data.latest()
    if at is None:
        return Snapshot(None, read_s=time.perf_counter() - began)
    w = Window(at - minutes * 60, at)
    usage = data.usage(w)
    firing = data.alerts(Window(at - 3600, at))["firing"]
    waste = data.waste(at)
    return Snapshot(at, usage["pools"], data.idlest(at, 15, idlest), firing, usage["currency"], minutes,
                    time.perf_counter() - began, {"underuse_pct": waste["underuse_pct"], "total": waste["total"],
                                                  "pools": waste["pools"]}, data.price_note or "")


def bar(share: float, width: int) -> str:
    """A bar of ``width`` cells filled to ``share`` (0..1), in eighths."""
    share = min(max(share, 0.0), 1.0)
    eighths = round(share * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part else ""
    return ("█" * full + partial).ljust(width)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def render(snap: Snapshot, width: int, height: int, interval_s: float = 5.0) -> list[tuple[str, str]]:
    """The screen as lines of (text, style), at most ``height`` lines of at most ``width`` characters."""
    out: list[tuple[str, str]] = []
    when = f"fleet at {iso(snap.at)}" if snap.at else "no telemetry stored yet"
    out.append((f"gpufleet top · {when} · every {interval_s:g} s · q quits, r reads now", "title"))
    if snap.at is None:
        out.append(("", ""))
        out.append(("Nothing to show: start the collectors and the workers, or fill the store with `gpufleet "
                    "replay FILE` or `gpufleet demo`.", "dim"))
        return [(_cut(t, width), s) for t, s in out[:height]]
    bar_w = max(10, min(40, width - 80))
    waste = snap.waste.get("total")
    if waste:
        money = f"{Decimal(waste['waste_per_hour']):,.2f} {snap.currency}"
        today, month = waste["today"], waste["month"]
        out.append((f"WASTE {money}/h now: {waste['idle']} idle, {waste['underused']} underused (<"
                    f"{snap.waste['underuse_pct']:g}% last hour) of {waste['rented']} rented · paid by tenants "
                    f"today {Decimal(today['tenant_waste_amount']):,.2f}, month "
                    f"{Decimal(month['tenant_waste_amount']):,.2f} {today['currency']}", "idle"))
    if snap.price_note:
        out.append((f"Note: {snap.price_note}", "dim"))
    out.append(("", ""))
    out.append((f"POOLS (last {snap.minutes} min)".ljust(22 + bar_w + 3) + "  util   GPUs  rented  rented util"
                "  idle  under  waste/h", "head"))
    by_pool = {p["pool"]: p for p in snap.waste.get("pools", [])}
    for p in snap.pools:
        util = p["util_pct"] or 0.0
        rented_util = "" if p["rented_util_pct"] is None else f"{p['rented_util_pct']:.0f}%"
        rented = p["rented_gpu_hours"] * 60 / snap.minutes
        w = by_pool.get(p["pool"])
        wasted = (f"  {w['idle']:4d}  {w['underused']:5d}  {Decimal(w['waste_per_hour']):7,.2f}" if w else "")
        out.append((f"{_cut(p['pool'], 20):20}  [{bar(util / 100, bar_w)}] {util:4.0f}%  {p['gpus_mean']:5.1f}  "
                    f"{rented:6.1f}  {rented_util:>11}{wasted}", "bar"))
    if not snap.pools:
        out.append(("  (no telemetry in the last minutes)", "dim"))
    out.append(("", ""))
    out.append(("RENTED GPUs IDLE NOW, THEN THE LEAST USED (last 15 min)", "head"))
    wide = width >= 100                  # the pool and job columns where there is room
    head = f"{'node':12} {'GPU':>3}  " + (f"{'pool':18} " if wide else "") + f"{'tenant':14} " + \
        (f"{'job':14} " if wide else "") + f"{'util':>5}  {'idle for':>8}  {'cost so far':>13}"
    out.append((head, "head"))
    for g in snap.idlest:
        idle_for = f"{(snap.at - g['idle_since']) / 60:.0f} min" if g["idle_since"] else ""
        cost = f"{Decimal(g['cost_so_far']):,.2f} {snap.currency}" if g["cost_so_far"] else ""
        row = f"{_cut(g['node'], 12):12} {g['gpu_index']:>3}  " + (f"{_cut(g['pool'], 18):18} " if wide else "") + \
            f"{_cut(g['tenant'], 14):14} " + (f"{_cut(g['job'] or '', 14):14} " if wide else "") + \
            (f"{g['util_pct']:4.0f}%" if g["util_pct"] is not None else "    -") + f"  {idle_for:>8}  {cost:>13}"
        out.append((row, "idle" if g["idle_since"] else ""))
    if not snap.idlest:
        out.append(("  (no GPU rented)", "dim"))
    out.append(("", ""))
    out.append((f"FIRING ALERTS ({len(snap.firing)})", "head"))
    for a in snap.firing:
        where = a["node"] + (f" {a['gpu_uuid'][:12]}" if a["gpu_uuid"] else "") + (f" {a['job']}" if a["job"] else "")
        since = iso(a["started_at"])[11:16]
        out.append((f"{a['kind']:13} {a['severity']:8} {since}  {_cut(where, 34):34} {a['summary']}",
                    "critical" if a["severity"] == "critical" else "alert"))
    if not snap.firing:
        out.append(("  (nothing firing)", "dim"))
    lines = [(_cut(t, width), s) for t, s in out]
    if len(lines) > height:
        lines = lines[:height - 1] + [(_cut(f"... {len(lines) - height + 1} more lines: a taller terminal shows "
                                            "them", width), "dim")]
    return lines


def run(read: Callable[[], Snapshot], interval_s: float, errors: tuple[type[BaseException], ...] = ()) -> None:
    """The live view in the terminal until ``q``: ``read`` is called every ``interval_s`` seconds; a read that
    fails with one of ``errors`` is shown on the last line and tried again at the next refresh."""
    import curses

    def loop(screen) -> None:
        curses.curs_set(0)
        screen.timeout(100)
        colors = {}
        if curses.has_colors():
            curses.use_default_colors()
            for i, (name, fg) in enumerate((("title", curses.COLOR_CYAN), ("head", curses.COLOR_YELLOW),
                                            ("bar", curses.COLOR_GREEN), ("idle", curses.COLOR_RED),
                                            ("alert", curses.COLOR_MAGENTA), ("critical", curses.COLOR_RED)), 1):
                curses.init_pair(i, fg, -1)
                colors[name] = curses.color_pair(i) | (curses.A_BOLD if name in ("title", "head", "critical")
                                                       else 0)
        colors["dim"] = curses.A_DIM
        snap, problem, due = None, "", 0.0
        while True:
            if time.monotonic() >= due:
                try:
                    snap, problem = read(), ""
                except errors as err:
                    problem = f"read failed, trying again in {interval_s:g} s: {str(err).splitlines()[0]}"
                due = time.monotonic() + interval_s
                draw(screen, snap, problem, colors, interval_s)
            key = screen.getch()
            if key in (ord("q"), ord("Q")):
                return
            if key in (ord("r"), ord("R")):
                due = 0.0
            elif key == curses.KEY_RESIZE:
                draw(screen, snap, problem, colors, interval_s)

    curses.wrapper(loop)


def draw(screen, snap: Snapshot | None, problem: str, colors: dict, interval_s: float) -> None:
    import curses
    try:                  # the terminal's size as the kernel has it (curses may start from a stale LINES/COLUMNS)
        cols, rows = os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1)
        if curses.is_term_resized(rows, cols):
            curses.resizeterm(rows, cols)
    except (OSError, AttributeError, ValueError):
        pass
    height, width = screen.getmaxyx()
    screen.erase()
    lines = render(snap, width - 1, height - (1 if problem else 0), interval_s) if snap else \
        [("gpufleet top · reading the store ...", "title")]
    for y, (text, style) in enumerate(lines):
        try:
            screen.addstr(y, 0, text, colors.get(style, 0))
        except curses.error:       # the last cell of the screen cannot be written; nothing is lost
            pass
    if problem:
        try:
            screen.addstr(height - 1, 0, problem[:width - 1], colors.get("critical", 0))
        except curses.error:
            pass
    screen.refresh()
