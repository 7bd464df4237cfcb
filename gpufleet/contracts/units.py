"""An alert's evidence as people read it: the raw figures machines keep (bytes, decimal GB, seconds, shares)
in GiB, GiB/h, GiB/s, minutes, percent, W and GHz. The evidence itself keeps the raw numbers; this is for
messages and pages (Slack fields, the fleet page)."""
from __future__ import annotations

import json
from typing import Any

GIB = 2 ** 30
GB = 1e9

# key suffix -> (the label's suffix removed, a function of the value giving its text); the first that ends the key
_UNITS: tuple[tuple[str, Any], ...] = (
    ("_bytes_per_h", lambda v: f"{v / GIB:.2f} GiB/h"),
    ("_bytes_per_s", lambda v: f"{v / GIB:.2f} GiB/s"),
    ("_bytes", lambda v: f"{v / GIB:.1f} GiB"),
    ("_gb_per_h", lambda v: f"{v * GB / GIB:.2f} GiB/h"),
    ("_gb_per_s", lambda v: f"{v * GB / GIB:.2f} GiB/s"),
    ("_gb", lambda v: f"{v * GB / GIB:.1f} GiB"),
    ("_pct", lambda v: f"{v:.1f}%"),
    ("_share", lambda v: f"{v:.0%}"),
    ("_w", lambda v: f"{v:.0f} W"),
    ("_mhz", lambda v: f"{v / 1000:.2f} GHz"),
    ("_min", lambda v: f"{v:.0f} min"),
    ("minutes_to_oom", lambda v: f"{v:.0f} min"),
    ("_s", lambda v: f"{v / 60:.1f} min"),
)


def readable(key: str, value: Any) -> tuple[str, str]:
    """One evidence field as (label, text): ``rate_bytes_per_h`` 14685240297 is ("rate", "13.68 GiB/h")."""
    if isinstance(value, bool) or value is None or not isinstance(value, int | float):
        return key.replace("_", " "), _plain(value)
    for suffix, show in _UNITS:
        if key.endswith(suffix):
            label = key[: -len(suffix)] if suffix.startswith("_") else key
            return (label or key).replace("_", " "), show(value)
    return key.replace("_", " "), f"{value:.6g}" if isinstance(value, float) else str(value)


def readable_evidence(evidence: dict) -> list[tuple[str, str]]:
    """Every field of an evidence, readable, each label once (a figure kept in two units is shown once)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for key, value in evidence.items():
        label, text = readable(key, value)
        if label in seen:
            continue
        seen.add(label)
        out.append((label, text))
    return out


def _plain(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
