"""Exceptions with Kafka's names, so the JVM shim can map them one to one onto the Java classes."""

from __future__ import annotations

from backends.configdef import ConfigException


class RemoteStorageException(Exception):
    """Kafka's ``RemoteStorageException``: the remote operation failed; the broker will retry later."""


class RemoteResourceNotFoundException(RemoteStorageException):
    """Kafka's ``RemoteResourceNotFoundException``: the segment (its manifest) or the index is not there."""


class RetriableRemoteStorageException(RemoteStorageException):
    """A transient failure (throttling, timeout); Kafka 4.x keeps the partial upload and retries."""


def storage_failure(message: str, cause: BaseException) -> RemoteStorageException:
    """The exception for a failed store call: retriable when the backend says the failure was transient (its own
    retries gave up on throttling, a 5xx, a timeout or a dropped connection), else a plain RemoteStorageException.
    The JVM shim turns the retriable one into Kafka's RetriableRemoteStorageException on brokers that have it."""
    if getattr(cause, "retriable", False) is True:
        return RetriableRemoteStorageException(message)
    return RemoteStorageException(message)


class CorruptDataException(RemoteStorageException):
    """Stored bytes failed an integrity check (GCM tag, CRC-32C, zstd frame, size); nothing is returned."""


class KeyRingException(RemoteStorageException):
    """The data key cannot be unwrapped: the key pair is unknown or is the wrong one."""


class KeyServiceException(RetriableRemoteStorageException):
    """A key service did not unwrap a segment's data key (unreachable, access denied, key disabled or deleted);
    the fetch is retried later. Copies do not need the service: they wrap data keys locally."""


__all__ = [
    "ConfigException",
    "CorruptDataException",
    "KeyRingException",
    "KeyServiceException",
    "RemoteResourceNotFoundException",
    "RemoteStorageException",
    "RetriableRemoteStorageException",
    "storage_failure",
]
