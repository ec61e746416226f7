"""Configuration keys of the JVM shim (``io.kts.shim.PythonRemoteStorageManager``) and its Python sidecar.

The Java shim reads these itself (it must start the interpreter before Python can parse anything) and also
passes them, with every other key, to Python untouched. They are declared here once so the configuration table
of docs/configuration.md (``kts config-docs``) documents them; the defaults must match ``Settings.java``.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping

from backends.configdef import ConfigDef, ConfigKey, in_range, one_of
from rsm._version import __version__

_GROUP = "jvm"

SHARED_DIR_KEY = "jvm.sidecar.shared.memory.dir"

SHIM_VERSION_KEY = "jvm.shim.version"
"""The key the shim jar adds to the configuration it hands Python: its own release version."""

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "jvm.transport",
            "string",
            "auto",
            "How the broker-side shim reaches Python: 'sidecar' runs `python -m rsm.jvm.sidecar` as a child process "
            "and talks over a Unix socket; 'inprocess' calls the manager inside the broker JVM (only when the "
            "broker was started by `kts kafka-server-start`); 'auto' picks inprocess when that launcher "
            "registered a Python bridge, otherwise sidecar.",
            validator=one_of("auto", "sidecar", "inprocess"),
            group=_GROUP,
        ),
        ConfigKey(
            "python.executable",
            "string",
            "python3",
            "Interpreter the sidecar runs with (a path or a name on the broker's PATH). It needs Python 3.11+ "
            "with kafka-tiered-storage installed; a broken environment fails the broker's startup with the "
            "interpreter and the failed import named.",
            group=_GROUP,
        ),
        ConfigKey(
            "python.path",
            "string",
            "",
            "Extra entries (colon-separated) put in front of PYTHONPATH for the sidecar, e.g. a directory with "
            "a custom storage backend.",
            group=_GROUP,
        ),
        ConfigKey(
            "python.manager.class",
            "string",
            "rsm:RemoteStorageManager",
            "module:Class of the Python RemoteStorageManager the sidecar or in-process bridge instantiates "
            "(a subclass of rsm.RemoteStorageManager, or anything with the same methods).",
            group=_GROUP,
        ),
        ConfigKey(
            "python.log.level",
            "string",
            "INFO",
            "Log level of the sidecar's Python logging. Its log lines are forwarded into the broker's log "
            "(logger io.kts.shim.sidecar).",
            validator=one_of("DEBUG", "INFO", "WARNING", "ERROR"),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.socket.dir",
            "string",
            "",
            "Directory for the sidecar's Unix socket (default: java.io.tmpdir). The socket is created with "
            "owner-only permissions and removed on close.",
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.socket",
            "string",
            "auto",
            "How the shim reaches its sidecar: unix (an owner-only Unix socket; needs Java 16+), tcp (a loopback "
            "port; each connection first sends a 32-byte secret the shim passes in the sidecar's environment), "
            "or auto (unix on Java 16+, tcp on Java 11-15).",
            validator=one_of("auto", "unix", "tcp"),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.startup.timeout.ms",
            "long",
            60000,
            "How long configure() (and a restart) waits for the sidecar to import and configure the manager.",
            validator=in_range(1, None),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.request.timeout.ms",
            "long",
            120000,
            "Longest wait for a sidecar reply to a fetch, index fetch or delete, and for each chunk of a fetch "
            "stream the broker is reading; on expiry the call fails with RemoteStorageException.",
            validator=in_range(1, None),
            group=_GROUP,
        ),
        ConfigKey(
            SHIM_VERSION_KEY,
            "string",
            "",
            "Set by the shim jar to its own release version (do not set it). Python compares it with its own at "
            "start-up, on both transports: the jar and the Python package must be the same release, and a "
            "mismatch fails the broker's configure() naming both versions and the fix.",
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.copy.timeout.ms",
            "long",
            2100000,
            "Longest wait for copyLogSegmentData (upload of a whole segment): 5 minutes more than the backends' "
            "default upload timeout, so a copy that times out in Python fails there and cleans up first. A copy "
            "the shim gives up on is cancelled in Python, and the shim waits (up to jvm.sidecar.request.timeout.ms) "
            "for the cancel to confirm that the copy's objects are gone before it reports the failure.",
            validator=in_range(1, None),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.shutdown.timeout.ms",
            "long",
            10000,
            "How long close() waits for the sidecar to close the manager and exit before killing it.",
            validator=in_range(0, None),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.pool.size",
            "int",
            16,
            "Idle Unix-socket connections the shim keeps for reuse (concurrent calls may open more).",
            validator=in_range(0, 4096),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.shared.memory.bytes",
            "long",
            256 * 1024 * 1024,
            "Shared memory (a file on /dev/shm, mapped by both sides) the sidecar decodes fetched chunks into, so "
            "the shim copies them straight into the broker's buffers instead of receiving them over the socket. "
            "Split into buffers of chunk.size, all allocated when the sidecar starts; the sidecar refuses to start "
            "(a configure() error naming this key) when /dev/shm has less free, or when the container's memory "
            "limit cannot hold it beside the broker's heap and the chunk cache. When all are in use, or with 0, "
            "fetched bytes go over the socket.",
            validator=in_range(0, None),
            group=_GROUP,
        ),
        ConfigKey(
            SHARED_DIR_KEY,
            "string",
            "/dev/shm",
            "Folder the sidecar makes its shared memory (jvm.sidecar.shared.memory.bytes) in, as a file the shim maps "
            "and then unlinks. Use it where /dev/shm cannot grow: under Strimzi, which mounts extra volumes only "
            "under /mnt, an emptyDir with medium: Memory and a sizeLimit mounted at e.g. /mnt/kts-shm. It should be "
            "a tmpfs (on a disk the region's pages are written back to it); the start-up check reads its free "
            "space as it does /dev/shm's.",
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.inprocess.buffer.memory.bytes",
            "long",
            128 * 1024 * 1024,
            "With the in-process transport: memory in the broker's process that fetched chunks are decoded into, "
            "split into buffers of chunk.size made once at configure() (pages are used as they are first "
            "written). The chunk cache's memory tier keeps at most half of it, the rest is for fetches in flight; "
            "when all buffers are in use, fetches decode into buffers allocated for the moment.",
            validator=in_range(0, None),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.kept.streams",
            "int",
            8,
            "Fetch streams the shim keeps open after the broker closed them inside a shared-memory piece, so "
            "that the next fetch of the same segment, which a catching-up consumer starts where the last one "
            "stopped, goes on reading the piece already decoded there: no request to the sidecar at all. Each "
            "kept stream holds one connection and, in the sidecar, the chunks its stream has decoded ahead "
            "(at most fetch.readahead.chunks plus three, in the shared memory while it lasts), on top of the "
            "broker's streams in use. 0 cancels every stream the broker closes early.",
            validator=in_range(0, 4096),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.kept.stream.idle.ms",
            "long",
            5000,
            "A kept stream that no fetch went on with for this long is cancelled, giving its chunks back.",
            validator=in_range(1, None),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.oom.score.adj",
            "int",
            800,
            "The sidecar's /proc/self/oom_score_adj (Linux; -1000..1000): under a container or cgroup memory limit "
            "the kernel's OOM killer picks the process with the highest score, so the sidecar goes first and the "
            "broker keeps running; the shim starts a new sidecar. A value below the broker's needs "
            "CAP_SYS_RESOURCE (without it a warning is logged and the score stays as inherited).",
            validator=in_range(-1000, 1000),
            group=_GROUP,
        ),
        ConfigKey(
            "jvm.sidecar.restart.backoff.ms",
            "long",
            1000,
            "Minimum delay between sidecar restarts after it died; doubles while restarts fail (max 30 s).",
            validator=in_range(0, None),
            group=_GROUP,
        ),
    ]
)


def version_skew(config: Mapping[str, str]) -> str | None:
    """Why the shim jar that sent ``config`` does not fit this Python package (None: same release)."""
    jar = str(config.get(SHIM_VERSION_KEY, "")).strip()
    if jar == __version__:
        return None
    jar_text = f"version {jar}" if jar else "older than 0.2.0 (it names no version)"
    install = (
        f"pip install kafka-tiered-storage=={jar}" if jar else "pip install kafka-tiered-storage==<the jar's version>"
    )
    return (
        f"version skew: the shim jar on the broker's class path is {jar_text}, the Python package "
        f"kafka-tiered-storage in {sys.executable} is version {__version__}; they must be the same release. "
        f"Either `{install}` into that interpreter, or put the jar of {__version__} on the broker's class path "
        f"(`kts plugin-path` prints where it is)"
    )


def unknown_shim_keys(config: Mapping[str, object]) -> list[str]:
    """A refusal for each ``jvm.*``/``python.*`` key nothing declares, with the closest declared one; the plugin's
    ``configure()`` checks every other key."""
    out = []
    for key in map(str, config):
        if key.startswith(("jvm.", "python.")) and key not in CONFIG_DEF.keys:
            close = difflib.get_close_matches(key, list(CONFIG_DEF.keys), n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            out.append(
                f"rsm.config.{key}: The configuration '{key}' was supplied but isn't a known config.{hint} The shim "
                f"would go on without it: correct or remove it"
            )
    return out
