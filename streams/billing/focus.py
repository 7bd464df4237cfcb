"""``gpufleet bill export``: a month's billing as a FinOps FOCUS 1.0 dataset (CSV or Parquet).

FOCUS (the FinOps Open Cost and Usage Specification) is the cost-and-usage format cost tools read. A GPU rental
maps to it as follows (docs/finance.md has the table): the tenant is the billing account, its team the
sub-account, the pool the region, each GPU (or MIG instance) a resource of type ``GPU``; one ``Usage`` row per
GPU, tenant, billing mode, price version and day of use, priced per ``GPU-Hour``. ``ListCost`` is what the
usage costs on demand (the list price), ``ContractedCost`` at the tenant's own prices, ``BilledCost`` what is
invoiced for it and ``EffectiveCost`` what it cost once commitments are amortized.

A commitment (``billing.commitments``) adds a ``Purchase`` row for its month's fee (billed, not effective), splits
the usage it covers into rows with ``CommitmentDiscountStatus = Used`` (billed 0, effective the amortized fee)
and adds a row for the unused commitment (``Unused``: billed 0, effective the unused fee). Adjustments invoiced
this month (late usage and re-ratings of closed months) are ``Adjustment`` rows with ``ChargeClass = Correction``
and the charge period of the usage they correct. So ``BilledCost`` and ``EffectiveCost`` each add up to what the
invoices say is due (``gpufleet bill``), to the micro-unit: where a split needs rounding, the remainders are given
to the rows with the largest (largest remainder method).

CSV keeps money exact (decimal strings with 6 decimals). Parquet (pyarrow, the ``finance`` install) stores money
as doubles, because the FOCUS validator (focus-validator 1.0.0) refuses Parquet decimals as not decimal.
"""
from __future__ import annotations

import csv
import datetime as dt
import json
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

from . import ledger
from .commitments import allocate
from .prices import Tariff, money

FOCUS_VERSION = "1.0"
COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd",
    "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName",
    "CommitmentDiscountStatus", "CommitmentDiscountType", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuer", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingQuantity", "PricingUnit", "Provider", "Publisher", "RegionId", "RegionName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId",
    "SubAccountName", "Tags")
MONEY = ("BilledCost", "ContractedCost", "EffectiveCost", "ListCost")
PRICES = ("ContractedUnitPrice", "ListUnitPrice")
QUANTITIES = ("ConsumedQuantity", "PricingQuantity")
PRICING_CATEGORY = {"on_demand": "Standard", "reserved": "Standard", "usage": "Standard", "spot": "Dynamic"}
HOUR = Fraction(3600)


def _iso(t: dt.datetime | dt.date) -> str:
    if not isinstance(t, dt.datetime):
        t = dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC)
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _round(values: list[Fraction], total: Fraction | Decimal) -> list[Decimal]:
    """Values rounded to 6 decimals so that they add up to ``total`` (itself rounded to 6 decimals first): each
    value is cut to the micro-unit and the units left are given to the largest remainders (or taken from the
    smallest, where the total is less)."""
    units = [v * 10**6 for v in values]
    floors = [int(u // 1) for u in units]
    rest = int(Fraction(money(Fraction(total))) * 10**6) - sum(floors)
    order = sorted(range(len(units)), key=lambda i: units[i] - floors[i], reverse=rest > 0)
    for n in range(abs(rest)):
        floors[order[n % len(order)]] += 1 if rest > 0 else -1
    return [Decimal(f) / 10**6 for f in floors]


def rows(store, tariff: Tariff, month: dt.date) -> list[dict]:
    """The month's FOCUS rows, as dicts by column (money as Decimal, times as ISO 8601 UTC): usage, the
    commitments' purchases and unused parts, the adjustments invoiced this month; reconciled to the invoice."""
    start = dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC)
    end = dt.datetime.combine(ledger.next_month(month), dt.time(), dt.UTC)
    bc = tariff.config
    base = {"BillingPeriodStart": _iso(start), "BillingPeriodEnd": _iso(end), "InvoiceIssuer": bc.provider,
            "Provider": bc.provider, "Publisher": bc.provider, "ServiceCategory": "Compute",
            "ServiceName": "GPU rental", "AvailabilityZone": None, "ChargeClass": None,
            "CommitmentDiscountCategory": None, "CommitmentDiscountId": None, "CommitmentDiscountName": None,
            "CommitmentDiscountStatus": None, "CommitmentDiscountType": None}
    ledger_rows = store.records(ledger.LEDGER, "period_start >= %(s)s AND period_start < %(e)s",
                                {"s": start, "e": end})
    usage = _usage(ledger_rows)
    months = _commitment_months(tariff, month, usage)
    out = _usage_rows(base, tariff, ledger_rows, usage, months)
    out += _commitment_rows(base, month, (start, end), months)
    out += _adjustment_rows(store, base, month)
    billed: dict[tuple[str, str], Fraction] = {acct: sum((v[1] for v in u.values()), Fraction(0))
                                               for acct, u in usage.items()}
    for acct, ms in months.items():
        billed[acct] = billed.get(acct, Fraction(0)) - sum((Fraction(money(m.covered)) for m in ms), Fraction(0))
    _reconcile(out, months, billed)
    return out


def _used_s(r) -> Fraction:
    """GPU-seconds of a ledger row: its rented seconds times its share of the physical GPU."""
    return Fraction(Decimal(r.rented_s)) * Fraction(Decimal(r.gpu_share or 1))


def _usage(ledger_rows: list) -> dict[tuple[str, str], dict]:
    """Per tenant and currency, per (pool, period start): GPU-seconds used and their amount."""
    usage: dict[tuple[str, str], dict] = defaultdict(dict)
    for r in ledger_rows:
        k = (r.pool, ledger.unix(r.period_start))
        was = usage[(r.tenant, r.currency)].get(k, (Fraction(0), Fraction(0)))
        usage[(r.tenant, r.currency)][k] = (was[0] + _used_s(r), was[1] + Fraction(Decimal(r.amount)))
    return usage


def _commitment_months(tariff: Tariff, month: dt.date, usage: dict[tuple[str, str], dict]) -> dict:
    """The commitments' allocation over the month's usage, per tenant and currency."""
    bc = tariff.config
    tenants = {t for t, _ in usage} | {c.tenant for c in bc.commitments if c.active(month)}
    months = {}
    for t in tenants:
        for cur in [cur for (tt, cur) in usage if tt == t] or [bc.currency]:
            months[(t, cur)] = allocate(bc.commitments, t, month, bc.period_s, usage.get((t, cur), {}))
    return months


def _usage_rows(base: dict, tariff: Tariff, ledger_rows: list, usage: dict, months: dict) -> list[dict]:
    """Usage rows: per GPU, tenant, mode, price version, day and commitment (None: not covered)."""
    groups: dict[tuple, dict] = {}
    for r in ledger_rows:
        t, cur = r.tenant, r.currency
        ps = ledger.unix(r.period_start)
        k = (r.pool, ps)
        used, amount = _used_s(r), Fraction(Decimal(r.amount))
        od = Fraction(Decimal(r.mode_amounts.get("on_demand", r.amount)))
        total_used = usage[(t, cur)][k][0]
        parts: list[tuple] = []
        left = Fraction(1)
        for m in months.get((t, cur), []):
            take = m.taken.get(k)
            if take and total_used:
                parts.append((m, take / total_used))
                left -= take / total_used
        parts.append((None, left))
        day = dt.datetime.fromtimestamp(ps, dt.UTC).date()
        for m, share in parts:
            if share <= 0:
                continue
            key = (t, cur, r.gpu_uuid, r.pool, r.gpu_model, r.billing_mode, r.price_version,
                   r.team, day, None if m is None else m.commitment.name)
            g = groups.setdefault(key, {"row": r, "m": m, "day": day, "consumed": Fraction(0), "amount": Fraction(0),
                                        "list": Fraction(0), "effective": Fraction(0), "priced": Fraction(0)})
            g["consumed"] += used * share
            g["list"] += od * share
            g["amount"] += amount * share
            g["priced"] += _priced_s(r) * share
            g["effective"] += (used * share * m.rate) if m is not None else amount * share
    return [_usage_row(base, tariff, groups[key])
            for key in sorted(groups, key=lambda k: tuple("" if v is None else str(v) for v in k))]


def _usage_row(base: dict, tariff: Tariff, g: dict) -> dict:
    r, m, day = g["row"], g["m"], g["day"]
    covered = m is not None
    row = {**base, **_account(r.tenant, r.team, r.currency, r.pool),
           "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based",
           "ChargePeriodStart": _iso(day), "ChargePeriodEnd": _iso(day + dt.timedelta(days=1)),
           "ChargeDescription": (f"{r.gpu_model or 'GPU'} in {r.pool or 'no pool'}, {r.billing_mode}" +
                                 (f", covered by commitment {m.commitment.name}" if covered else "")),
           "ConsumedQuantity": g["consumed"] / HOUR, "ConsumedUnit": "GPU-Hour",
           "PricingQuantity": (g["consumed"] if covered else g["priced"]) / HOUR, "PricingUnit": "GPU-Hour",
           "PricingCategory": "Committed" if covered else PRICING_CATEGORY.get(r.billing_mode, "Other"),
           "ListUnitPrice": Fraction(_list_price(tariff, r)), "ListCost": g["list"],
           "ContractedUnitPrice": Fraction(Decimal(r.price_per_gpu_hour)), "ContractedCost": g["amount"],
           "BilledCost": Fraction(0) if covered else g["amount"], "EffectiveCost": g["effective"],
           "ResourceId": r.gpu_uuid, "ResourceName": f"{r.node} GPU {r.gpu_index}" +
           (f" ({r.mig_profile})" if r.mig_profile else ""),
           "ResourceType": "MIG instance" if r.mig_profile else "GPU",
           "SkuId": f"{r.gpu_model or 'GPU'}/{r.billing_mode}", "SkuPriceId": r.price_version or "-",
           "Tags": _tags(r)}
    if covered:
        row.update(_commitment_columns(m, "Used"))
    return row


def _commitment_rows(base: dict, month: dt.date, period: tuple[dt.datetime, dt.datetime], months: dict) -> list[dict]:
    """Each commitment's purchase for the month and its unused part."""
    start, end = period
    out = []
    for (t, cur), ms in sorted(months.items()):
        for m in ms:
            c = m.commitment
            unused = m.fee - Fraction(money(m.amortized))           # as the invoice has it: fee less amortized
            common = {**base, **_account(t, "", cur, c.pool if c.pool != "*" else ""),
                      "ChargePeriodStart": _iso(start), "ChargePeriodEnd": _iso(end), "ResourceId": c.name,
                      "ResourceName": f"{c.gpus} GPUs committed in {c.pool}", "ResourceType": "GPU commitment",
                      "SkuId": f"commitment/{c.pool}", "SkuPriceId": f"{c.name}@{c.per_gpu_month}",
                      "ConsumedQuantity": None, "ConsumedUnit": None, "ListUnitPrice": None, "ListCost": Fraction(0),
                      "ContractedUnitPrice": Fraction(c.per_gpu_month), "PricingCategory": "Committed",
                      "PricingUnit": "GPU-Month", "Tags": json.dumps({"pool": c.pool}, sort_keys=True)}
            out.append({**common, **_commitment_columns(m, None), "ChargeCategory": "Purchase",
                        "ChargeFrequency": "Recurring", "PricingQuantity": Fraction(c.gpus),
                        "ChargeDescription": f"commitment {c.name}: {c.gpus} GPUs for {month:%Y-%m}",
                        "ContractedCost": m.fee, "BilledCost": m.fee, "EffectiveCost": Fraction(0)})
            out.append({**common, **_commitment_columns(m, "Unused"), "ChargeCategory": "Usage",
                        "ChargeFrequency": "Usage-Based", "PricingQuantity": (m.committed_s - m.used_s) / HOUR,
                        "PricingUnit": "GPU-Hour", "ConsumedQuantity": Fraction(0), "ConsumedUnit": "GPU-Hour",
                        "ContractedUnitPrice": m.rate * HOUR,
                        "ChargeDescription": f"commitment {c.name}: unused GPU-hours of {month:%Y-%m}",
                        "ContractedCost": unused, "BilledCost": Fraction(0), "EffectiveCost": unused})
    return out


def _adjustment_rows(store, base: dict, month: dt.date) -> list[dict]:
    """The adjustments invoiced this month: corrections of closed months."""
    names, found = store.select(f"""
        SELECT tenant, currency, team, pool, gpu_uuid, any(node) AS node, any(gpu_index) AS gpu_index,
               any(gpu_model) AS gpu_model, kind, toDate(period_start) AS day, sum(amount_change) AS amount,
               sum(if(kind = 'late usage', rented_s * gpu_share, toDecimal64(0, 9))) AS consumed_s
        FROM {ledger.ADJUSTMENTS.name} FINAL WHERE invoice_month = %(m)s AND amount_change != 0
        GROUP BY tenant, currency, team, pool, gpu_uuid, kind, day ORDER BY tenant, day, gpu_uuid, kind""",
                                {"m": month})
    out = []
    for a in (dict(zip(names, r)) for r in found):
        amount = Fraction(Decimal(a["amount"]))
        consumed = Fraction(Decimal(a["consumed_s"])) / HOUR
        out.append({**base, **_account(a["tenant"], a["team"], a["currency"], a["pool"]),
                    "ChargeCategory": "Adjustment", "ChargeClass": "Correction", "ChargeFrequency": "Usage-Based",
                    "ChargePeriodStart": _iso(a["day"]), "ChargePeriodEnd": _iso(a["day"] + dt.timedelta(days=1)),
                    "ChargeDescription": f"{a['kind']} of {a['day']:%Y-%m} (a closed month), invoiced {month:%Y-%m}",
                    "ConsumedQuantity": consumed, "ConsumedUnit": "GPU-Hour", "PricingQuantity": consumed,
                    "PricingUnit": "GPU-Hour", "PricingCategory": "Other", "ListUnitPrice": None,
                    "ListCost": amount, "ContractedUnitPrice": None, "ContractedCost": amount, "BilledCost": amount,
                    "EffectiveCost": amount, "ResourceId": a["gpu_uuid"],
                    "ResourceName": f"{a['node']} GPU {a['gpu_index']}", "ResourceType": "GPU",
                    "SkuId": f"{a['gpu_model'] or 'GPU'}/adjustment", "SkuPriceId": a["kind"],
                    "Tags": json.dumps({"pool": a["pool"], "team": a["team"]}, sort_keys=True)})
    return out


def _priced_s(r) -> Fraction:
    """The GPU-seconds the tenant's mode priced: rented (and the on-demand minimum's top-up), or under usage
    billing its busy or utilization-weighted time."""
    share = Fraction(Decimal(r.gpu_share or 1))
    if r.billing_mode == "usage" and Decimal(r.price_per_gpu_hour):
        return Fraction(Decimal(r.amount)) / Fraction(Decimal(r.price_per_gpu_hour)) * HOUR
    return (Fraction(Decimal(r.rented_s)) + Fraction(Decimal(r.minimum_topup_s))) * share


def _list_price(tariff: Tariff, r) -> Decimal:
    p = tariff.price("on_demand", r.pool or None, r.gpu_model or None, ledger.unix(r.period_start))
    return p.per_gpu_hour if p is not None and p.per_gpu_hour is not None else Decimal(r.price_per_gpu_hour)


def _account(tenant: str, team: str, currency: str, pool: str) -> dict:
    return {"BillingAccountId": tenant, "BillingAccountName": tenant, "BillingCurrency": currency,
            "SubAccountId": f"{tenant}/{team}" if team else tenant, "SubAccountName": team or tenant,
            "RegionId": pool or "default", "RegionName": pool or "default"}


def _tags(r) -> str:
    tags = {"pool": r.pool, "gpu_model": r.gpu_model, "node": r.node, "billing_mode": r.billing_mode}
    if r.team:
        tags["team"] = r.team
    return json.dumps(tags, sort_keys=True)


def _commitment_columns(m, status: str | None) -> dict:
    c = m.commitment
    return {"CommitmentDiscountId": c.name, "CommitmentDiscountName": f"{c.gpus} GPUs in {c.pool}",
            "CommitmentDiscountCategory": "Usage", "CommitmentDiscountType": "GPU commitment",
            "CommitmentDiscountStatus": status}


def _reconcile(out: list[dict], months: dict, billed: dict[tuple[str, str], Fraction]) -> None:
    """Money to 6 decimals such that the totals are the invoices' to the micro-unit: the rows a commitment covers
    add up, in effective cost, to its amortized fee; the usage rows' billed cost, per tenant and currency, to the
    ledger's amount less the usage the commitments covered (``billed``); the rest rounded row by row."""
    by_commitment: dict[str, list[dict]] = defaultdict(list)
    by_account: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in out:
        if row["CommitmentDiscountStatus"] == "Used":
            by_commitment[row["CommitmentDiscountId"]].append(row)
        elif row["ChargeCategory"] == "Usage" and row["ResourceType"] in ("GPU", "MIG instance"):
            by_account[(row["BillingAccountId"], row["BillingCurrency"])].append(row)
    amortized = {m.commitment.name: Fraction(money(m.amortized)) for ms in months.values() for m in ms}
    for name, found in by_commitment.items():
        for row, v in zip(found, _round([r["EffectiveCost"] for r in found], amortized[name])):
            row["EffectiveCost"] = v
    for key, found in by_account.items():
        for row, v in zip(found, _round([r["BilledCost"] for r in found], billed[key])):
            row["BilledCost"] = row["EffectiveCost"] = v
    for row in out:
        for k in (*MONEY, *PRICES, *QUANTITIES):
            v = row[k]
            if isinstance(v, Fraction):
                row[k] = Decimal(money(v))


def write(found: list[dict], path: str, fmt: str) -> int:
    """Write the rows as FOCUS CSV or Parquet; returns how many."""
    if fmt == "focus-csv":
        with open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(COLUMNS)
            for r in found:
                w.writerow(["" if r[c] is None else r[c] for c in COLUMNS])
        return len(found)
    import pyarrow as pa
    import pyarrow.parquet as pq
    numeric = set(MONEY) | set(PRICES) | set(QUANTITIES)
    arrays = {c: pa.array([None if r[c] is None else float(r[c]) for r in found], pa.float64()) if c in numeric
              else pa.array([r[c] for r in found], pa.string()) for c in COLUMNS}
    pq.write_table(pa.table(arrays), path)
    return len(found)
