"""The committed Laguna 102 tok/s record (`records/laguna-102tps`) as the gate tests read it:
where it lies, the conventional median its bench recomputes to, and its four tensor-parallel
ranks with the log prefix that names them."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro_serving.builder.documents.manifest import LogMarker
from repro_serving.launch.historical import Record, load_record

RECORD = Path(__file__).resolve().parents[1] / "records" / "laguna-102tps"
CONVENTIONAL_MEDIAN = 101.94172124017027
RANKS = tuple(f"Worker_TP{i}_EP{i}" for i in range(4))
RANK_PATTERN = r"^\((Worker_TP\d+_EP\d+) pid=\d+\)"


def per_rank_marker(name: str, pattern: str) -> LogMarker:
    """A marker each of the four ranks logs once."""
    return LogMarker(
        name=name,
        pattern=pattern,
        rank_pattern=RANK_PATTERN,
        per_rank=dict.fromkeys(RANKS, 1),
    )


def laguna_record() -> Record:
    """The record loaded; a missing record fails, for a skip would hide that nothing ran."""
    if not RECORD.is_dir():
        pytest.fail(f"the Laguna record is not at {RECORD}: the tests need records/laguna-102tps")
    return load_record(RECORD)
