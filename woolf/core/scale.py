"""The float32 scalars of the merge arithmetic, rounded once, in one place (no torch).

Usage:
    f32(0.1)                           # 0.1 rounded to the float32 the arithmetic uses
    delta_scale(alpha, attenuation)    # alpha * attenuation as a float32: the factor on a delta

Every auditor must get the same bytes (core/merge_rules.py): a scalar is computed in
Python floats and rounded to float32 once, here, before any tensor sees it. The merge rules,
a clipped delta (core/scores.py) and rebuild's sparse path (ledger/retention/rebuild.py)
all take their scale from these two functions.
"""

from __future__ import annotations

import struct


def f32(x: float) -> float:
    """``x`` rounded to the float32 the arithmetic uses."""
    return struct.unpack("f", struct.pack("f", x))[0]


def delta_scale(alpha: float, attenuation: float) -> float:
    """``alpha * attenuation`` rounded to float32: the factor on an accepted delta before its rule sees it."""
    return f32(alpha * attenuation)
