"""The GCS backend's configuration keys: a table read by ``backends.gcs``."""

from __future__ import annotations

from typing import Any

from backends.cloud import common_keys, upload_buffer_key
from backends.configdef import ConfigDef, ConfigKey, in_range

GCS_CHUNK_ALIGNMENT = 256 * 1024
DEFAULT_ENDPOINT = "https://storage.googleapis.com"


def _chunk_size_check(_key: str, value: Any) -> str | None:
    if value < GCS_CHUNK_ALIGNMENT or value % GCS_CHUNK_ALIGNMENT:
        return f"must be a positive multiple of {GCS_CHUNK_ALIGNMENT} (256 KiB), as resumable uploads require"
    return None


CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey("gcs.bucket.name", "string", None, "GCS bucket holding the tiered objects (required).", group="gcs"),
        ConfigKey(
            "gcs.endpoint.url",
            "string",
            None,
            f"Custom endpoint (emulators, private service connect). null: {DEFAULT_ENDPOINT}.",
            group="gcs",
        ),
        ConfigKey(
            "gcs.credentials.default",
            "boolean",
            None,
            "true: Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud, metadata server). "
            "false with no JSON/path: anonymous access (emulators, public buckets). null with no JSON/path: "
            "the same as true. Cannot be true together with gcs.credentials.json or gcs.credentials.path.",
            group="gcs",
        ),
        ConfigKey(
            "gcs.credentials.json",
            "password",
            None,
            "Credentials as a JSON string (service account key or authorized user). Mutually exclusive with "
            "gcs.credentials.path and gcs.credentials.default=true.",
            group="gcs",
        ),
        ConfigKey(
            "gcs.credentials.path",
            "string",
            None,
            "Path of a credentials JSON file. Mutually exclusive with gcs.credentials.json and "
            "gcs.credentials.default=true.",
            group="gcs",
        ),
        ConfigKey(
            "gcs.resumable.upload.chunk.size",
            "int",
            8 * 1024 * 1024,
            "Chunk size of resumable uploads, in bytes (a multiple of 256 KiB); objects up to this size go up "
            "in one request. Each upload holds one chunk at a time; all share gcs.upload.buffer.memory.bytes.",
            validator=_chunk_size_check,
            valid_values="[262144,...] multiple of 262144",
            group="gcs",
        ),
        upload_buffer_key("gcs", "gcs", "gcs.resumable.upload.chunk.size"),
        ConfigKey(
            "gcs.delete.concurrency",
            "int",
            8,
            "Parallel DELETE requests issued by delete_many (GCS has no multi-object delete call).",
            validator=in_range(1, None),
            group="gcs",
        ),
        *common_keys("gcs", "gcs"),
    ]
)
