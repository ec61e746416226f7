"""pyiceberg's log, made quiet where a warning is no news (imports nothing heavy).

After each commit pyiceberg deletes the metadata files that left the metadata log
(``write.metadata.delete-after-commit.enabled``), from the log of the table object that committed. A writer whose
table object is older than the table (another broker's copy or a maintenance commit came in between) thus
deletes files that the newer commits already deleted, and pyiceberg logs "Failed to delete metadata file ..."
for each. Such a file is gone, as wanted: that warning is dropped. Any other failure (a permission error, a
store that does not answer) is still logged.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["AlreadyDeletedFilter", "install"]

log = logging.getLogger(__name__)

PYICEBERG_CATALOG_LOGGER = "pyiceberg.catalog"


class AlreadyDeletedFilter(logging.Filter):
    """Drops pyiceberg's "Failed to delete ..." records whose error is that the file does not exist.

    pyiceberg logs them inside the ``except OSError`` block that caught the FileIO's error, without the error
    (unless at DEBUG); a logger's filters run in the thread that logs, within that block, so the error is
    ``sys.exc_info()`` here.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Failed to delete "):
            return True
        error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        if isinstance(error, FileNotFoundError):
            log.debug("%s: already deleted", record.getMessage())
            return False
        return True


_FILTER = AlreadyDeletedFilter()


def install() -> None:
    """Add the filter to pyiceberg's catalog logger (once)."""
    logger = logging.getLogger(PYICEBERG_CATALOG_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
