"""One Spark with Iceberg's runtime for a whole test session, run by the Iceberg Spark environment's Python
(.ci/iceberg_spark_env.sh): ``python iceberg_spark_worker.py JARS``.

It starts one ``local[2]`` SparkSession with the jars and Iceberg's SQL extensions, then runs scripts sent one
JSON line at a time on stdin (``{"script": ..., "args": [...]}``) and answers each with one JSON line on its
stdout (``{"ok": true, "stdout": ...}`` or ``{"ok": false, "error": ...}``). Each script runs as it would alone
(``sys.argv`` is ``[-c, JARS, *args]``), in a new session of the same Spark: its catalogs and settings are its
own, and its ``SparkSession.builder...getOrCreate()`` returns that session with the builder's settings applied,
while ``spark.stop()`` leaves the shared Spark running. The worker stops its Spark and exits when stdin closes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from typing import Any

STARTUP = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
}
"""Settings of the shared Spark; a script's builder may repeat them (they are skipped), not change them."""


def main() -> None:
    jars = sys.argv[1]
    # The answers get a descriptor of their own; fd 1 (inherited by the JVM) goes to stderr, so nothing Spark
    # prints can break a line of the protocol.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.__stdout__ = os.fdopen(1, "w", buffering=1)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").config("spark.jars", jars)
    for key, value in STARTUP.items():
        builder = builder.config(key, value)
    shared = builder.getOrCreate()
    shared.sparkContext.setLogLevel("ERROR")
    fixed = {"spark.master", "spark.jars", *STARTUP}
    current: list[Any] = []

    def get_or_create(self: Any) -> Any:
        session = current[0]
        for key, value in self._options.items():
            if key in fixed:
                if key in STARTUP and value != STARTUP[key] or key == "spark.jars" and value != jars:
                    raise ValueError(f"{key}={value}: the shared Iceberg Spark runs with {key} fixed")
                continue
            session.conf.set(key, value)
        return session

    SparkSession.Builder.getOrCreate = get_or_create  # type: ignore[method-assign]
    SparkSession.stop = lambda self: None  # type: ignore[method-assign]

    for line in sys.stdin:
        request = json.loads(line)
        current[:] = [shared.newSession()]
        out = io.StringIO()
        sys.argv = ["-c", jars, *request["args"]]
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(request["script"], "<iceberg-spark-script>", "exec"), {"__name__": "__main__"})
            answer = {"ok": True, "stdout": out.getvalue()}
        except BaseException:  # noqa: BLE001 - every failure is the script's, reported to the test
            answer = {"ok": False, "stdout": out.getvalue(), "error": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
    shared.sparkContext.stop()


if __name__ == "__main__":
    main()
