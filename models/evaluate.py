"""Scoring alerts against ground truth, and the baselines they are compared with.

The rule: an *incident* is a firing event that opens a dedup key. It matches a
labelled fault of the same kind when its ``detected_at`` falls between the
fault's start and ten minutes after its end and it names the fault's GPU (for a
node-level fault, any GPU of that node or the node; for IO starvation, the
fault's job on that node). Precision counts matched incidents over all
incidents; recall counts faults with at least one match; the delay runs from the
fault's start (for idle, start plus the idle window) to the first match;
incidents matching no fault are false alerts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .detectors import REGISTRY, STREAM_KINDS, KindNames, colours, module

KINDS = KindNames(tuple(STREAM_KINDS))       # every detector's kind, and idle
GRACE_S = 600.0


@dataclass
class KindReport:
    kind: str
    faults: int = 0
    incidents: int = 0
    matched_incidents: int = 0
    detected_faults: int = 0
    delays_s: list[float] = field(default_factory=list)
    leak_leads_s: list[float] = field(default_factory=list)     # leaks of 30 min or more to the OOM
    leak_long: int = 0
    leak_hours: int = 0                 # leaks that grew for an hour or more
    leak_hour_hits: int = 0             # ... and were alerted within an hour of their start
    causes_checked: int = 0             # incidents matching a fault whose variant names a cause
    causes_agreed: int = 0              # ... whose evidence names that cause
    endings_checked: int = 0            # resolved incidents matching a fault whose label says how it ended
    endings_agreed: int = 0             # ... whose resolution says the same

    @property
    def ending_agreement(self) -> float | None:
        """The share of resolved incidents whose ``resolution`` agrees with how their fault ended."""
        return self.endings_agreed / self.endings_checked if self.endings_checked else None

    @property
    def cause_agreement(self) -> float | None:
        """The share of incidents that name the cause their fault's variant has."""
        return self.causes_agreed / self.causes_checked if self.causes_checked else None

    @property
    def precision(self) -> float:
        return self.matched_incidents / self.incidents if self.incidents else (1.0 if not self.faults else 0.0)

    @property
    def recall(self) -> float:
        return self.detected_faults / self.faults if self.faults else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def incidents_per_fault(self) -> float | None:
        """Incidents that match a fault, per fault found: 1.0 is one fault, one page (flapping raises it)."""
        return self.matched_incidents / self.detected_faults if self.detected_faults else None

    @property
    def false_alerts(self) -> int:
        return self.incidents - self.matched_incidents

    def delay(self, q: float) -> float | None:
        if not self.delays_s:
            return None
        d = sorted(self.delays_s)
        return d[min(len(d) - 1, int(round(q * (len(d) - 1))))]

    @property
    def leak_within_hour_share(self) -> float | None:
        """Among leaks that grew for an hour or more, the share alerted within an hour of their start."""
        return self.leak_hour_hits / self.leak_hours if self.leak_hours else None

    @property
    def leak_early_share(self) -> float | None:
        """Among leaks of 30 min or more, the share alerted at least 10 min before the out-of-memory."""
        if not self.leak_long:
            return None
        return sum(1 for lead in self.leak_leads_s if lead >= 600) / self.leak_long


@dataclass
class Report:
    kinds: dict[str, KindReport]
    gpu_hours: float

    def false_per_1000h(self, kind: str | None = None) -> float:
        n = sum(k.false_alerts for k in self.kinds.values()) if kind is None else self.kinds[kind].false_alerts
        return 1000.0 * n / self.gpu_hours if self.gpu_hours else 0.0

    def rows(self) -> list[tuple]:
        out = []
        for k in self.kinds.values():
            med, p95 = k.delay(0.5), k.delay(0.95)
            out.append((k.kind, k.faults, k.incidents, round(k.precision, 3), round(k.recall, 3), round(k.f1, 3),
                        None if med is None else round(med / 60, 1), None if p95 is None else round(p95 / 60, 1),
                        round(self.false_per_1000h(k.kind), 2),
                        None if k.incidents_per_fault is None else round(k.incidents_per_fault, 2),
                        None if k.cause_agreement is None else round(k.cause_agreement, 3),
                        None if k.ending_agreement is None else f"{k.ending_agreement:.0%} of {k.endings_checked}",
                        None if k.leak_early_share is None else f"{k.leak_early_share:.0%} of {k.leak_long}",
                        None if k.leak_within_hour_share is None else
                        f"{k.leak_within_hour_share:.0%} of {k.leak_hours}"))
        return out

    HEADERS = ["kind", "faults", "incidents", "precision", "recall", "F1", "delay_p50_min", "delay_p95_min",
               "false_per_1000_gpu_h", "incidents_per_fault", "cause_agreement", "ending_agreement",
               "leaks_alerted_10min_before_oom",
               "leaks_alerted_within_1h"]

    def to_dict(self) -> dict:
        return {"gpu_hours": round(self.gpu_hours, 1),
                "false_alerts_per_1000_gpu_hours": round(self.false_per_1000h(), 3),
                "kinds": {r[0]: dict(zip(self.HEADERS[1:], r[1:])) for r in self.rows()}}


# A fault's variant, as the fleet generators label it (the simulator's and the held-out family's words), and the
# cause an incident's evidence names, each as one family: the page must name the cause the fault has.
VARIANT_CAUSE = {
    "straggler": {"thermal": "thermal", "node_thermal": "thermal", "power_cap": "power cap",
                  "power_brake": "power brake", "node_power_brake": "power brake", "hw_slowdown": "hardware slowdown",
                  "host_slow": "host", "nvlink": "host", "pcie_link": "host", "slow_cpu": "host", "node_cpu": "host",
                  "node_network": "host"},
    "io_starvation": {"disk": "disk", "network": "network", "cpu": "host cpu"},
}
NAMED_CAUSE = {"straggler": (("thermal", "thermal"), ("power cap", "power cap"), ("power brake", "power brake"),
                             ("hardware slowdown", "hardware slowdown"), ("its host, link or input", "host")),
               "io_starvation": (("disk", "disk"), ("network", "network"), ("host cpu", "host cpu"))}


def variant_cause(fault: dict) -> str | None:
    """The cause a labelled fault's variant has (None: the label names none this evaluation knows)."""
    variants = VARIANT_CAUSE.get(fault["kind"], {})
    return variants.get(fault.get("cause") or fault.get("source") or "")


# How a leak ended, as its label says (the out-of-memory, or the job's end with the leak still growing), and the
# resolutions that say the same.
ENDINGS = {True: ("out_of_memory",), False: ("job_ended", "rental_ended", "process_ended")}


def ending_agrees(fault: dict, resolve: dict) -> bool:
    """Whether a resolve says how its (leak) fault ended: ``out_of_memory`` for one that reached it, its job's or
    process's end for one still growing when its job ended, ``no_telemetry`` for one still growing when its GPU's
    telemetry stopped (the recording's end: resolved within a minute of the fault's end); ``cleared`` for neither
    (the leak never stopped)."""
    resolution = (resolve.get("evidence") or {}).get("resolution")
    if resolution == "no_telemetry" and not fault.get("reaches_oom"):
        return abs((resolve.get("resolved_at") or 0.0) - fault["end"]) <= 60.0
    return resolution in ENDINGS[bool(fault.get("reaches_oom"))]


def named_cause(alert: dict) -> str | None:
    """The cause family an alert's evidence names."""
    text = (alert.get("evidence") or {}).get("cause") or ""
    return next((family for words, family in NAMED_CAUSE.get(alert["kind"], ()) if words in text), None)


def _matches(alert: dict, fault: dict) -> bool:
    if alert["kind"] != fault["kind"]:
        return False
    t = alert["detected_at"]
    if not fault["start"] <= t <= fault["end"] + GRACE_S:
        return False
    if fault["kind"] in REGISTRY and module(fault["kind"]).LEVEL == "job":      # a job on a node
        return alert.get("node") == fault["node"] and alert.get("job") == fault["job"]
    if fault["level"] == "node":
        return alert.get("node") == fault["node"] and (alert.get("gpu_uuid") is None or
                                                       alert["gpu_uuid"] in fault["gpus"])
    return alert.get("gpu_uuid") is not None and alert["gpu_uuid"] in fault["gpus"]


def score(labels: list[dict], alerts: list[dict], gpu_hours: float, idle_window_s: float = 600.0) -> Report:
    """Score firing alerts (``gpufleet.alert.v1`` dicts) against ground-truth labels."""
    kinds = {k: KindReport(k) for k in KINDS}
    incidents: dict[str, dict] = {}
    for a in sorted(alerts, key=lambda a: a["detected_at"]):
        if a.get("status") == "firing" and not a.get("revision") and a["kind"] in kinds:     # an incident's first
            incidents.setdefault(a["id"], a)           # repeats of one incident (at-least-once) count once
    by_kind: dict[str, list[dict]] = {k: [] for k in KINDS}
    for a in incidents.values():
        by_kind[a["kind"]].append(a)
    resolves = {a["id"]: a for a in alerts if a.get("status") == "resolved"}
    for fault in labels:
        if fault["kind"] in kinds:
            kinds[fault["kind"]].faults += 1
    for kind, report in kinds.items():
        faults = [f for f in labels if f["kind"] == kind]
        report.incidents = len(by_kind[kind])
        report.matched_incidents = sum(1 for a in by_kind[kind] if any(_matches(a, f) for f in faults))
        for f in faults:
            hits = [a for a in by_kind[kind] if _matches(a, f)]
            origin = f["start"] + (idle_window_s if kind == "idle" else 0.0)
            oom = kind in REGISTRY and REGISTRY[kind].oom_goals
            long_leak = oom and f.get("reaches_oom", True) and f.get("oom_at") and \
                f["oom_at"] - f["start"] >= 1800
            hour_leak = oom and f["end"] - f["start"] >= 3600
            report.leak_long += bool(long_leak)
            report.leak_hours += hour_leak
            expected = variant_cause(f)
            if expected is not None:
                report.causes_checked += len(hits)
                report.causes_agreed += sum(1 for a in hits if named_cause(a) == expected)
            if oom and "reaches_oom" in f:
                ended = [resolves[a["id"]] for a in hits if a["id"] in resolves]
                report.endings_checked += len(ended)
                report.endings_agreed += sum(1 for r in ended if ending_agrees(f, r))
            if hits:
                first = min(a["detected_at"] for a in hits)
                report.detected_faults += 1
                report.delays_s.append(max(0.0, first - origin))
                if long_leak:
                    report.leak_leads_s.append(f["oom_at"] - first)
                if hour_leak and first - f["start"] <= 3600:
                    report.leak_hour_hits += 1
    return Report(kinds, gpu_hours)


def chart(labels: list[dict], alerts: list[dict], path: str, title: str = "Faults and alerts",
          max_rows: int = 60) -> None:
    """A timeline: one row per faulty target, the fault as a bar, the detector's incidents as dots."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = colours()
    faults = sorted((f for f in labels if f["kind"] != "idle"), key=lambda f: f["start"])[:max_rows]
    firing = [a for a in alerts if a.get("status") == "firing" and not a.get("revision")]
    t0 = min([f["start"] for f in faults] + [a["detected_at"] for a in firing] or [0.0])
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.28 * len(faults) + 1.5)))
    for row, f in enumerate(faults):
        ax.barh(row, (f["end"] - f["start"]) / 3600, left=(f["start"] - t0) / 3600, height=0.6,
                color=colors[f["kind"]], alpha=0.35)
        hits = [a for a in firing if _matches(a, f)]
        ax.plot([(a["detected_at"] - t0) / 3600 for a in hits], [row] * len(hits), "o", color=colors[f["kind"]],
                markersize=4)
    unmatched = [a for a in firing if a["kind"] != "idle" and not any(_matches(a, f) for f in labels)]
    ax.plot([(a["detected_at"] - t0) / 3600 for a in unmatched], [-1] * len(unmatched), "x", color="black",
            markersize=6, label=f"false alerts ({len(unmatched)})")
    ax.set_yticks(range(len(faults)))
    ax.set_yticklabels([f"{f['kind'][:10]} {f['node']}" + (f" gpu {f['gpu_uuid'][4:12]}" if f.get("gpu_uuid") else "")
                        for f in faults], fontsize=6)
    ax.set_xlabel("hours since the first fault")
    ax.set_title(title + " (bars: labelled faults; dots: incidents that match them)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.5, label=k) for k, c in colors.items() if k != "idle"]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], loc="upper right", fontsize=7)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# The goals of a held-out evaluation (QUALITY.md); each kind's delay goal, and whether lead-time goals apply to
# it, are in its registry entry (models/detectors).
GOALS = {"faults_per_kind": 30, "gpu_hours": 5000, "f1": 0.9, "false_per_1000h": 1.0, "leak_early_share": 0.9,
         "leak_within_hour_share": 0.9, "margin_over_baselines": 0.1, "incidents_per_fault": 1.1,
         "cause_agreement": 0.95, "ending_agreement": 0.95}


def interval_goals(by_interval: dict[float, dict]) -> list[tuple[str, bool, str]]:
    """The goals that hold at each sampling interval on its own (the same family's fleets sampled every ``s``
    seconds, ``{s: reports}``): false alerts within the goal, and every kind's F1 no lower than at 10 s."""
    out = []
    ref = by_interval.get(10.0)
    for s, reports in sorted(by_interval.items()):
        det = reports["detectors"]
        out.append((f"every {s:g} s: false alerts <= {GOALS['false_per_1000h']:g} per 1,000 GPU-hours",
                    det.false_per_1000h() <= GOALS["false_per_1000h"], f"{det.false_per_1000h():.2f}"))
        if ref is None or s == 10.0:
            continue
        for k in KINDS:
            a, b = det.kinds[k].f1, ref["detectors"].kinds[k].f1
            out.append((f"every {s:g} s: {k} F1 no lower than at 10 s", a >= b, f"{a:.3f} vs {b:.3f}"))
    return out


def goals(reports: dict) -> list[tuple[str, bool, str]]:
    det = reports["detectors"]
    out = []
    for k in KINDS:
        kr = det.kinds[k]
        out.append((f"{k}: at least {GOALS['faults_per_kind']} faults", kr.faults >= GOALS["faults_per_kind"],
                    str(kr.faults)))
    out.append((f"at least {GOALS['gpu_hours']:,} GPU-hours", det.gpu_hours >= GOALS["gpu_hours"],
                f"{det.gpu_hours:,.0f}"))
    for k in KINDS:
        out.append((f"{k}: F1 >= {GOALS['f1']}", det.kinds[k].f1 >= GOALS["f1"], f"{det.kinds[k].f1:.3f}"))
    out.append((f"false alerts <= {GOALS['false_per_1000h']:g} per 1,000 GPU-hours",
                det.false_per_1000h() <= GOALS["false_per_1000h"], f"{det.false_per_1000h():.2f}"))
    for k in KINDS:
        per = det.kinds[k].incidents_per_fault
        if per is not None:
            out.append((f"{k}: incidents per fault found <= {GOALS['incidents_per_fault']:g}",
                        per <= GOALS["incidents_per_fault"], f"{per:.2f}"))
        agreed = det.kinds[k].cause_agreement
        if agreed is not None:
            out.append((f"{k}: cause named as its fault's in >= {GOALS['cause_agreement']:.0%}",
                        agreed >= GOALS["cause_agreement"], f"{agreed:.0%} of {det.kinds[k].causes_checked}"))
    for k, entry in REGISTRY.items():
        if entry.delay_goal_s is None:
            continue
        d = det.kinds[k].delay(0.5)
        out.append((f"{k}: median delay <= {entry.delay_goal_s / 60:g} min",
                    d is not None and d <= entry.delay_goal_s, "n/a" if d is None else f"{d / 60:.1f} min"))
    for k, entry in REGISTRY.items():
        if not entry.oom_goals:
            continue
        kr = det.kinds[k]
        share = kr.leak_early_share
        out.append((f"{k}: faults of 30+ min alerted 10+ min before the OOM in >= 90%",
                    share is not None and share >= GOALS["leak_early_share"],
                    "n/a" if share is None else f"{share:.0%} of {kr.leak_long}"))
        hour = kr.leak_within_hour_share
        out.append((f"{k}: faults growing an hour or more alerted within 60 min of their start in >= 90%",
                    hour is not None and hour >= GOALS["leak_within_hour_share"],
                    "n/a" if hour is None else f"{hour:.0%} of {kr.leak_hours}"))
        ending = kr.ending_agreement
        out.append((f"{k}: resolution says how the fault ended in >= {GOALS['ending_agreement']:.0%}",
                    ending is not None and ending >= GOALS["ending_agreement"],
                    "n/a" if ending is None else f"{ending:.0%} of {kr.endings_checked}"))
    for name in ("threshold baseline", "isolation forest baseline"):
        if name in reports:
            for k in KINDS:
                a, b = det.kinds[k].f1, reports[name].kinds[k].f1
                out.append((f"{k}: F1 at least 0.1 above the {name}", a >= b + GOALS["margin_over_baselines"],
                            f"{a:.3f} vs {b:.3f}"))
    return out
