"""demo/demo-init.py, the demo stacks' init steps, against a real SeaweedFS: the bucket created once, found on a
second run, a missing one and an unreachable store failing with the reason; config placeholders filled from the
environment."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from emulators import StoreServer, free_port

from backends.s3 import S3Backend

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_init", ROOT / "demo" / "demo-init.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo_init = _load()


def _config(tmp_path: Path, server: StoreServer, **overrides: str) -> Path:
    configs = server.config(**overrides)
    lines = ["rsm.config.storage.backend.class=s3"] + [f"rsm.config.storage.{k}={v}" for k, v in configs.items()]
    path = tmp_path / "server.properties"
    path.write_text("\n".join(["process.roles=broker,controller", *lines]) + "\n")
    return path


def _seaweedfs(request: pytest.FixtureRequest) -> StoreServer:
    server: StoreServer = request.getfixturevalue("s3_seaweedfs_server")
    return server


def test_bucket_is_created_once_and_then_found(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = _seaweedfs(request)
    bucket = f"kts-init-{uuid.uuid4().hex[:8]}"
    config = _config(tmp_path, server, **{"s3.bucket.name": bucket})
    with pytest.raises(demo_init.InitError, match=r"s3 store of .*: ClientError: .*\(404\)"):
        demo_init.bucket(config, existing=True, wait_s=0)  # not there yet, and --existing creates nothing
    assert demo_init.bucket(config, existing=False, wait_s=5) == f"created S3 bucket {bucket}"
    assert demo_init.bucket(config, existing=False, wait_s=5) == f"S3 bucket {bucket} exists"
    assert demo_init.bucket(config, existing=True, wait_s=5) == f"S3 bucket {bucket} exists"
    backend = S3Backend()
    backend.configure(server.config())
    try:
        backend.client.head_bucket(Bucket=bucket)  # really there, seen by a client of its own
    finally:
        backend.close()


def test_an_unreachable_store_fails_with_the_reason(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    server = _seaweedfs(request)
    config = _config(tmp_path, server, **{"s3.endpoint.url": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(demo_init.InitError, match=r"s3 store of .* did not answer in 2 s: Could not connect"):
        demo_init.bucket(config, existing=False, wait_s=2)
    assert demo_init.main(["bucket", str(config), "--wait", "0"]) == 1


def test_a_filesystem_backend_has_nothing_to_prepare(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"rsm.config.storage.backend.class=filesystem\nrsm.config.storage.root={tmp_path}\n")
    assert "no bucket or container to prepare" in demo_init.bucket(config, existing=True, wait_s=0)


def test_render_fills_placeholders_from_the_environment(tmp_path: Path) -> None:
    text = "a=${KTS_S3_BUCKET}\nb=${env:AWS_REGION}\nc=x${KTS_S3_REGION}y\n"
    env = {"KTS_S3_BUCKET": "bkt", "KTS_S3_REGION": "eu-west-1"}
    assert demo_init.render(text, env, "f") == "a=bkt\nb=${env:AWS_REGION}\nc=xeu-west-1y\n"
    with pytest.raises(demo_init.InitError, match=r"f uses \$\{KTS_S3_BUCKET\}, \$\{KTS_S3_REGION\}: set them"):
        demo_init.render(text, {"KTS_S3_BUCKET": ""}, "f")
    source, target = tmp_path / "in.properties", tmp_path / "out.properties"
    source.write_text("rsm.config.storage.s3.bucket.name=${NO_SUCH_VARIABLE_HERE}\n")
    assert demo_init.main(["render", str(source), str(target)]) == 1 and not target.exists()
