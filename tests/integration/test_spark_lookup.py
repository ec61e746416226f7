"""``spark.read.format("kafka-tiered")`` with no ``register(spark)``: Spark 4 finds the source itself, through the
top-level ``pyspark_kafka_tiered`` package, and the redaction line docs/spark.md tells users to add works.

Each Spark run is a fresh driver in a fresh Python process (the venv's, with the package installed as ``make
setup`` installs it), so no registration left over from another test can make a lookup pass; the control run
hides our ``pyspark_kafka_tiered`` behind an empty one of the same name and must then fail to find the format.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from spark_data import Dataset, build_dataset

from rsm import RemoteStorageManager

pytest.importorskip("pyspark", reason="pyspark comes with the [spark] extra")  # installed by [all]

from rsm.spark.datasource import FORMAT, REDACTION_CONF, REDACTION_REGEX  # noqa: E402

pytestmark = pytest.mark.timeout(300)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
SECRET = "do-not-show-5c1e"

# The driver: a local[2] session built with the documented redaction conf, and nothing of rsm imported before the
# read (so nothing registered the source in this process). Writes what it saw as JSON.
_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession

    args = json.load(open(sys.argv[1]))
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config(args["conf_key"], args["conf_value"]).getOrCreate())
    out = {"rsm_imported_before_read": any(m == "rsm" or m.startswith("rsm.") for m in sys.modules)}
    try:
        df = spark.read.format(args["format"]).options(**args["options"]).load()
        rows = df.selectExpr("key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts",
                             "timestampType", "headers").collect()
        hexed = lambda b: None if b is None else bytes(b).hex()
        out["rows"] = [[hexed(r.key), hexed(r.value), r.topic, r.partition, r.offset, r.ts, r.timestampType,
                        [[h.key, hexed(h.value)] for h in r.headers]] for r in rows]
        out["count"] = df.count()
        # SQL reads the format without register() too; its statements are where Spark prints option values.
        sql_options = lambda opts: ", ".join(f"`{k}` '{v}'" for k, v in opts.items())
        spark.sql(f"CREATE TEMPORARY VIEW tiered USING `{args['format']}` OPTIONS ({sql_options(args['options'])})")
        out["sql_count"] = spark.table("tiered").count()
        # The redaction: a statement with a secret-looking option explained under the conf the session started
        # with, then once the conf is back at Spark's default, to show the check would see the value if shown.
        secretive = sql_options({**args["options"], **args["secret_options"]})
        explain = lambda: "\\n".join(r[0] for r in spark.sql(
            f"EXPLAIN EXTENDED CREATE TEMPORARY VIEW secretive USING `{args['format']}` OPTIONS ({secretive})"
        ).collect())
        out["plan_redacted"] = explain()
        spark.conf.unset(args["conf_key"])
        out["plan_default"] = explain()
    except Exception as e:
        out["error"] = str(e)
    print("RESULT " + json.dumps(out))
    spark.stop()
    """
)


def documented_redaction_line() -> tuple[str, str]:
    """The ``--conf`` line of docs/spark.md's "Secrets", split as a shell would pass it: ``(key, value)``."""
    lines = [ln for ln in DOCS.read_text().splitlines() if ln.startswith("--conf ") and REDACTION_CONF in ln]
    assert len(lines) == 1, lines
    flag, setting = shlex.split(lines[0])
    key, value = setting.split("=", 1)
    return key, value


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Dataset]:
    tmp = tmp_path_factory.mktemp("spark-lookup")
    config = {
        "chunk.size": "4096",
        "storage.backend.class": "filesystem",
        "storage.root": str(tmp / "store"),
        "storage.fsync.enabled": "false",
    }
    with RemoteStorageManager() as m:
        m.configure(config)
        ds = build_dataset(m, tmp / "src")
    return config, ds


def _run_driver(tmp_path: Path, options: dict[str, str], *, pythonpath: Path | None = None) -> dict[str, Any]:
    key, value = documented_redaction_line()
    args = {
        "format": FORMAT,
        "options": options,
        "secret_options": {"encryption.key.pairs.k.private.key": SECRET},
        "conf_key": key,
        "conf_value": value,
    }
    (tmp_path / "args.json").write_text(json.dumps(args))
    (tmp_path / "driver.py").write_text(_DRIVER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = sys.executable  # the lookup worker and the executors run the venv's Python
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)  # Spark hands it on to its Python workers, the lookup's included
    run = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "args.json")],
        env=env,
        cwd=tmp_path,  # not the repository: the package is found as installed, not from the working directory
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stderr[-4000:]
    return json.loads(lines[0][len("RESULT ") :])  # type: ignore[no-any-return]


def _expected(ds: Dataset) -> list[list[Any]]:
    return [
        [
            None if key is None else key.hex(),
            None if value is None else value.hex(),
            topic,
            partition,
            offset,
            ts,
            ts_type,
            [[k, None if v is None else v.hex()] for k, v in headers],
        ]
        for key, value, topic, partition, offset, ts, ts_type, headers in ds.rows
    ]


def test_a_fresh_session_finds_the_format_without_register(
    store: tuple[dict[str, str], Dataset], tmp_path: Path
) -> None:
    config, ds = store
    out = _run_driver(tmp_path, {**config, "topic": "orders,payments", "includeHeaders": "true"})
    assert "error" not in out, out.get("error")
    assert out["rsm_imported_before_read"] is False  # nothing in the driver called register()
    got = sorted(out["rows"], key=lambda r: (r[2], r[3], r[4]))
    assert out["count"] == len(ds.rows) and got == _expected(ds)
    assert out["sql_count"] == len(ds.rows)

    # The documented line masks the private key's value; at Spark's default it is shown (the check can fail).
    assert "provider:kafka-tiered" in out["plan_redacted"]
    assert "encryption.key.pairs.k.private.key -> *********(redacted)" in out["plan_redacted"]
    assert SECRET not in out["plan_redacted"]
    assert SECRET in out["plan_default"]


def test_the_format_comes_from_pyspark_kafka_tiered(store: tuple[dict[str, str], Dataset], tmp_path: Path) -> None:
    """Control: the same driver, with an empty ``pyspark_kafka_tiered`` ahead of ours on the path. Spark imports
    the first module of that name, finds no ``DefaultSource``, and the format is not found: what made the first
    test pass is our package's ``DefaultSource``, not a registration from somewhere else."""
    config, _ = store
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pyspark_kafka_tiered.py").write_text('"""Hides the installed package from Spark\'s lookup."""\n')
    out = _run_driver(tmp_path, {**config, "topic": "orders"}, pythonpath=shadow)
    assert "DATA_SOURCE_NOT_FOUND" in out.get("error", ""), out
    assert FORMAT in out["error"]


def test_the_module_follows_sparks_lookup_rule() -> None:
    """What ``pyspark.sql.worker.lookup_data_sources`` does, in a fresh Python: list top-level modules, import
    those named ``pyspark_*``, keep a ``DataSource`` subclass named ``DefaultSource`` under its ``name()``."""
    probe = textwrap.dedent(
        """
        import importlib, json, pkgutil
        from pyspark.sql.datasource import DataSource
        found = {}
        for info in pkgutil.iter_modules():
            if info.name == "pyspark_kafka_tiered":
                source = importlib.import_module(info.name).DefaultSource
                found[source.name()] = [issubclass(source, DataSource), source.__module__, source.__qualname__]
        print(json.dumps(found))
        """
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert found, (
        "pkgutil.iter_modules() does not list pyspark_kafka_tiered in this venv: an editable install through "
        "setuptools' import hook hides it from Spark's lookup; `make setup` installs with editable_mode=compat"
    )
    assert found == {FORMAT: [True, "rsm.spark.datasource", "KafkaTieredDataSource"]}  # the pushdown-free one


def test_a_broken_install_still_names_the_format_and_says_why() -> None:
    """Spark skips every Python data source when one ``pyspark_*`` import raises; ours must not. With
    ``rsm.spark.datasource`` unimportable (``None`` in ``sys.modules`` makes Python's import raise ImportError),
    the package still imports, and the stand-in it registers fails on use with the cause and what to install."""
    probe = textwrap.dedent(
        """
        import json, sys
        sys.modules["rsm.spark.datasource"] = None
        import pyspark_kafka_tiered as door
        source = door.DefaultSource
        try:
            source({}).schema()
            error = None
        except ImportError as e:
            error = str(e)
        print(json.dumps([source.__name__, source.name(), error]))
        """
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0, r.stderr
    name, short, error = json.loads(r.stdout)
    assert (name, short) == ("KafkaTieredUnavailable", FORMAT)
    assert "rsm.spark.datasource" in error and "kafka-tiered-storage[spark]" in error, error


def test_the_docs_redaction_line_is_registers_regex() -> None:
    """The line users add and the regex ``register()`` sets are one regex, so either way the same keys are masked;
    the quick start's builder sets it too."""
    assert documented_redaction_line() == (REDACTION_CONF, REDACTION_REGEX)
    assert f'REDACT = "{REDACTION_REGEX}"' in DOCS.read_text()
