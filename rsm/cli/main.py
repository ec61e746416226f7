"""``kts``: the operator's command line (demo, key rotation, key generation, config docs, JVM plugin path)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from rsm.cli.properties import read_properties, rsm_configs


def _progress(done: int, total: int, what: str) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what[-60:]:<60}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def cmd_demo(args: argparse.Namespace) -> int:
    from rsm.cli.demo import run_demo

    return run_demo(
        Path(args.dir),
        size_mb=args.size_mb,
        chunk_size=args.chunk_size,
        compression=not args.no_compression,
        encryption=not args.no_encryption,
    )


def cmd_rewrap(args: argparse.Namespace) -> int:
    from rsm.core.manager import RemoteStorageManager
    from rsm.core.rotation import rewrap_all

    configs = rsm_configs(read_properties(args.config))
    manager = RemoteStorageManager()
    manager.configure(configs)
    try:
        started = time.monotonic()
        report = rewrap_all(manager, prefix=args.prefix, dry_run=args.dry_run, progress=_progress)
    finally:
        manager.close()
    verb = "would re-wrap" if args.dry_run else "re-wrapped"
    print(
        f"{report.total} manifests in {time.monotonic() - started:.1f} s: {verb} "
        f"{sum(report.rewrapped.values())} (from key pairs: "
        f"{', '.join(f'{k}={v}' for k, v in report.rewrapped.items()) or 'none'}), "
        f"{report.already_current} already on the active key pair, {report.unencrypted} unencrypted, "
        f"{len(report.failed)} failed"
    )
    for key, error in report.failed.items():
        print(
            f"FAILED {key}: {error}\n  fix the cause (usually a missing private key of an old key pair in "
            f"encryption.key.pairs) and run the command again; finished manifests are skipped.",
            file=sys.stderr,
        )
    return 1 if report.failed else 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from Crypto.PublicKey import RSA

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    key = RSA.generate(args.bits)
    private = out / f"{args.id}-private.pem"
    public = out / f"{args.id}-public.pem"
    private.write_bytes(key.export_key(pkcs=8))
    private.chmod(0o600)
    public.write_bytes(key.public_key().export_key())
    print(f"rsm.config.encryption.key.pairs.{args.id}.public.key.file={public}")
    print(f"rsm.config.encryption.key.pairs.{args.id}.private.key.file={private}")
    return 0


def cmd_config_docs(args: argparse.Namespace) -> int:
    from rsm.cli.config_docs import config_docs_markdown

    table = config_docs_markdown()
    if args.check:
        text = Path(args.check).read_text(encoding="utf-8")
        if table.strip() not in text:
            print(
                f"{args.check} does not contain the current configuration table; regenerate it with "
                f"`kts config-docs --write {args.check}`",
                file=sys.stderr,
            )
            return 1
        return 0
    if args.write:
        path = Path(args.write)
        text = path.read_text(encoding="utf-8")
        begin, end = "<!-- config-table:begin -->", "<!-- config-table:end -->"
        if begin not in text or end not in text:
            print(f"{path} has no {begin} ... {end} markers", file=sys.stderr)
            return 1
        head, rest = text.split(begin, 1)
        _old, tail = rest.split(end, 1)
        path.write_text(f"{head}{begin}\n{table}\n{end}{tail}", encoding="utf-8")
        return 0
    print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kts", description="kafka-tiered-storage operator tool")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="tier a generated real Kafka segment on the local filesystem and read it back")
    demo.add_argument("--dir", default="./kts-demo", help="working directory (segments, keys, object store)")
    demo.add_argument("--size-mb", type=int, default=64, help="segment size in MB")
    demo.add_argument("--chunk-size", type=int, default=4 * 1024 * 1024)
    demo.add_argument("--no-compression", action="store_true")
    demo.add_argument("--no-encryption", action="store_true")
    demo.set_defaults(func=cmd_demo)

    rewrap = sub.add_parser("rewrap", help="re-wrap segment data keys under the active key pair (key rotation)")
    rewrap.add_argument("--config", required=True, help="server.properties (rsm.config.* keys) or a plugin config")
    rewrap.add_argument("--prefix", default=None, help="only manifests under this key prefix (default key.prefix)")
    rewrap.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
    rewrap.set_defaults(func=cmd_rewrap)

    keygen = sub.add_parser("keygen", help="generate an RSA key pair for encryption.key.pairs")
    keygen.add_argument("--id", required=True)
    keygen.add_argument("--out", default=".")
    keygen.add_argument("--bits", type=int, default=3072, choices=[2048, 3072, 4096])
    keygen.set_defaults(func=cmd_keygen)

    docs = sub.add_parser("config-docs", help="print the configuration table (generated from the declarations)")
    docs.add_argument("--check", metavar="FILE", help="fail if FILE does not contain the current table")
    docs.add_argument("--write", metavar="FILE", help="replace the table between the markers in FILE")
    docs.set_defaults(func=cmd_config_docs)

    try:
        from rsm.jvm import shim_cli
    except ImportError:
        shim_cli = None  # type: ignore[assignment]
    if shim_cli is not None:
        shim_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except Exception as e:  # an operator gets one clear line, not a traceback (use -v for details)
        if args.verbose:
            raise
        print(f"kts {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
