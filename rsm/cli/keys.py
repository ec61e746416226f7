"""``kts keys generate`` and ``kts keys rotate``: the key pairs the plugin reads, and moving data keys to a new one."""

from __future__ import annotations

import time
from pathlib import Path

import click

from encryption.keyring import MIN_MODULUS_BITS
from rsm.cli.progress import progress_bar, stdout
from rsm.cli.settings import config_options, open_manager


def generate_key_pair(key_id: str, out: Path, bits: int) -> tuple[Path, Path]:
    """Write ``<id>-public.pem`` (SubjectPublicKeyInfo) and ``<id>-private.pem`` (PKCS#8, mode 0600)."""
    from Crypto.PublicKey import RSA

    if bits < MIN_MODULUS_BITS:
        raise click.BadParameter(
            f"{bits}-bit RSA cannot wrap a 32-byte data key with OAEP-SHA3-512 (it needs at least "
            f"{MIN_MODULUS_BITS} bits: 2x64 bytes of hash, 2 bytes and the key); use 2048 or more",
            param_hint="--bits",
        )
    out.mkdir(parents=True, exist_ok=True)
    key = RSA.generate(bits)
    private, public = out / f"{key_id}-private.pem", out / f"{key_id}-public.pem"
    private.touch(mode=0o600)
    private.chmod(0o600)
    private.write_bytes(key.export_key(pkcs=8))
    public.write_bytes(key.public_key().export_key())
    return public, private


def config_lines(key_id: str, public: Path, private: Path) -> list[str]:
    return [
        f"rsm.config.encryption.key.pairs.{key_id}.public.key.file={public}",
        f"rsm.config.encryption.key.pairs.{key_id}.private.key.file={private}",
    ]


@click.group("keys")
def keys_group() -> None:
    """RSA key pairs: generate one, rotate data keys onto one."""


@keys_group.command("generate")
@click.option("--id", "key_id", required=True, help="the key pair id (used in encryption.key.pairs)")
@click.option("--bits", type=int, default=4096, show_default=True, help="RSA modulus size (2048 or more)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True)
def keys_generate(key_id: str, bits: int, out: Path) -> int:
    """Write the PEM pair the plugin reads and print the config lines to paste into server.properties."""
    if bits % 256:
        raise click.BadParameter(f"{bits} is not a multiple of 256", param_hint="--bits")
    public, private = generate_key_pair(key_id, out.resolve(), bits)
    for line in config_lines(key_id, public, private):
        click.echo(line)
    click.echo(
        f"# add {key_id} to rsm.config.encryption.key.pairs (keep the old ids), set "
        f"rsm.config.encryption.key.pair.id={key_id}, restart, then run: kts keys rotate --to {key_id}",
        err=True,
    )
    return 0


@keys_group.command("rotate")
@config_options
@click.option("--to", "to", default=None, help="the key pair to re-wrap under (default: encryption.key.pair.id)")
@click.option("--prefix", default=None, help="only manifests under this key prefix (default: key.prefix)")
@click.option("--dry-run", is_flag=True, help="report what would change, change nothing")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True, help="manifests in parallel")
def keys_rotate(
    config: str | None, sets: tuple[str, ...], to: str | None, prefix: str | None, dry_run: bool, workers: int
) -> int:
    """Re-wrap every segment's data key under one key pair, rewriting manifests only.

    Resumable: a manifest already wrapped by the target pair is skipped, so an interrupted run is run again.
    """
    from rsm.core.rotation import rewrap_all

    if to is not None:
        sets = (*sets, f"encryption.key.pair.id={to}")
    manager = open_manager(config, sets)
    try:
        started = time.monotonic()
        with progress_bar("re-wrapping") as advance:
            report = rewrap_all(
                manager, prefix=prefix, dry_run=dry_run, workers=workers, progress=lambda _i, n, key: advance(key, n)
            )
        active = manager.config["encryption.key.pair.id"]
    finally:
        manager.close()
    verb = "would re-wrap" if dry_run else "re-wrapped"
    stdout.print(
        f"segments seen {report.total}, {verb} {sum(report.rewrapped.values())} onto {active} "
        f"(from: {', '.join(f'{k}={v}' for k, v in sorted(report.rewrapped.items())) or 'none'}), "
        f"already current {report.already_current}, unencrypted {report.unencrypted}, failed {len(report.failed)} "
        f"in {time.monotonic() - started:.1f} s"
    )
    for key, error in sorted(report.failed.items()):
        click.echo(
            f"FAILED {key}: {error}\n  fix the cause (usually a missing private key of an old key pair in "
            f"encryption.key.pairs) and run the command again; finished manifests are skipped.",
            err=True,
        )
    return 1 if report.failed else 0
