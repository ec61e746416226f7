"""The Azure backend's configuration keys and Azure's block size limits: a table read by ``backends.azure``."""

from __future__ import annotations

from backends.cloud import common_keys, upload_buffer_key
from backends.configdef import ConfigDef, ConfigKey, in_range

MIN_BLOCK_SIZE = 100 * 1024
MAX_BLOCK_SIZE = 4000 * 1024 * 1024

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "azure.container.name",
            "string",
            None,
            "Blob container holding the tiered objects (required).",
            group="azure",
        ),
        ConfigKey(
            "azure.account.name",
            "string",
            None,
            "Storage account name. Required unless azure.connection.string is set or azure.endpoint.url "
            "already names the account.",
            group="azure",
        ),
        ConfigKey(
            "azure.account.key",
            "password",
            None,
            "Shared key of the storage account. Without a key or SAS token, DefaultAzureCredential "
            "(managed identity, workload identity, environment) is used, which needs the azure-identity "
            "package.",
            group="azure",
        ),
        ConfigKey(
            "azure.sas.token",
            "password",
            None,
            "Shared access signature granting read, write, delete and list on the container. Mutually "
            "exclusive with azure.account.key.",
            group="azure",
        ),
        ConfigKey(
            "azure.connection.string",
            "password",
            None,
            "Full connection string (AccountName/AccountKey or SharedAccessSignature plus endpoints). "
            "Cannot be combined with azure.account.name, azure.account.key, azure.sas.token or "
            "azure.endpoint.url.",
            group="azure",
        ),
        ConfigKey(
            "azure.endpoint.url",
            "string",
            None,
            "Blob service URL, e.g. http://127.0.0.1:10000/devstoreaccount1 for Azurite. null: "
            "https://<account>.blob.core.windows.net.",
            group="azure",
        ),
        ConfigKey(
            "azure.upload.block.size",
            "int",
            8 * 1024 * 1024,
            "Block size of staged uploads, in bytes; blobs up to this size go up in one Put Blob. The blocks of "
            "all uploads share azure.upload.buffer.memory.bytes.",
            validator=in_range(MIN_BLOCK_SIZE, MAX_BLOCK_SIZE),
            group="azure",
        ),
        ConfigKey(
            "azure.upload.concurrency",
            "int",
            4,
            "Blocks staged in parallel (size of the upload thread pool, shared by all uploads).",
            validator=in_range(1, 64),
            group="azure",
        ),
        upload_buffer_key("azure", "azure", "azure.upload.block.size"),
        ConfigKey(
            "azure.download.chunk.size",
            "int",
            4 * 1024 * 1024,
            "No longer used: a download is one ranged GET read off the connection as the caller reads, so memory "
            "follows the caller's reads, and a broken body resumes under azure.retry.*. Still accepted so "
            "existing configurations parse.",
            validator=in_range(64 * 1024, None),
            group="azure",
        ),
        ConfigKey(
            "azure.api.version",
            "string",
            None,
            "Pin the storage REST API version the SDK sends (for emulators or stacks that lag behind the "
            "SDK, e.g. 2025-11-05 for Azurite 3.35 without --skipApiVersionCheck). null: SDK default.",
            group="azure",
        ),
        *common_keys("azure", "azure"),
    ]
)
