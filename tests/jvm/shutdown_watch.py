"""``kts kafka-server-start`` that reports what may crash JPype once the JVM has begun to shut down
(tests/jvm/test_inprocess_shutdown.py).

A hook registered with JPype's own (so it runs when the broker's hooks run, before JPype disables proxies)
marks the start of the shutdown. From then on:

* each Python wrapper JPype makes for a Java class prints ``WRAPPER-MADE-DURING-SHUTDOWN <class> <thread>``
  (a customizer on ``java.lang.Object`` sees every one); made after JPype has told its native side that the
  JVM is going away, such a wrapper ends the process with a SIGSEGV;
* the broker's main thread coming back into Python (whatever Java threw at it is then converted, maybe into a
  class met for the first time) prints ``MAIN-THREAD-BACK-IN-PYTHON-DURING-SHUTDOWN <event> <name>``.

    python tests/jvm/shutdown_watch.py --kafka-home DIR server.properties
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import jpype
from jpype import JImplementationFor, JImplements, JOverride

from rsm.jvm import inprocess, shim_cli

SHUTTING_DOWN = threading.Event()


@JImplementationFor("java.lang.Object")
class _Watch:
    def __jclass_init__(cls: Any) -> None:  # noqa: N805 - JPype passes the new class
        if SHUTTING_DOWN.is_set():
            name = threading.current_thread().name
            print(f"WRAPPER-MADE-DURING-SHUTDOWN {cls.__name__} {name}", flush=True)


_install = inprocess.install


def _install_and_watch(*args: Any, **kwargs: Any) -> Any:
    bridge = _install(*args, **kwargs)

    @JImplements("java.lang.Runnable")
    class Mark:
        @JOverride
        def run(self) -> None:
            SHUTTING_DOWN.set()

    hook = jpype.JClass("java.lang.Thread")(Mark(), "test-shutdown-mark")
    jpype.JClass("org.jpype.JPypeContext").getInstance().addShutdownHook(hook)
    sys.setprofile(_main_thread_events)  # this thread's only: the one that goes on to run the broker's main
    return bridge


def _main_thread_events(frame: Any, event: str, arg: Any) -> None:
    if SHUTTING_DOWN.is_set():
        sys.setprofile(None)
        name = getattr(arg, "__qualname__", getattr(frame.f_code, "co_qualname", "?"))
        print(f"MAIN-THREAD-BACK-IN-PYTHON-DURING-SHUTDOWN {event} {name}", flush=True)


inprocess.install = _install_and_watch  # the launcher looks it up when it runs

if __name__ == "__main__":
    sys.exit(shim_cli.main(["kafka-server-start", *sys.argv[1:]]))
