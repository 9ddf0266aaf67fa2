"""Conversions between the native module's JSON and the public Python objects.

Private: the public types are in ``m3.types`` and ``m3.storage``. Nothing here decides
anything; every rule runs in m3's component.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Dict, Optional

_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$"
)


def parse_time(text: str) -> _dt.datetime:
    """An RFC 3339 time from the engine -> a timezone-aware ``datetime`` (microseconds)."""
    match = _TIME.match(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    date, clock, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    zone = "+00:00" if zone == "Z" else zone
    return _dt.datetime.fromisoformat(f"{date}T{clock}.{micros}{zone}")


def optional_time(text: Optional[str]) -> Optional[_dt.datetime]:
    """``parse_time`` for a time that may be absent."""
    return None if text is None else parse_time(text)


def format_time(value: _dt.datetime, what: str) -> str:
    """A timezone-aware ``datetime`` -> RFC 3339 in UTC; a naive one is refused."""
    if not isinstance(value, _dt.datetime):
        raise TypeError(f"{what} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{what} must be timezone-aware (a naive datetime has no zone)")
    utc = value.astimezone(_dt.timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds(value: Optional[float], what: str) -> Optional[float]:
    """A number of seconds given by the caller, checked for its type only."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    return float(value)


def plain(value: Any) -> Dict[str, Any]:
    """A JSON object given by the engine, as a plain ``dict``."""
    return dict(value) if value is not None else {}
