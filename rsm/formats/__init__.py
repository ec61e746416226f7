"""Segment formats plugged into the plugin beside its classic one: Iceberg mode (``rsm.formats.iceberg``).

This package stands above ``rsm.core``, whose ``SegmentFormat`` protocol each format here implements, and above
``rsm.iceberg``, which the Iceberg format drives; ``rsm.core`` imports neither. The package root plugs them in
(``plug_all``), so every ``RemoteStorageManager`` finds them.
"""

from __future__ import annotations

from rsm.core.segment_format import plug_format
from rsm.formats.iceberg import ICEBERG

__all__ = ["plug_all"]


def plug_all() -> None:
    """Plug every format of this package into ``rsm.core.segment_format``."""
    plug_format(ICEBERG)
