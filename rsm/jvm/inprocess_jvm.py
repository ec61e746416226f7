"""The in-process transport's dealings with the JVM it shares the process with: JPype's ties between the two
garbage collectors, the JVM's shutdown hooks, and Python exceptions turned into Kafka's Java ones, also while the
JVM shuts down (see ``rsm.jvm.inprocess``)."""

from __future__ import annotations

import gc
import time

from rsm.errors import RemoteResourceNotFoundException, RetriableRemoteStorageException
from rsm.jvm import codec as wire


def freeze_startup_objects() -> int:
    """Move every object Python tracks now (modules, classes, the configured plugin) out of all later collections.

    JPype answers each Java GC with a full Python collection (``PyGC_Collect``) under the GIL; in a broker that is
    every young GC, and a full pass over start-up's objects is what the broker's reader threads would wait for.
    Objects made later are collected as usual. Returns how many objects are frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def adopt_shutdown_hooks() -> int:
    """Move the application's JVM shutdown hooks under JPype's, which run before JPype disables proxies.

    Needs ``--add-opens java.base/java.lang=ALL-UNNAMED`` (the launcher adds it). Returns how many moved.
    """
    from jpype import JClass

    hooks_cls = JClass("java.lang.ApplicationShutdownHooks")
    field = hooks_cls.class_.getDeclaredField("hooks")
    field.setAccessible(True)
    target = JClass("java.lang.Thread").class_.getDeclaredField("target")
    target.setAccessible(True)
    runtime = JClass("java.lang.Runtime").getRuntime()
    ctx = JClass("org.jpype.JPypeContext").getInstance()
    hooks = field.get(None)
    if hooks is None:  # shutdown already in progress
        return 0
    moved = 0
    for t in list(hooks.keySet()):
        runnable = target.get(t)
        if runnable is not None and str(runnable.getClass().getName()).startswith("org.jpype."):
            continue
        if runtime.removeShutdownHook(t):
            ctx.addShutdownHook(t)
            moved += 1
    return moved


SHUTDOWN_CLASSES = (
    # what an interrupted broker thread may see thrown from a Java call
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
    "java.nio.channels.AsynchronousCloseException",
    "java.lang.IllegalStateException",
    # what _java_error raises into Java
    "org.apache.kafka.server.log.remote.storage.RemoteStorageException",
    "org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException",
    "io.kts.shim.KafkaErrors",
)
"""Java classes the bridge or an interrupted broker thread may meet while the JVM shuts down (besides the runtime
classes :func:`wrap_shutdown_classes` finds by making the objects themselves)."""


def wrap_shutdown_classes() -> list[str]:
    """Make JPype's Python wrapper of every Java class the bridge may meet while the JVM shuts down; returns their
    names.

    JPype makes a class's wrapper the first time Python meets the class (``TypeFactoryNative.newWrapper``), and
    reads the class's members from Java while it does. During a JVM shutdown, JPype's hook marks the JVM as gone
    right after the broker's hooks (adopted under JPype's) have finished; a wrapper made after that fails to read
    the members, and JPype ends the process with a SIGSEGV instead of an exception. Made here, before any
    shutdown can begin, each wrapper is only looked up later. Besides :data:`SHUTDOWN_CLASSES`, this makes what
    :func:`java_error` builds for each kind of failure (on a broker with Kafka's
    RetriableRemoteStorageException, that class too) and the direct buffers a fetch hands over."""
    import jpype
    import jpype.nio

    names = [str(jpype.JClass(name).class_.getName()) for name in SHUTDOWN_CLASSES]
    samples: list[BaseException] = [
        RemoteResourceNotFoundException("probe"),
        RetriableRemoteStorageException("probe"),
        ValueError("probe"),
    ]
    objects = [java_error(e) for e in samples]
    writable = jpype.nio.convertToDirectBuffer(bytearray(8))
    read_only = jpype.nio.convertToDirectBuffer(b"\0" * 8)
    objects += [writable, writable.slice(0, 4), read_only, read_only.slice(0, 4)]
    names += [str(o.getClass().getName()) for o in objects]
    return sorted(set(names))


def java_error(exc: BaseException) -> BaseException:
    """Kafka's exception classes with the Python type and message; Java exceptions pass through."""
    import jpype

    if isinstance(exc, jpype.JException):
        return exc
    status, type_name, message = wire.error_parts(exc)
    text = f"{type_name}: {message}" if message else type_name
    if status == wire.STATUS_RETRIABLE:
        # the shim's own run-time lookup: RetriableRemoteStorageException where the broker has it (as the sidecar
        # transport throws it), else RemoteStorageException
        return jpype.JClass("io.kts.shim.KafkaErrors").retriable(text)
    pkg = "org.apache.kafka.server.log.remote.storage."
    name = "RemoteResourceNotFoundException" if status == wire.STATUS_NOT_FOUND else "RemoteStorageException"
    return jpype.JClass(pkg + name)(text)


def into_java(exc: BaseException) -> BaseException:
    """What a bridge method raises into Java for ``exc``: :func:`java_error`'s exception, unless JPype has
    already been told the JVM is going away. Then this thread waits here for the JVM's halt to end the process:
    JPype can no longer turn any exception into a Java one and ends the process with a SIGSEGV instead, while
    returning would report a failed call as a success. Only a call still running after the broker's shutdown
    hook has finished (say, a fetch from a store that stopped answering) gets here."""
    import jpype

    if not jpype.isJVMStarted():
        while True:
            time.sleep(3600)
    return java_error(exc)
