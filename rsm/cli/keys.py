"""``kts keys generate`` and ``kts keys rotate``: the key pairs the plugin reads, and moving data keys to a new one.

A key file is never replaced: if a pair's private key wraps data keys, overwriting it loses that data. So
``generate`` creates both files exclusively (O_EXCL; the private key 0600 from its first byte) and refuses an id
whose files exist. ``rotate`` of nothing is an error: reporting "0 failed" for a wrong key.prefix would tell an
operator that the old key pair can go.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import click

from encryption.keyring import MIN_MODULUS_BITS
from rsm.cli.progress import progress_bar, stdout
from rsm.cli.segments import NothingMatched
from rsm.cli.settings import config_options, open_manager, store_label

# A key pair id becomes part of two file names, of config keys (encryption.key.pairs.<id>.public.key.file, where
# a dot would split the name), of a comma-separated list and of the manifest's "<id>:<wrapped key>".
KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_key_id(key_id: str) -> str:
    if not KEY_ID.match(key_id):
        raise click.BadParameter(
            f"{key_id!r} cannot be a key pair id: use 1 to 64 letters, digits, '_' or '-' (it names files and the "
            f"keys encryption.key.pairs.<id>.*, and the manifest stores '<id>:<wrapped key>')",
            param_hint="--id",
        )
    return key_id


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` and write ``data``; fails if anything exists there (even a dangling link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits away; never added any
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def generate_key_pair(key_id: str, out: Path, bits: int) -> tuple[Path, Path]:
    """Write ``<id>-public.pem`` (SubjectPublicKeyInfo) and ``<id>-private.pem`` (PKCS#8, mode 0600), both new.
    OpenSSL (through ``cryptography``) finds the primes about nine times faster than pycryptodome."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    check_key_id(key_id)
    if bits < MIN_MODULUS_BITS:
        raise click.BadParameter(
            f"{bits}-bit RSA cannot wrap a 32-byte data key with OAEP-SHA3-512 (it needs at least "
            f"{MIN_MODULUS_BITS} bits: 2x64 bytes of hash, 2 bytes and the key); use 2048 or more",
            param_hint="--bits",
        )
    private, public = out / f"{key_id}-private.pem", out / f"{key_id}-public.pem"
    existing = [str(p) for p in (private, public) if os.path.lexists(p)]
    if existing:
        raise click.ClickException(
            f"refusing to replace {' and '.join(existing)}: a key file is never overwritten (if that pair wraps data "
            f"keys, replacing it loses the data). Pick another --id or --out, or move the old files away yourself"
        )
    out.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        _write_new(private, private_pem, 0o600)
    except FileExistsError:
        raise click.ClickException(f"refusing to replace {private}: it appeared while the key was generated") from None
    try:
        _write_new(public, public_pem, 0o644)
    except BaseException:
        private.unlink()  # ours, created above: a half pair must not stay behind
        raise
    return public, private


def config_lines(key_id: str, public: Path, private: Path) -> list[str]:
    return [
        f"rsm.config.encryption.key.pairs.{key_id}.public.key.file={public}",
        f"rsm.config.encryption.key.pairs.{key_id}.private.key.file={private}",
    ]


@click.group("keys", invoke_without_command=True)
@config_options
@click.option("--no-connect", is_flag=True, help="list the pairs without asking their key services")
@click.option(
    "--usage",
    is_flag=True,
    help="also count the segments each key pair and key version wraps (reads every manifest under key.prefix)",
)
@click.pass_context
def keys_group(
    ctx: click.Context, config: str | None, sets: tuple[str, ...], no_connect: bool, usage: bool
) -> int | None:
    """RSA key pairs: list them with their provider and whether it answers; generate one; rotate data keys onto one.

    Without a subcommand: one line per key pair of encryption.key.pairs (its provider, its key, the key version
    its service serves now, whether the service answers and unwraps a probe with it). With --usage, then one line
    per key pair and key version that wraps stored segments, with their count. Exit 1 when a service does not
    answer. Changes nothing."""
    if ctx.invoked_subcommand is not None:
        return None
    from rsm.cli.settings import load_configs
    from rsm.core.key_services import key_pair_status

    statuses = key_pair_status(load_configs(config, sets), connect=not no_connect)
    if not statuses:
        click.echo("encryption is not enabled: no key pairs")
        return 0
    for s in statuses:
        answer = {True: "answers", False: "DOES NOT ANSWER", None: "-"}[s.answers]
        version = f"v{s.version}" if s.version is not None else "-"
        click.echo(f"{'*' if s.active else ' '} {s.key_id}\t{s.provider}\t{s.key}\t{version}\t{answer}")
        if s.answers is False:
            click.echo(f"    {s.detail}", err=True)
    if usage:
        _print_usage(config, sets)
    return 1 if any(s.answers is False for s in statuses) else 0


def _print_usage(config: str | None, sets: tuple[str, ...]) -> None:
    """``segments <pair> [v<version>] <count>`` per key pair and version wrapping stored segments."""
    from rsm.operator_tools.rotation import key_usage

    manager = open_manager(config, sets)
    try:
        counts = key_usage(manager)
        where = f"under {manager.config['key.prefix']!r} in {store_label(manager.config)}"
    finally:
        manager.close()
    if not counts:
        raise NothingMatched(f"no segment manifests {where}: check key.prefix and storage.*")
    for label, count in sorted(counts.items()):
        click.echo(f"segments {label}\t{count}")


@keys_group.command("generate")
@click.option(
    "--id", "key_id", required=True, metavar="ID", help="the key pair id: letters, digits, '_', '-' (up to 64)"
)
@click.option("--bits", type=int, default=4096, show_default=True, help="RSA modulus size (2048 or more)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True)
def keys_generate(key_id: str, bits: int, out: Path) -> int:
    """Write a new PEM pair the plugin reads and print the config lines to paste into server.properties.

    Never replaces a key file: an id whose files exist in --out is refused (exit 1)."""
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
    """Re-wrap every segment's data key under one key pair and its latest key version, rewriting manifests only.

    A data key of the target pair wrapped under an older version of its key service's key (a rotated Transit key)
    is re-wrapped too. Resumable: a manifest already wrapped by the target pair under its latest version is skipped,
    so an interrupted run is run again.
    No manifest found (a wrong key.prefix or --prefix) is an error (exit 1), never a finished rotation.
    """
    from rsm.operator_tools.rotation import rewrap_all

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
        where = (
            f"under {prefix if prefix is not None else manager.config['key.prefix']!r} in {store_label(manager.config)}"
        )
    finally:
        manager.close()
    if report.total == 0:
        raise NothingMatched(
            f"no segment manifests {where}: nothing was re-wrapped. Check key.prefix, --prefix and storage.* before "
            f"retiring any key pair"
        )
    verb = "would re-wrap" if dry_run else "re-wrapped"
    stdout.print(
        f"segments seen {report.total}, {verb} {sum(report.rewrapped.values())} onto {active} "
        f"(from: {', '.join(f'{k}={v}' for k, v in sorted(report.rewrapped.items())) or 'none'}), "
        f"already current {report.already_current}, unencrypted {report.unencrypted}, "
        f"gone {len(report.gone)} (deleted meanwhile; left deleted), failed {len(report.failed)} "
        f"in {time.monotonic() - started:.1f} s"
    )
    for key, error in sorted(report.failed.items()):
        click.echo(
            f"FAILED {key}: {error}\n  fix the cause (usually a missing private key of an old key pair in "
            f"encryption.key.pairs) and run the command again; finished manifests are skipped.",
            err=True,
        )
    return 1 if report.failed else 0
