"""Quantities as psar spells them: sizes with binary K/M/G suffixes, durations
(50us), bandwidths (1Gbit, decimal as NIC speeds are quoted)."""

import re

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
RATE_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_bytes(text):
    """'4K' -> 4096, '16M' -> 16777216, 4096 -> 4096."""
    t = str(text).strip().upper().replace("IB", "").replace("B", "")
    suffix = t[-1] if t and t[-1] in SIZE_UNITS else ""
    try:
        return int(float(t[: len(t) - len(suffix)]) * SIZE_UNITS[suffix])
    except ValueError:
        raise ValueError(f"size '{text}': expected e.g. 4096, 4K, 16M") from None


def human(nbytes):
    """4096 -> '4K'; sizes that are no whole multiple stay in bytes."""
    for s in ("G", "M", "K"):
        if nbytes >= SIZE_UNITS[s] and nbytes % SIZE_UNITS[s] == 0:
            return f"{nbytes // SIZE_UNITS[s]}{s}"
    return str(nbytes)


def parse_bandwidth(text):
    """'1Gbit' -> bytes per second."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(bit|B)(/s|ps)?\s*", str(text))
    if not m:
        raise ValueError(f"bandwidth '{text}': expected e.g. 1Gbit or 125MB")
    value = float(m.group(1)) * RATE_UNITS[m.group(2)]
    return value / 8 if m.group(3) == "bit" else value


def parse_seconds(text):
    """'50us' -> 5e-05."""
    t = str(text).strip()
    for unit, scale in (("us", 1e-6), ("ms", 1e-3), ("ns", 1e-9), ("s", 1.0)):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * scale
    raise ValueError(f"duration '{text}': expected e.g. 50us")
