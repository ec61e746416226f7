"""What the S3, GCS and Azure backends share: config parsing, the retry/error-mapping wrapper, metrics.

Each cloud backend differs only in how it talks to its SDK and how it classifies that SDK's exceptions.
Everything the manager relies on being *identical* across stores lives here so it cannot drift: range
validation, how a failure is reported (operation, store, bucket and key in the message), what is retried,
and the ``metrics()`` snapshot.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, TypeVar

from backends.base import InvalidRange, KeyNotFound, StorageBackendException
from backends.buffers import UploadBuffers
from backends.configdef import ConfigDef, ConfigException, ConfigKey, in_range
from backends.instrumentation import BackendMetrics
from backends.retry import Deadline, DeadlineExceeded, ErrorKind, RetryPolicy, call_with_retry
from backends.streaming import BodyReadError, ResumingStream

T = TypeVar("T")

STORAGE_PREFIX = "storage."

MIN_POOL_CONNECTIONS = 50
"""HTTP connections a backend's client keeps at least: broker threads (remote log readers, copiers), prefetch and
the tools' pools (32 manifest reads at once) share one client, and a pool below their count discards connections
and reconnects under load (logging a warning for each). AWS's Java SDK keeps 50."""


def parse_storage_config(config_def: ConfigDef, configs: Mapping[str, Any]) -> dict[str, Any]:
    """Parse the ``storage.``-stripped map, reporting problems under the broker-visible ``storage.`` names.

    The manager strips ``storage.`` before calling ``configure``, but the operator wrote
    ``rsm.config.storage.s3.bucket.name``; an error that says ``s3.bucket.name`` would send them looking for
    the wrong line. So the keys are re-declared with the prefix for parsing only.
    """
    prefixed = ConfigDef()
    for key in config_def.keys.values():
        prefixed.define(dataclasses.replace(key, name=STORAGE_PREFIX + key.name))
    raw = {STORAGE_PREFIX + k: v for k, v in configs.items()}
    parsed = prefixed.parse(raw)
    return {k[len(STORAGE_PREFIX) :]: v for k, v in parsed.items()}


def require_container(values: Mapping[str, Any], key: str, store: str, noun: str) -> None:
    """Fail ``configure`` when the bucket/container key is unset, naming the broker-visible key."""
    if not values[key]:
        raise ConfigException(
            f"Missing required configuration '{STORAGE_PREFIX}{key}' for the {store} backend: "
            f"set it to the {noun} that should hold the tiered objects"
        )


def config_error(key: str, message: str) -> ConfigException:
    """A ``ConfigException`` naming the ``storage.``-prefixed key."""
    return ConfigException(f"Invalid configuration {STORAGE_PREFIX}{key}: {message}")


def common_keys(prefix: str, group: str, *, default_attempt_timeout_ms: int = 60_000) -> list[ConfigKey]:
    """Timeout and retry keys every cloud backend declares under its own prefix (``s3.``, ``gcs.``...)."""
    return [
        ConfigKey(
            f"{prefix}.api.call.timeout",
            "long",
            None,
            "Upper bound in milliseconds for one API call including all its retries. null: bounded only by "
            f"{prefix}.retry.max.attempts times the attempt timeout.",
            validator=in_range(1, None),
            valid_values="null or [1,...]",
            group=group,
        ),
        ConfigKey(
            f"{prefix}.api.call.attempt.timeout",
            "long",
            default_attempt_timeout_ms,
            "Timeout in milliseconds for one attempt of an API call: connecting, and waiting for each "
            "response read (a stalled socket fails the attempt, which is then retried).",
            validator=in_range(1, None),
            group=group,
        ),
        ConfigKey(
            f"{prefix}.retry.max.attempts",
            "int",
            3,
            "Attempts per API call, the first one included. Only throttling, server (5xx), timeout and "
            "connection errors are retried.",
            validator=in_range(1, 20),
            group=group,
        ),
        ConfigKey(
            f"{prefix}.retry.backoff.ms",
            "long",
            100,
            "Base of the jittered exponential backoff between attempts (doubled for throttling).",
            validator=in_range(0, None),
            group=group,
        ),
        ConfigKey(
            f"{prefix}.retry.backoff.max.ms",
            "long",
            10_000,
            "Upper bound of one backoff pause.",
            validator=in_range(0, None),
            group=group,
        ),
        ConfigKey(
            f"{prefix}.upload.timeout.ms",
            "long",
            1_800_000,
            "Overall deadline for uploading one object (all parts, retries and the commit). When it "
            "passes, the upload is aborted and fails, so a stuck upload can never hang the broker's "
            "copy thread forever.",
            validator=in_range(1000, None),
            group=group,
        ),
    ]


UPLOAD_BUFFER_MEMORY = 64 * 1024 * 1024
"""The default byte budget of a backend's upload buffers, shared by all its uploads."""


def upload_buffer_key(prefix: str, group: str, part_key: str) -> ConfigKey:
    """``<prefix>.upload.buffer.memory.bytes``: the bytes of parts all uploads of the plugin hold at once."""
    return ConfigKey(
        f"{prefix}.upload.buffer.memory.bytes",
        "long",
        UPLOAD_BUFFER_MEMORY,
        "Memory for the parts of all uploads at once (the broker's copier threads share it), in bytes: a part "
        f"is held from when it is read until it is sent. At least {part_key}; about twice the parts sent at "
        "once keeps the uploads busy.",
        validator=in_range(1, None),
        group=group,
    )


def upload_buffers(values: Mapping[str, Any], prefix: str, part_key: str) -> UploadBuffers:
    """The shared budget of ``<prefix>.upload.buffer.memory.bytes``; refused when one part does not fit in it."""
    key = f"{prefix}.upload.buffer.memory.bytes"
    if values[key] < values[part_key]:
        raise config_error(
            key,
            f"{values[key]} bytes cannot hold one part of {part_key} ({values[part_key]} bytes): raise it to at "
            f"least {values[part_key]} or lower {part_key}",
        )
    return UploadBuffers(values[key])


def retry_policy(values: Mapping[str, Any], prefix: str) -> RetryPolicy:
    call_timeout = values[f"{prefix}.api.call.timeout"]
    return RetryPolicy(
        max_attempts=values[f"{prefix}.retry.max.attempts"],
        backoff_s=values[f"{prefix}.retry.backoff.ms"] / 1000,
        backoff_max_s=values[f"{prefix}.retry.backoff.max.ms"] / 1000,
        call_timeout_s=None if call_timeout is None else call_timeout / 1000,
    )


def exclusive(values: Mapping[str, Any], keys: list[str], what: str) -> None:
    """Fail when more than one of ``keys`` is set (credentials options that cannot be combined)."""
    present = [k for k in keys if values.get(k) not in (None, "", False)]
    if len(present) > 1:
        names = ", ".join(STORAGE_PREFIX + k for k in present)
        raise ConfigException(f"Invalid configuration: {names} cannot be set together; {what}")


def describe_error(e: BaseException) -> str:
    notes = getattr(e, "__notes__", None) or []
    text = str(e) or type(e).__name__
    return text + (f" [{'; '.join(notes)}]" if notes else "")


class CloudBackend:
    """Common behaviour of the cloud backends; subclasses set ``STORE`` and ``CONTAINER_MISSING`` and implement
    ``_error_code`` and ``_classify_error``."""

    STORE = "cloud"
    CONTAINER_MISSING: frozenset[str] = frozenset()
    """The store's error codes that say the bucket or container itself does not exist (see ``_classify``)."""

    def __init__(self) -> None:
        self.instrumentation = BackendMetrics(self.STORE.lower())
        self._policy = RetryPolicy()
        self._upload_timeout_s: float = 1800.0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # --- to be provided by subclasses -------------------------------------------------------------
    def _error_code(self, e: BaseException) -> str:
        """The store's own error code of ``e`` (``NoSuchBucket``, ``ContainerNotFound``...), "" when it has none."""
        return ""

    def _classify_error(self, e: BaseException) -> ErrorKind:
        """What kind of failure ``e`` is, by the store's SDK types, status codes and error codes."""
        raise NotImplementedError

    def _where(self) -> str:
        """``S3 bucket 'x'``: how error messages name the container of the key."""
        raise NotImplementedError

    def _describe(self, e: BaseException) -> str:
        """The SDK error in one line for our messages (subclasses trim SDK-specific noise)."""
        return describe_error(e)

    # --- shared ---------------------------------------------------------------------------------------
    def _container_missing(self, e: BaseException) -> bool:
        return self._error_code(e) in self.CONTAINER_MISSING

    def _classify(self, e: BaseException) -> ErrorKind:
        """The one rule every store shares: a missing bucket or container is a configuration problem, never a
        missing key (so never ``KeyNotFound``, never retried); everything else as the store classifies it."""
        if self._container_missing(e):
            return ErrorKind.OTHER
        return self._classify_error(e)

    def _worker_pool(self, size: int, thread_name_prefix: str) -> concurrent.futures.ThreadPoolExecutor:
        """The backend's own pool (parts, blocks, deletes), created on first use: a read-only backend never
        starts threads."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix=thread_name_prefix)
            return self._pool

    def _close_worker_pool(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _paginate(
        self, operation: str, prefix: str, page: Callable[[str | None], tuple[list[str], str | None]]
    ) -> Iterator[str]:
        """Yield every key of a listing; ``page(token)`` returns one page of keys and the next token (None at
        the end). Each page is its own retried call, so a listing resumes where a transient error hit it."""
        token: str | None = None
        while True:
            names, token = self._call(operation, prefix, lambda tok=token: page(tok), key_read=False)
            yield from names
            if not token:
                return

    def metrics(self) -> dict[str, int]:
        """Snapshot of request, error and byte counters (see ``BackendMetrics``)."""
        return self.instrumentation.snapshot()

    def _call(
        self,
        operation: str,
        key: str,
        fn: Callable[[], T],
        *,
        deadline: Deadline | None = None,
        start: int = 0,
        end: int | None = None,
        key_read: bool = True,
    ) -> T:
        """One API call of ``operation`` on ``key`` with retries; SDK failures leave as our exceptions.

        ``key_read=False`` marks calls (uploads, listings) where "not found" can only mean the bucket or
        container is missing, which must not surface as ``KeyNotFound``.
        """
        try:
            return call_with_retry(
                fn,
                operation=operation,
                policy=self._policy,
                classify=self._classify,
                metrics=self.instrumentation,
                deadline=deadline,
            )
        except StorageBackendException:
            raise
        except Exception as e:
            raise self._map_error(operation, key, e, start=start, end=end, key_read=key_read) from e

    def _map_error(
        self,
        operation: str,
        key: str,
        e: BaseException,
        *,
        start: int = 0,
        end: int | None = None,
        key_read: bool = True,
    ) -> StorageBackendException:
        if isinstance(e, StorageBackendException):
            return e
        if isinstance(e, DeadlineExceeded):
            return StorageBackendException(
                f"{self.STORE} {operation} of key {key!r} in {self._where()} failed: {e}", retriable=True
            )
        if self._container_missing(e):
            return StorageBackendException(
                f"{self.STORE} {operation} of key {key!r} failed: the {self._where()} does not exist (create it, or "
                f"configure the one that holds the tiered objects): {self._describe(e)}"
            )
        kind = self._classify(e)
        if kind is ErrorKind.NOT_FOUND and not key_read:
            return StorageBackendException(
                f"{self.STORE} {operation} of key {key!r} in {self._where()} failed: not found (does the "
                f"{self._where()} exist?): {self._describe(e)}"
            )
        if kind is ErrorKind.NOT_FOUND:
            return KeyNotFound(key, self._where())
        if kind is ErrorKind.INVALID_RANGE:
            return InvalidRange(key, start, end)
        return StorageBackendException(
            f"{self.STORE} {operation} of key {key!r} in {self._where()} failed ({kind.value}): {self._describe(e)}",
            retriable=kind.retriable,
        )

    def _stream_error(self, operation: str, key: str) -> Callable[[BaseException], StorageBackendException]:
        """Mapper for errors raised while the caller reads a download body."""

        def mapper(e: BaseException) -> StorageBackendException:
            return BodyReadError(
                f"{self.STORE} {operation} of key {key!r} in {self._where()} failed while reading the body "
                f"({self._classify(e).value}): {self._describe(e)}",
                self._classify(e).retriable,
            )

        return mapper

    def _fetch_once(self, key: str, start: int, end: int | None) -> BinaryIO:
        """One GET of ``[start, end]`` (itself retried until its headers arrive); subclasses implement it."""
        raise NotImplementedError

    def fetch(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        """A stream over ``[start, end]`` whose body reads are retried: on a reset, stall or truncation the rest
        is fetched again from where the body stopped (same policy as every other call)."""
        first = self._open_checked(key, start, end)
        return ResumingStream(  # type: ignore[return-value]
            first, lambda offset: self._open_checked(key, offset, end), start, self._policy, self.instrumentation
        )

    def _open_checked(self, key: str, start: int, end: int | None) -> BinaryIO:
        """``_fetch_once``, retried when the answer's headers already show a truncated body."""
        failures = 0
        while True:
            try:
                return self._fetch_once(key, start, end)
            except BodyReadError as e:
                failures += 1
                self.instrumentation.error("io")
                if not e.retriable or failures >= self._policy.max_attempts:
                    raise
                time.sleep(self._policy.pause(failures, ErrorKind.IO))

    @staticmethod
    def _check_range(key: str, start: int, end: int | None) -> None:
        if start < 0 or (end is not None and end < start):
            raise InvalidRange(key, start, end)

    def _upload_deadline(self) -> Deadline:
        return Deadline(self._upload_timeout_s)


def upload_parts(
    pool: concurrent.futures.Executor,
    blocks: Iterator[bytes],
    upload_part: Callable[[int, bytes], T],
    *,
    concurrency: int,
    deadline: Deadline,
    what: str,
    on_bytes: Callable[[int], None] | None = None,
    buffers: UploadBuffers | None = None,
) -> list[T]:
    """Upload ``blocks`` as parts 1..n on ``pool``, at most ``concurrency`` in flight; results in part order.

    The source is read on the calling thread, one block ahead of the uploads, so memory stays bounded at
    ``concurrency + 1`` blocks whatever the object size. The first failed part stops reading the source,
    cancels parts not yet started and is re-raised once the running ones have settled (so an abort issued
    by the caller afterwards is not raced by a late part). The overall ``deadline`` raises
    ``DeadlineExceeded``. With ``buffers``, each block arrives reserved in it (``iter_blocks``) and is released
    here once its part has settled, or at once when it is never sent.
    """
    slots = threading.Semaphore(concurrency)
    failed = threading.Event()
    futures: list[concurrent.futures.Future[T]] = []

    def give_back(size: int) -> None:
        if buffers is not None:
            buffers.release(size)

    def settle(f: concurrent.futures.Future[T], size: int) -> None:
        slots.release()
        give_back(size)
        if not f.cancelled() and f.exception() is not None:
            failed.set()

    def wait_for_slot() -> bool:
        while True:
            if failed.is_set():
                return False
            deadline.check(what)
            rem = deadline.remaining()
            if slots.acquire(timeout=0.1 if rem is None else max(0.0, min(0.1, rem))):
                return True

    try:
        for number, block in enumerate(blocks, start=1):
            try:
                free = wait_for_slot()
            except BaseException:
                give_back(len(block))
                raise
            if not free:
                give_back(len(block))
                break
            try:
                future = pool.submit(upload_part, number, block)
            except BaseException:
                slots.release()
                give_back(len(block))
                raise
            size = len(block)
            future.add_done_callback(lambda f, size=size: settle(f, size))
            del block  # the part holds it until it is sent; this loop must not while it reads the next one
            futures.append(future)
            if on_bytes is not None:
                on_bytes(size)
        results: list[T] = []
        for future in futures:
            rem = deadline.remaining()
            try:
                results.append(future.result(timeout=None if rem is None else max(rem, 0.0)))
            except concurrent.futures.TimeoutError:
                raise DeadlineExceeded(f"{what}: deadline of {deadline.seconds:.1f} s exceeded") from None
        return results
    except BaseException:
        for future in futures:
            future.cancel()
        running = [f for f in futures if not f.done()]
        if running:
            concurrent.futures.wait(running, timeout=30)
        raise
