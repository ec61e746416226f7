"""The fault-injecting proxy of the reliability, metrics and scale tests: it lives in ``rsm.cli.faultproxy`` (next to
the emulators it sits in front of) so that benchmarks import it too; re-exported here for the tests."""

from rsm.cli.faultproxy import (  # noqa: F401 - re-exported for the tests
    FAULTS,
    NO_FAULTS,
    FaultPlan,
    FaultProxy,
    Link,
    ProxyStats,
    object_kind,
)
