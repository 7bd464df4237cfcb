"""The router: what each alert owes each receiver, and when. Single-threaded (the loop's thread);
the senders deliver, each in its thread, and hand back results.

:meth:`Router.offer` routes alerts. A delivery already in the log in a final state is not owed
again (the log makes each (incident, status, receiver) go out once across restarts); a firing whose
resolve is already final there is ``superseded``, never told. Owed deliveries join their group.
:meth:`Router.tick` flushes the groups that are due (``group_wait`` after a group's first alert,
``group_interval`` after its last notification), muting there what a silence matches (``silenced``)
and GPU-level firing alerts while a node-level incident of the same kind fires on that node
(``inhibited``); it sends reminders of firing alerts (``repeat_interval``, Alertmanager's resend),
takes the senders' results, and returns the references of inputs whose deliveries are all final, to
acknowledge. A resolve follows its firing's fate: muted if the firing was, told otherwise. A firing
that was muted is told after all if its silence ends or its node-level incident resolves while it
still fires.
"""
from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from gpufleet.contracts.events import SEVERITIES, alert_problem
from gpufleet.contracts.output import crash_line

from .matchers import labels
from .outbox import FINAL, Delivery, Outbox, revision_of, step_of
from .receivers import Notification
from .routing import Match, Route, Routes
from .sender import Job, Result, Sender

log = logging.getLogger("gpufleet.notify")

ALERT_SCHEMA = "gpufleet.alert.v1"


@dataclass(eq=False)
class Group:
    receiver: str
    key: str
    route: Route
    labels: dict[str, str]
    created: float
    pending: list[Delivery] = field(default_factory=list)
    flushed: float | None = None
    sending: int = 0                                       # deliveries handed to the sender, not final yet
    told: dict[str, list] = field(default_factory=dict)    # firing alerts told: id -> [alert, partition, last told]

    def due(self, now: float) -> bool:
        if not self.pending:
            return False
        if self.flushed is None:
            return now >= self.created + self.route.group_wait
        return now >= self.flushed + self.route.group_interval


def is_alert(event: object) -> bool:
    return alert_problem(event) is None


@dataclass(frozen=True)
class Around:
    """What a router reads of the world around it: the silences in force and the incidents other routers have
    told as firing (the store's, through the delivery log), the monotonic clock and the wall clock."""

    silences: Callable[[], list] = list
    firing: Callable[[], dict[str, dict[str, str]]] = dict
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


class Router:
    def __init__(self, routes: Routes, outbox: Outbox, senders: dict[str, Sender], results: queue.Queue,
                 metrics=None, *, keep_pending: bool = False, around: Around | None = None):
        around = around or Around()
        self.routes, self.outbox, self.senders, self.results = routes, outbox, senders, results
        self.metrics, self.silences, self.store_firing = metrics, around.silences, around.firing
        self.keep_pending, self.clock, self.wall = keep_pending, around.clock, around.wall
        self.pending: dict[tuple[str, str, str], Delivery] = {}
        self.waiting: dict[Hashable, int] = {}           # input reference -> deliveries it still waits for
        self.acked: list[Hashable] = []
        self.rejected: list[tuple] = []                  # (reference, reason code, reason, alert): to dead-letter
        self.groups: dict[str, Group] = {}
        self.open: dict[str, tuple[dict, int]] = {}      # firing incidents not resolved: id -> (alert, partition)
        self.recheck = True
        self._muting: tuple[tuple, frozenset] = ((), frozenset())
        self._sources: list[dict[tuple, list[tuple[str, dict]]]] | None = None   # per rule: equal values -> sources
        self.counts: dict[str, int] = {}

    def take_rejected(self) -> list[tuple]:
        """The alerts routing failed on, ``(reference, reason code, reason, alert)``, handed over once: the caller
        dead-letters them, then acknowledges the references."""
        rejected, self.rejected = self.rejected, []
        return rejected

    # -- state from the log ------------------------------------------------------------
    def load(self, owned: Callable[[int], bool] = lambda partition: True) -> None:
        """Open incidents and the firing alerts told (for reminders) of the partitions owned, from the log."""
        for alert, partition in self.outbox.open_incidents():
            if owned(partition) and alert["id"] not in self.open:
                self._opened(alert, partition)
        reminded = self.outbox.reminders()
        for receiver, _group_key, alert, partition, sent_at in self.outbox.told():
            if not owned(partition) or receiver not in self.routes.receivers:
                continue
            match = self._match_for(alert, receiver)
            if match is None:
                continue
            group = self._group(match)
            last = max(sent_at or 0.0, reminded.get((receiver, match.group_key), 0.0))
            group.told[alert["id"]] = [alert, partition, last]
        self.recheck = True

    def resume(self) -> int:
        """Embedded mode: owe again what the outbox holds as pending (a run cut short)."""
        rows = self.outbox.pending()
        self.offer([(alert, None, -1) for alert, _ in rows], resumed=True)
        stale = [Delivery(alert, receiver, "") for alert, receiver in rows if (alert["id"], step_of(alert), receiver)
                 not in self.pending]
        if stale:
            self.outbox.record(stale, "dead", reason="unrouted", error="no longer routed to this receiver")
        return len(rows) - len(stale)

    # -- alerts in ---------------------------------------------------------------------------
    def offer(self, items: Iterable[tuple[object, Hashable | None, int]],
              known: dict[tuple[str, str, str], str] | None = None, resumed: bool = False) -> None:
        """Route ``(event, reference, partition)`` items. ``known`` adds final states found elsewhere (the
        store, for alerts another router may have told). References with nothing owed are acknowledged
        at once; events that are not alerts too (and counted)."""
        items = list(items)
        alerts = [(e, ref, p) for e, ref, p in items if is_alert(e)]
        for e, ref, _ in items:
            if not is_alert(e):
                self.counts["invalid"] = self.counts.get("invalid", 0) + 1
                if self.metrics:
                    self.metrics.invalid.inc()
                if ref is not None:
                    self.acked.append(ref)
        if not alerts:
            return
        states = self.outbox.states(a["id"] for a, _, _ in alerts)          # type: ignore[index]
        for key, state in (known or {}).items():
            states.setdefault(key, state)
        new: list[Delivery] = []
        for alert, ref, partition in alerts:
            assert isinstance(alert, dict)
            try:
                owed = self._offer(alert, partition, states, new, resumed)
            except Exception as err:              # one alert never stops the router: dead-lettered instead
                log.error("routing alert %s failed; dead-lettered as internal_error", alert.get("id"), exc_info=err)
                self.rejected.append((ref, "internal_error", crash_line(err), alert))
                self.counts["internal_error"] = self.counts.get("internal_error", 0) + 1
                continue
            for d in owed:
                if ref is not None:
                    d.refs.append(ref)
            if ref is not None:
                if owed:
                    self.waiting[ref] = self.waiting.get(ref, 0) + len(owed)
                else:
                    self.acked.append(ref)
        if self.keep_pending and new and not resumed:
            self.outbox.add_pending(new)

    def _offer(self, alert: dict, partition: int, states: dict, new: list[Delivery], resumed: bool) -> list[Delivery]:
        aid, status, step = alert["id"], alert["status"], step_of(alert)
        owed: list[Delivery] = []
        muted: list[Delivery] = []
        if status == "firing":
            if not any(k[0] == aid and k[1] == "resolved" and s in FINAL for k, s in states.items()):
                if aid not in self.open or revision_of(self.open[aid][0]) <= revision_of(alert):
                    self._opened(alert, partition)
        else:
            self._closed(aid)
        chosen, unheard = self._receivers(alert, states)
        never = [Delivery(alert, m.receiver, m.group_key, partition) for m in unheard
                 if states.get((aid, step, m.receiver)) not in FINAL]
        if never:                                    # recorded, so that its firing, if it turns up, is never told
            self.outbox.record(never, "superseded", reason="never told of its firing")
        for m in chosen:
            key = (aid, step, m.receiver)
            group = self._group(m)
            if status == "resolved":
                group.told.pop(aid, None)
            d = self.pending.get(key)
            if d is not None:                        # the same alert again while its delivery is under way
                owed.append(d)
                continue
            state = states.get(key)
            if state in FINAL:
                continue
            d = Delivery(alert, m.receiver, m.group_key, partition)
            if status == "firing" and states.get((aid, "resolved", m.receiver)) in FINAL:
                muted.append(d)                      # its own resolve went first: never told
                continue
            self.pending[key] = d
            group.pending.append(d)
            owed.append(d)
            if state is None:
                new.append(d)
        if muted:
            self.outbox.record(muted, "superseded", reason="resolved already")
            self._count("superseded", muted)
        return owed

    def _receivers(self, alert: dict, states: dict) -> tuple[list[Match], list[Match]]:
        """Whom this step of an incident is owed to. The first firing: the routes it matches. A change of severity:
        the routes the new severity matches, and every receiver told of the incident before (one a route for
        critical only hears of a leak when it escalates). An update (numbers moved on): the receivers told before
        that take updates. A resolve: the receivers told of the incident (or about to be), never one that never
        heard of it. Returns those, and (for a resolve) the receivers its routes reach that never heard of it."""
        aid, status = alert["id"], alert["status"]
        matches = self.routes.match(alert)
        if status == "firing" and not revision_of(alert):
            return matches, []
        told = {r for (i, s, r), state in states.items()
                if i == aid and s.startswith("firing") and state in ("sent", "silenced", "inhibited")}
        told |= self._firing_under_way(aid)
        if not told and status == "firing" and alert.get("change") in ("escalated", "deescalated"):
            return matches, []
        known = {m.receiver: m for m in matches}
        for severity in SEVERITIES:                  # the routes of the severities it was told at before
            for m in self.routes.match({**alert, "severity": severity}):
                known.setdefault(m.receiver, m)
        receivers = self.routes.receivers
        if status == "resolved":
            chosen = [r for r in told if receivers[r].config.send_resolved]
        elif alert.get("change") in ("escalated", "deescalated"):
            chosen = list(told | {m.receiver for m in matches})
        else:
            chosen = [r for r in told if receivers[r].updates]
        unheard = [m for r, m in sorted(known.items()) if r not in told] if status == "resolved" else []
        return [known[r] for r in sorted(chosen) if r in known], unheard

    def _firing_under_way(self, aid: str) -> set[str]:
        """The receivers a firing step of incident ``aid`` is owed to now (queued or with its sender)."""
        return {r for (i, step, r) in self.pending if i == aid and step.startswith("firing")}

    def _opened(self, alert: dict, partition: int) -> None:
        self.open[alert["id"]] = (alert, partition)
        self._sources = None

    def _closed(self, aid: str) -> None:
        if self.open.pop(aid, None) is not None:
            self._sources = None
            self.recheck = True                      # alerts it muted may be told now

    def _group(self, m: Match) -> Group:
        group = self.groups.get(m.group_key)
        if group is None:
            group = self.groups[m.group_key] = Group(m.receiver, m.group_key, m.route, m.group, self.clock())
        return group

    def _match_for(self, alert: dict, receiver: str) -> Match | None:
        return next((m for m in self.routes.match(alert) if m.receiver == receiver), None)

    # -- the clock ---------------------------------------------------------------------------
    def tick(self, flush_all: bool = False) -> list[Hashable]:
        """Take the senders' results, flush the groups due (all with ``flush_all``), remind, tell muted
        alerts whose reason has gone; returns the input references now acknowledged."""
        self._results()
        muting = (tuple(sorted(s.id for s in self.silences())), frozenset(self.store_firing()))
        if muting != self._muting:
            if muting[1] != self._muting[1]:
                self._sources = None
            self._muting, self.recheck = muting, True
        if self.recheck:
            self.recheck = False
            self._recheck_muted()
        now = self.clock()
        for group in list(self.groups.values()):
            if group.pending and (flush_all or group.due(now)):
                self._flush(group, now)
        self._remind()
        for key in [k for k, g in self.groups.items() if not g.pending and not g.sending and not g.told]:
            del self.groups[key]
        acked, self.acked = self.acked, []
        return acked

    def _results(self) -> None:
        while True:
            try:
                r: Result = self.results.get_nowait()
            except queue.Empty:
                return
            if r.state == "abandoned" or not r.deliveries:
                continue
            live = [d for d in r.deliveries if not d.cancelled and self.pending.get(d.key) is d]
            for d in live:
                self._done(d, r.state)
            if self.metrics and live:
                if r.state == "sent":
                    for status in ("firing", "resolved"):
                        lat = [s for d, s in zip(r.deliveries, r.latency_s) if d.status == status and d in live]
                        if lat:
                            self.metrics.sent(live[0].receiver, status, lat)
                else:
                    self.metrics.failed(live[0].receiver, r.reason, len(live))
            self._count(r.state, live)

    def _done(self, d: Delivery, state: str) -> None:
        self.pending.pop(d.key, None)
        for ref in d.refs:
            left = self.waiting.get(ref, 0) - 1
            if left <= 0:
                self.waiting.pop(ref, None)
                self.acked.append(ref)
            else:
                self.waiting[ref] = left
        group = self.groups.get(d.group_key)
        if group is not None and d.submitted:
            d.submitted = False
            group.sending -= 1
        if state == "sent" and d.status == "firing" and d.id in self.open and group is not None and \
                revision_of(d.alert) >= revision_of(group.told.get(d.id, [{}])[0]):
            group.told[d.id] = [d.alert, d.partition, self.wall()]

    def _count(self, state: str, deliveries: list[Delivery]) -> None:
        if deliveries:
            self.counts[state] = self.counts.get(state, 0) + len(deliveries)

    def _flush(self, group: Group, now: float) -> None:
        batch = [d for d in group.pending if not d.cancelled]
        group.pending = []
        group.flushed = now
        silences = [s for s in self.silences() if s.active(self.wall())]
        ids = {d.id for d in batch}
        states = self.outbox.states(ids) if ids else {}
        send: list[Delivery] = []
        for d in batch:
            muted = self._muted(d, silences, states)
            if muted is None:
                send.append(d)
                continue
            state, reason = muted
            self.outbox.record([d], state, reason=reason)
            states[d.key] = state                    # its resolve, later in this batch, follows it
            if self.metrics:
                self.metrics.muted(d.receiver, state)
            self._done(d, state)
            self._count(state, [d])
        if send:
            for d in send:
                d.submitted = True
            group.sending += len(send)
            notification = Notification(group.receiver, group.labels, [d.alert for d in send])
            self.senders[group.receiver].submit(Job(notification, send, group.key))

    def _muted(self, d: Delivery, silences: list, states: dict) -> tuple[str, str] | None:
        """Why ``d`` is not told (state, reason), or None to tell it."""
        aid, receiver = d.id, d.receiver
        if d.status == "resolved":
            if receiver in self._firing_under_way(aid):
                return None                          # its firing is being told: the resolve follows it
            fates = [s for (i, step, r), s in states.items()
                     if i == aid and r == receiver and step.startswith("firing")]
            if fates and "sent" not in fates:
                fate = next((f for f in ("silenced", "inhibited", "superseded") if f in fates), None)
                if fate is None:                     # dead-lettered: a resolve of a key it never saw helps no one
                    return "dead", "its firing never reached the receiver"
                return fate, f"its firing was {fate}"
            return None
        if states.get((aid, "resolved", receiver)) in FINAL:
            return "superseded", "resolved already"
        values = labels(d.alert)
        for s in silences:
            if s.matches(values):
                return "silenced", f"silence {s.id}"
        source = self._inhibitor(d.alert)
        if source:
            return "inhibited", source
        return None

    def _inhibitor(self, alert: dict) -> str | None:
        """Why an inhibition rule mutes ``alert`` (the firing incident and the rule), or None."""
        rules = self.routes.inhibit_rules
        if not rules:
            return None
        values = labels(alert)
        if self._sources is None:
            self._sources = self._index(rules)
        for rule, sources in zip(rules, self._sources, strict=True):
            if not rule.is_target(values):
                continue
            for sid, source in sources.get(rule.key(values), ()):
                if sid != alert.get("id") and rule.mutes(source, values):
                    where = source["node"] + (f" GPU {source['gpu']}" if source["gpu"] else "")
                    return f"{source['kind']} incident {sid} on {where} ({rule.name or rule})"
        return None

    def _index(self, rules) -> list[dict[tuple, list[tuple[str, dict]]]]:
        """The firing incidents (this router's and, from the store, every router's) that may mute others, per
        rule by their values of its ``equal`` labels."""
        firing = {**self.store_firing(), **{aid: labels(alert) for aid, (alert, _) in self.open.items()}}
        index: list[dict[tuple, list[tuple[str, dict]]]] = [{} for _ in rules]
        for aid, values in sorted(firing.items()):
            for rule, by_key in zip(rules, index, strict=True):
                if rule.is_source(values):
                    by_key.setdefault(rule.key(values), []).append((aid, values))
        return index

    def _recheck_muted(self) -> None:
        """Firing alerts muted earlier and still firing: told now if neither a silence nor a node-level
        incident mutes them any more."""
        silences = [s for s in self.silences() if s.active(self.wall())]
        for alert, receiver, _state, partition in self.outbox.held():
            aid = alert["id"]
            if aid not in self.open or receiver not in self.senders or \
                    receiver in self._firing_under_way(aid):
                continue
            values = labels(alert)
            if any(s.matches(values) for s in silences) or self._inhibitor(alert):
                continue
            match = self._match_for(alert, receiver)
            if match is None:
                continue
            d = Delivery(self.open[aid][0], receiver, match.group_key, partition)
            self.pending[d.key] = d
            self._group(match).pending.append(d)
            log.info("telling %s about %s now: no longer muted", receiver, alert["dedup_key"])

    def _remind(self) -> None:
        wall = self.wall()
        for group in self.groups.values():
            if not group.told:
                continue
            repeat = self.routes.receivers[group.receiver].repeat_s(group.route.repeat_interval)
            if repeat is None:
                continue
            if min(t[2] for t in group.told.values()) + repeat > wall:
                continue
            alerts = [t[0] for aid, t in group.told.items() if aid in self.open]
            for aid in [aid for aid in group.told if aid not in self.open]:
                del group.told[aid]
            if not alerts:
                continue
            for t in group.told.values():
                t[2] = wall
            self.senders[group.receiver].submit(
                Job(Notification(group.receiver, group.labels, alerts, reminder=True), [], group.key))
            self.outbox.reminded(group.receiver, group.key, wall)

    # -- partitions (distributed mode) --------------------------------------------------------
    def revoke(self, partitions: set[int]) -> None:
        """Partitions gone to another router: what they owe is theirs now (their inputs come again there)."""
        for key, d in list(self.pending.items()):
            if d.partition in partitions:
                d.cancelled = True
                del self.pending[key]
        self.waiting = {ref: n for ref, n in self.waiting.items()
                        if not (isinstance(ref, tuple) and ref[0] in partitions)}
        self.acked = [ref for ref in self.acked if not (isinstance(ref, tuple) and ref[0] in partitions)]
        for group in self.groups.values():
            group.pending = [d for d in group.pending if not d.cancelled]
            group.sending = sum(1 for d in self.pending.values() if d.group_key == group.key and d.submitted)
            for aid in [aid for aid, t in group.told.items() if t[1] in partitions]:
                del group.told[aid]
        for aid in [aid for aid, (_, p) in self.open.items() if p in partitions]:
            self._closed(aid)

    # -- what is owed --------------------------------------------------------------------------
    def owed(self) -> int:
        return len(self.pending)

    def queue_age(self) -> dict[str, float]:
        now, out = self.clock(), dict[str, float]()
        for d in list(self.pending.values()):
            out[d.receiver] = max(out.get(d.receiver, 0.0), now - d.arrived)
        return out

    def queue_depth(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in list(self.pending.values()):
            out[d.receiver] = out.get(d.receiver, 0) + 1
        return out
