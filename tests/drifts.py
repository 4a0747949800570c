"""Expected drifts, written with their fixed fields once.

`drift_of(kind, why=...)` is a maker of the drifts of one kind whose fields given here are the
same in every case; a call gives the other fields positionally, in the order of `Drift`'s fields
(subject, expected, observed, why), and a call giving too few or too many is an error.
"""

from __future__ import annotations

from collections.abc import Callable

from repro_serving.builder.drift import Drift, DriftKind

FIELDS = ("subject", "expected", "observed", "why")


def drift_of(kind: DriftKind, **fixed: str) -> Callable[..., Drift]:
    unknown = set(fixed) - set(FIELDS)
    if unknown:
        raise TypeError(f"a drift has no field {sorted(unknown)}")
    given = [field for field in FIELDS if field not in fixed]

    def make(*values: str) -> Drift:
        return Drift(kind=kind, **fixed, **dict(zip(given, values, strict=True)))

    return make
