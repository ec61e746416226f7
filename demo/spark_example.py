"""Run the demo's Spark questions over a tiered topic: ``python demo/spark_example.py <plugin.properties> [topic]``.

The properties file is the plugin's configuration (or a broker's server.properties with ``rsm.config.*`` keys).
"""

from __future__ import annotations

import json
import sys

from rsm.spark.example import example_query, local_session


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    spark = local_session("kafka-tiered demo")
    try:
        summary = example_query(
            spark, {"config.file": sys.argv[1]}, topic=sys.argv[2] if len(sys.argv) > 2 else "orders"
        )
        print(json.dumps(summary, indent=2, default=str))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
