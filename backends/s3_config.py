"""The S3 backend's configuration keys and S3's size limits: a table read by ``backends.s3``."""

from __future__ import annotations

from backends.cloud import common_keys, upload_buffer_key
from backends.configdef import ConfigDef, ConfigKey, in_range, one_of

MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PART_SIZE = 2_147_483_639
COPY_SINGLE_LIMIT = 5 * 1024**3
"""The largest object one CopyObject copies (S3's limit); a larger one is copied part by part (UploadPartCopy)."""
COPY_PART_SIZE = 512 * 1024**2
"""The part size of a multipart copy (grown when the object needs more than ``MAX_PARTS`` parts of it)."""
MAX_PARTS = 10_000
MAX_COPY_PART_SIZE = 5 * 1024**3
DELETE_BATCH = 1000  # the DeleteObjects limit
STORAGE_CLASSES = (
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "OUTPOSTS",
    "GLACIER_IR",
    "SNOW",
    "EXPRESS_ONEZONE",
)

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "s3.bucket.name",
            "string",
            None,
            "S3 bucket holding the tiered objects (required). Directory buckets of S3 Express One Zone "
            "(names ending in --x-s3) work as well.",
            group="s3",
        ),
        ConfigKey(
            "s3.region",
            "string",
            None,
            "AWS region of the bucket. null: the SDK's default region chain (AWS_REGION, ~/.aws/config), "
            "falling back to us-east-1.",
            group="s3",
        ),
        ConfigKey(
            "s3.endpoint.url",
            "string",
            None,
            "Custom endpoint for S3-compatible stores, VPC endpoints and emulators, e.g. http://127.0.0.1:9000. "
            "null: the AWS endpoint of the region.",
            group="s3",
        ),
        ConfigKey(
            "s3.path.style.access.enabled",
            "boolean",
            None,
            "Address buckets as endpoint/bucket (true) instead of bucket.endpoint (false). null: SDK choice "
            "(virtual-hosted on AWS). Most S3-compatible stores need true.",
            group="s3",
        ),
        ConfigKey(
            "s3.storage.class",
            "string",
            "STANDARD",
            "Storage class of uploaded objects.",
            validator=one_of(*STORAGE_CLASSES),
            group="s3",
        ),
        ConfigKey(
            "s3.multipart.upload.part.size",
            "int",
            8 * 1024 * 1024,
            "Part size of multipart uploads, in bytes; objects up to this size go up in one PutObject. The "
            "parts of all uploads share s3.upload.buffer.memory.bytes. Smaller parts suit S3 Express One Zone.",
            validator=in_range(MIN_PART_SIZE, MAX_PART_SIZE),
            group="s3",
        ),
        ConfigKey(
            "s3.multipart.upload.concurrency",
            "int",
            4,
            "Parts sent in parallel (size of the upload thread pool, shared by all uploads).",
            validator=in_range(1, 64),
            group="s3",
        ),
        upload_buffer_key("s3", "s3", "s3.multipart.upload.part.size"),
        ConfigKey(
            "s3.legacy.md5.plugin.enabled",
            "boolean",
            False,
            "Send Content-MD5 with every upload request, for S3-compatible stores that still require it.",
            group="s3",
        ),
        *common_keys("s3", "s3"),
        ConfigKey(
            "aws.access.key.id",
            "password",
            None,
            "Static AWS access key id; set together with aws.secret.access.key. null: the default credential "
            "chain (environment, shared config/SSO, web identity, ECS/EC2 instance roles).",
            group="s3",
        ),
        ConfigKey(
            "aws.secret.access.key",
            "password",
            None,
            "Static AWS secret access key, set together with aws.access.key.id.",
            group="s3",
        ),
        ConfigKey(
            "aws.session.token",
            "password",
            None,
            "Session token for temporary static credentials (needs aws.access.key.id).",
            group="s3",
        ),
        ConfigKey(
            "aws.credentials.file",
            "string",
            None,
            "File with credentials, re-read when it changes (for rotated secrets): either AWS's INI format "
            "([default] aws_access_key_id=..., aws_secret_access_key=..., aws_session_token=...) or plain "
            "key=value lines with those names. Cannot be combined with aws.access.key.id.",
            group="s3",
        ),
        ConfigKey(
            "aws.checksum.check.enabled",
            "boolean",
            False,
            "Send CRC32 checksums with uploads and validate the checksums S3 returns on downloads (costs "
            "client CPU; TLS already protects data in transit).",
            group="s3",
        ),
        ConfigKey(
            "aws.certificate.check.enabled",
            "boolean",
            True,
            "Verify the TLS certificate of the endpoint. Only turn off for test setups with self-signed certificates.",
            group="s3",
        ),
    ]
)
