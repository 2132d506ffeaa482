"""Number formatting shared by the benchmark's tables and targets."""
from __future__ import annotations

import math


def fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def fmt_ci(ci: dict, digits: int = 3) -> str:
    if ci["mean"] is None:
        return "n/a"
    if ci["lo"] is None:
        return f"{ci['mean']:.{digits}f} [n/a]"
    return f"{ci['mean']:.{digits}f} [{ci['lo']:.{digits}f}, {ci['hi']:.{digits}f}]"

