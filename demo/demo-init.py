#!/opt/kts-venv/bin/python
"""The demo stacks' init steps (installed in the broker image as ``kts-demo-init``).

``kts-demo-init render SRC DST``: copy the broker's config, filling each ``${NAME}`` placeholder from the
environment (the AWS stack takes its bucket and region from demo/.env this way). A placeholder whose variable
is unset stops the broker before it starts, naming the variable. Kafka's own ``${provider:key}`` references
have a colon and are left alone.

``kts-demo-init bucket CONFIG [--existing]``: the one-shot service that runs before the broker. It creates the
S3 bucket, GCS bucket or Azure container the config names, waiting up to ``--wait`` seconds for the store to
answer; with ``--existing`` (a real cloud account, and the broker's own entrypoint) it creates nothing and only
checks that the bucket is there. Any failure exits non-zero with the reason, so the broker never starts against
a store it cannot use (the entrypoint's check covers podman-compose, which starts the broker whatever the init
step's exit code).
A filesystem backend has nothing to prepare.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import javaproperties

from backends.registry import resolve_backend_class
from rsm.cli.properties import rsm_configs

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class InitError(Exception):
    """A step failed; the message says what and what to do."""


def render(text: str, env: dict[str, str], source: str) -> str:
    missing = sorted({m.group(1) for m in PLACEHOLDER.finditer(text) if not env.get(m.group(1))})
    if missing:
        raise InitError(f"{source} uses {', '.join('${' + n + '}' for n in missing)}: set them in the environment")
    return PLACEHOLDER.sub(lambda m: env[m.group(1)], text)


def _configured_backend(config: Path) -> tuple[str, Any]:
    """The backend the broker's config names, configured exactly as the plugin would configure it."""
    text = render(config.read_text(encoding="latin-1"), dict(os.environ), str(config))
    configs = rsm_configs(dict(javaproperties.loads(text)))
    name = configs.get("storage.backend.class", "filesystem")
    backend = resolve_backend_class(name)()
    # a backend takes its own keys without the "storage." prefix, as the plugin passes them
    backend.configure({k.removeprefix("storage."): v for k, v in configs.items() if k.startswith("storage.")})
    return name, backend


def _s3(backend: Any, existing: bool) -> str:
    from botocore.exceptions import ClientError

    client, bucket = backend.client, backend.bucket
    if existing:
        client.head_bucket(Bucket=bucket)
        return f"S3 bucket {bucket} exists"
    try:
        region = client.meta.region_name
        kwargs = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        client.create_bucket(Bucket=bucket, **kwargs)
        return f"created S3 bucket {bucket}"
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            return f"S3 bucket {bucket} exists"
        raise


def _gcs(backend: Any, existing: bool) -> str:
    # fake-gcs-server and GCS take the JSON API's bucket insert; the backend's session carries the credentials.
    url = f"{backend.endpoint}/storage/v1/b"
    if existing:
        response = backend.session.get(f"{url}/{backend.bucket}", timeout=10)
        if response.status_code != 200:
            raise InitError(f"GCS bucket {backend.bucket}: HTTP {response.status_code} {response.text[:200]}")
        return f"GCS bucket {backend.bucket} exists"
    response = backend.session.post(url, params={"project": "kts-demo"}, json={"name": backend.bucket}, timeout=10)
    if response.status_code == 409:
        return f"GCS bucket {backend.bucket} exists"
    if response.status_code != 200:
        raise InitError(f"GCS bucket {backend.bucket}: HTTP {response.status_code} {response.text[:200]}")
    return f"created GCS bucket {backend.bucket}"


def _azure(backend: Any, existing: bool) -> str:
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import ContainerClient

    container: ContainerClient = backend.container_client
    if existing:
        container.get_container_properties()
        return f"Azure container {backend.container} exists"
    try:
        container.create_container()
        return f"created Azure container {backend.container}"
    except ResourceExistsError:
        return f"Azure container {backend.container} exists"


STEPS: dict[str, Callable[[Any, bool], str]] = {"s3": _s3, "gcs": _gcs, "azure": _azure}


def _unreachable(e: BaseException) -> bool:
    """The store is not up yet (connection refused, name not resolvable yet): worth another try."""
    text = f"{type(e).__name__}: {e}".lower()
    return any(s in text for s in ("connection refused", "connecterror", "connectionerror", "name or service"))


def bucket(config: Path, existing: bool, wait_s: float) -> str:
    name, backend = _configured_backend(config)
    step = STEPS.get(name)
    if step is None:
        backend.close()
        return f"storage.backend.class={name}: no bucket or container to prepare"
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                return step(backend, existing)
            except Exception as e:
                if not _unreachable(e):
                    raise InitError(f"{name} store of {config}: {type(e).__name__}: {e}") from e
                if time.monotonic() > deadline:
                    raise InitError(f"{name} store of {config} did not answer in {wait_s:.0f} s: {e}") from e
                time.sleep(1)
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kts-demo-init", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_render = sub.add_parser("render", help="fill ${NAME} placeholders of a config from the environment")
    p_render.add_argument("source", type=Path)
    p_render.add_argument("target", type=Path)
    p_bucket = sub.add_parser("bucket", help="create (or with --existing, check) the config's bucket")
    p_bucket.add_argument("config", type=Path)
    p_bucket.add_argument("--existing", action="store_true", help="create nothing; fail unless the bucket exists")
    p_bucket.add_argument("--wait", type=float, default=120, help="seconds to wait for the store to answer")
    args = parser.parse_args(argv)
    try:
        if args.command == "render":
            text = render(args.source.read_text(encoding="latin-1"), dict(os.environ), str(args.source))
            args.target.write_text(text, encoding="latin-1")
        else:
            print(f"kts-demo-init: {bucket(args.config, args.existing, args.wait)}", flush=True)
    except Exception as e:
        print(f"kts-demo-init: FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
