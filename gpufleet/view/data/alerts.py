"""The reads behind the page's section: the incidents: firing, resolved, and one incident's page."""
from __future__ import annotations

import json
import math

from .common import SEVERITY_RANK, Reads, Window, _count_kinds, _round, _s, iso


class AlertReads(Reads):
    # -- incidents ------------------------------------------------------------------
    def incidents(self, w: Window, limit: int = 20000) -> list[dict]:
        """Every incident (firing, and resolved with its resolution) detected from ``alert_days`` before the
        window to its end, as of the window's end: ``firing`` when no resolve came by then."""
        return self._once(("incidents", w, limit), lambda: self._incidents(w, limit))

    def _incidents(self, w: Window, limit: int) -> list[dict]:
        since = w.start - self.alert_days * 86400
        rows = self._rows(
            "SELECT id, status, kind, severity, node, gpu_uuid, job, tenant, pool, toUnixTimestamp64Milli(started_at), "
            "toUnixTimestamp64Milli(detected_at), toUnixTimestamp64Milli(resolved_at), score, summary, evidence "
            "FROM alerts WHERE detected_at >= toDateTime64(%(since)s, 3, 'UTC') "
            f"AND detected_at <= toDateTime64(%(end_s)s, 3, 'UTC'){w.tenant_filter()} "
            "ORDER BY detected_at DESC, id, status LIMIT 1 BY id, status LIMIT %(limit)s",
            {**w.params(), "since": float(since), "limit": limit})
        found: dict[str, dict] = {}
        for (id_, status, kind, severity, node, gpu, job, tenant, pool, started, detected, resolved, score, summary,
             evidence) in rows:
            inc = found.get(id_)
            if status == "resolved":
                at = _s(resolved)
                if at is None or at > w.end:
                    continue          # resolved after the moment shown: still firing then
                if inc is None:
                    inc = found[id_] = {"id": id_}
                inc["resolved_at"] = at
                inc["resolution"] = summary
                inc.setdefault("_fields", (kind, severity, node, gpu, job, tenant, pool, started, detected, score,
                                           summary, evidence))
            else:
                if inc is None:
                    inc = found[id_] = {"id": id_}
                inc["_fields"] = (kind, severity, node, gpu, job, tenant, pool, started, detected, score, summary,
                                  evidence)
                inc["_firing_row"] = True
        out = []
        for inc in found.values():
            kind, severity, node, gpu, job, tenant, pool, started, detected, score, summary, evidence = \
                inc.pop("_fields")
            try:
                ev = json.loads(evidence) if evidence else {}
            except ValueError:
                ev = {"text": evidence}
            resolved = inc.get("resolved_at")
            out.append({"id": inc["id"], "kind": kind, "severity": severity, "status":
                        "resolved" if resolved is not None else "firing", "node": node, "gpu_uuid": gpu or None,
                        "job": job or None, "tenant": tenant or None, "pool": pool or None, "started_at": _s(started),
                        "detected_at": _s(detected), "resolved_at": resolved, "score": float(score),
                        "summary": summary, "resolution": inc.get("resolution"), "evidence": ev})
        out.sort(key=lambda a: (a["status"] != "firing", SEVERITY_RANK.get(a["severity"], 9), -a["detected_at"]))
        return out

    def alerts(self, w: Window, limit: int = 200) -> dict:
        """Incidents firing at the window's end, and those resolved within the window."""
        incidents = self.incidents(w)
        firing = [a for a in incidents if a["status"] == "firing"]
        resolved = [a for a in incidents if a["status"] == "resolved" and a["resolved_at"] >= w.start]
        shown = [a for a in incidents if a["status"] == "firing" or a["resolved_at"] >= w.start]
        by_severity: dict[str, int] = {}
        for x in firing:
            by_severity[x["severity"]] = by_severity.get(x["severity"], 0) + 1
        out = {"start": w.start, "end": w.end, "firing": firing[:limit], "resolved": resolved[:limit],
               "counts": _count_kinds(shown), "firing_total": len(firing), "resolved_total": len(resolved),
               "firing_by_severity": by_severity}
        if not shown:
            out["empty"] = (f"no incident firing at {iso(w.end)} and none resolved since {iso(w.start)}"
                            f"{' for tenant ' + w.tenant if w.tenant else ''}: the detectors found nothing "
                            "(straggler, IO starvation, memory leak, idle) in the stored telemetry")
        return out

    # -- one incident ---------------------------------------------------------------
    def incident(self, id_: str, pad_s: float = 1800, most_s: float = 12 * 3600, peers: int = 48) -> dict | None:
        """An incident and the telemetry around it: its GPU's (or its job's GPUs on its node) utilization, SM
        clock, memory and power per minute, the job's other GPUs beside it (a straggler's peers), and the node's
        host metrics."""
        rows = self._rows(
            "SELECT status, kind, severity, node, gpu_uuid, job, tenant, pool, toUnixTimestamp64Milli(started_at), "
            "toUnixTimestamp64Milli(detected_at), toUnixTimestamp64Milli(resolved_at), score, summary, evidence "
            "FROM alerts WHERE id = %(id)s ORDER BY status LIMIT 1 BY status", {"id": id_})
        if not rows:
            return None
        by = {r[0]: r for r in rows}
        first = by.get("firing") or by["resolved"]
        _, kind, severity, node, gpu, job, tenant, pool, started, detected, _, score, summary, evidence = first
        resolved = _s(by["resolved"][10]) if "resolved" in by else None
        latest = self.latest() or detected / 1000
        alert = {"id": id_, "kind": kind, "severity": severity, "status": "resolved" if resolved else "firing",
                 "node": node, "gpu_uuid": gpu or None, "job": job or None, "tenant": tenant or None,
                 "pool": pool or None, "started_at": started / 1000, "detected_at": detected / 1000,
                 "resolved_at": resolved, "score": float(score), "summary": summary,
                 "resolution": by["resolved"][12] if "resolved" in by else None,
                 "evidence": json.loads(evidence) if evidence else {}}
        t0 = started / 1000 - pad_s
        t1 = (resolved if resolved is not None else latest) + pad_s
        if t1 - t0 > most_s:
            t0, t1 = detected / 1000 - most_s / 2, detected / 1000 + most_s / 2
        t0, t1 = math.floor(t0 / 60) * 60, math.ceil(t1 / 60) * 60
        p = {"t0": int(t0), "t1": int(t1), "gpu": gpu, "job": job, "node": node, "peers": peers}
        if gpu and job:
            who = "(gpu_uuid = %(gpu)s OR job = %(job)s)"
        elif gpu:
            who = "gpu_uuid = %(gpu)s"
        elif job:
            who = "job = %(job)s AND node = %(node)s"
        else:
            who = "node = %(node)s"
        series = self._rows(
            "SELECT gpu_uuid, node, gpu_index, toUnixTimestamp(minute), util_pct_mean, sm_clock_mhz_mean, "
            "mem_used_bytes_mean, power_w_mean FROM gpu_rollup_1m "
            "WHERE minute >= toDateTime(%(t0)s) AND minute < toDateTime(%(t1)s) AND gpu_uuid IN ("
            "  SELECT gpu_uuid FROM gpu_rollup_1m WHERE minute >= toDateTime(%(t0)s) AND minute < toDateTime(%(t1)s)"
            f"  AND {who} GROUP BY gpu_uuid ORDER BY gpu_uuid = %(gpu)s DESC, gpu_uuid LIMIT %(peers)s) "
            f"AND {who} ORDER BY gpu_uuid, minute LIMIT 1 BY gpu_uuid, minute", {**p, "gpu": gpu or ""})
        gpus: dict[str, dict] = {}
        for uuid, gnode, index, minute, util, clock, mem, power in series:
            g = gpus.setdefault(uuid, {"gpu_uuid": uuid, "node": gnode, "gpu_index": int(index),
                                       "role": "incident" if uuid == gpu or (not gpu and gnode == node) else "peer",
                                       "minute": [], "util_pct": [], "sm_clock_mhz": [], "mem_used_bytes": [],
                                       "power_w": []})
            g["minute"].append(float(minute))
            for name, v in (("util_pct", util), ("sm_clock_mhz", clock), ("mem_used_bytes", mem), ("power_w", power)):
                g[name].append(None if v is None else round(float(v), 2))
        host = self._rows(
            "SELECT toUnixTimestamp(minute), host_cpu_util_pct_mean, host_iowait_pct_mean, "
            "host_disk_read_bytes_per_s_mean, gpu_util_pct_mean FROM node_rollup_1m WHERE node = %(node)s AND "
            "minute >= toDateTime(%(t0)s) AND minute < toDateTime(%(t1)s) ORDER BY minute LIMIT 1 BY minute", p)
        out = {"alert": alert, "start": t0, "end": t1,
               "gpus": sorted(gpus.values(), key=lambda g: (g["role"] != "incident", g["node"], g["gpu_index"])),
               "host": {"node": node, "minute": [float(r[0]) for r in host],
                        "cpu_util_pct": [_round(r[1]) for r in host], "iowait_pct": [_round(r[2]) for r in host],
                        "disk_read_bytes_per_s": [_round(r[3]) for r in host],
                        "gpu_util_pct": [_round(r[4]) for r in host]}}
        if not gpus:
            out["empty"] = f"no telemetry of this incident's GPUs stored between {iso(t0)} and {iso(t1)}"
        return out
