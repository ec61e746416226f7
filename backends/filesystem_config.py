"""The filesystem backend's configuration keys: a table read by ``backends.filesystem``."""

from __future__ import annotations

from backends.configdef import ConfigDef, ConfigKey, in_range

CONFIG_DEF = ConfigDef().extend(
    [
        ConfigKey(
            "root",
            "string",
            None,
            "Directory holding the objects of the filesystem backend. Created if missing.",
            group="filesystem",
        ),
        ConfigKey(
            "fsync.enabled",
            "boolean",
            True,
            "fsync every object before it is renamed into place (turn off only for throwaway test data).",
            group="filesystem",
        ),
        ConfigKey(
            "fsync.interval.bytes",
            "long",
            32 * 1024 * 1024,
            "While uploading, flush written data to disk every this many bytes so the final fsync is short.",
            validator=in_range(1024 * 1024, None),
            group="filesystem",
        ),
        ConfigKey(
            "stale.upload.age.ms",
            "long",
            3_600_000,
            "At configure(), delete the temp files of uploads older than this (a process killed mid-upload left "
            "them). Keep it well above the longest upload of a segment.",
            validator=in_range(60_000, None),
            group="filesystem",
        ),
    ]
)
