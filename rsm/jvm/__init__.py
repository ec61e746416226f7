"""The Python half of the JVM shim: the sidecar process (``python -m rsm.jvm.sidecar``), the in-process
JPype bridge, their wire codec and shared-memory region, the shim's configuration keys and the launcher
behind ``kts kafka-server-start``. The Java half lives in ``jvm-shim/``.

It may import ``rsm.core`` and everything below it, never ``rsm.cli`` or ``rsm.spark``.
"""
