"""The manifest's dataKey with key services: file-key fields stay Aiven's, service fields are refused by the parser
of older versions (exactly one ':'), and the parser takes any string without failing other than KeyRingError."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import TIP, encryption_configs
from hypothesis import given
from hypothesis import strategies as st

from encryption.errors import KeyRingError
from encryption.keyring import RsaKeyRing
from encryption.keyservice import DataKeyCache, parse_scheme, scheme_of
from rsm.core.config import RsmConfig, config_problems
from rsm.core.object_keys import segment_keys
from rsm.errors import ConfigException

IDS = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
PROVIDER = st.sampled_from(["aws-kms", "vault-transit", "pkcs11"])
VERSION = st.from_regex(r"[0-9]{1,6}", fullmatch=True)


def _old_split(field: str) -> tuple[str, bytes]:
    """The parser of the versions before key services (and Aiven's rule: exactly one ':')."""
    if field.count(":") != 1:
        raise KeyRingError("malformed dataKey")
    key_id, b64 = field.split(":")
    return key_id, base64.b64decode(b64, validate=True)


@given(IDS, PROVIDER, VERSION, st.binary(min_size=1, max_size=512))
def test_service_fields_round_trip_and_old_parsers_refuse_them(
    key_id: str, provider: str, version: str, wrapped: bytes
) -> None:
    field = f"{key_id}:{scheme_of(provider, version)}:{base64.b64encode(wrapped).decode()}"
    assert RsaKeyRing.parse(field) == (key_id, scheme_of(provider, version), wrapped)
    assert parse_scheme(scheme_of(provider, version)) == (provider, version)
    with pytest.raises(KeyRingError):
        _old_split(field)


@given(IDS, st.one_of(st.none(), st.tuples(PROVIDER, VERSION)), st.binary(min_size=1, max_size=512))
def test_the_pair_and_key_version_that_wrapped_a_field(
    key_id: str, service: tuple[str, str] | None, wrapped: bytes
) -> None:
    """Rotation and ``kts keys --usage`` read the version from the field: None for key files."""
    b64 = base64.b64encode(wrapped).decode()
    field = f"{key_id}:{b64}" if service is None else f"{key_id}:{scheme_of(*service)}:{b64}"
    assert RsaKeyRing.wrapped_under(field) == (key_id, None if service is None else service[1])


@given(st.text(max_size=200))
def test_any_field_gives_its_version_or_a_key_ring_error(field: str) -> None:
    try:
        key_id, version = RsaKeyRing.wrapped_under(field)
    except KeyRingError:
        return
    assert field.startswith(key_id + ":") and (version is None or f";{version}:" in field)


@given(IDS, st.binary(min_size=1, max_size=512))
def test_file_fields_parse_as_before(key_id: str, wrapped: bytes) -> None:
    field = f"{key_id}:{base64.b64encode(wrapped).decode()}"
    assert RsaKeyRing.parse(field) == (key_id, None, wrapped)
    assert _old_split(field) == (key_id, wrapped)


# Text near a field's shape, from ':', ';' and base64's characters, so that some examples parse (14 of 300 drawn).
NEAR_FIELDS = st.text(alphabet="aZ09_-:;+/=", max_size=80)


@given(st.one_of(st.text(max_size=200), NEAR_FIELDS))
def test_any_field_parses_or_fails_with_key_ring_error(field: str) -> None:
    try:
        parsed = RsaKeyRing.parse(field)
    except KeyRingError:
        return
    # What parses is the field's own parts: the id before the first ':', the scheme between, the key after.
    key_id, scheme, wrapped = parsed
    assert field.split(":") == [key_id, *([] if scheme is None else [scheme]), field.rsplit(":", 1)[1]]
    assert base64.b64decode(field.rsplit(":", 1)[1]) == wrapped
    written = ":".join([key_id, *([] if scheme is None else [scheme]), base64.b64encode(wrapped).decode()])
    assert RsaKeyRing.parse(written) == parsed


@given(st.text(max_size=80))
def test_any_scheme_parses_or_fails_with_key_ring_error(scheme: str) -> None:
    try:
        provider, version = parse_scheme(scheme)
    except KeyRingError:
        return
    assert scheme == scheme_of(provider, version)


def test_file_key_manifests_are_byte_identical_to_before(
    make_manager: Any, segment_factory: Any, key_pairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """A file pair writes Aiven's ``<id>:<base64>`` and the manifest's JSON holds nothing new: what it held before
    key services (same keys, same order), so Aiven's plugin keeps reading it."""
    seg = segment_factory(target_bytes=20 * 1024, seed=3)
    m = make_manager(extra=encryption_configs(key_pairs))
    meta = seg.to_metadata(TIP)
    m.copy_log_segment_data(meta, seg.to_log_segment_data())
    raw = (tmp_path / "store" / segment_keys("", meta).manifest).read_bytes()
    data_key = re.search(rb'"encryption":\{"dataKey":"([^"]*)","aad":"[A-Za-z0-9+/=]{44}"\}', raw)
    assert data_key is not None, raw[:300]
    assert re.fullmatch(rb"kek1:[A-Za-z0-9+/]+=*", data_key.group(1))
    key_id, wrapped = _old_split(data_key.group(1).decode())
    assert key_id == "kek1" and len(wrapped) == 256
    assert list(__import__("json").loads(raw)) == [
        "version",
        "chunkIndex",
        "segmentIndexes",
        "compression",
        "encryption",
        "remoteLogSegmentMetadata",
    ]


def test_data_key_cache_expires_and_is_bounded() -> None:
    now = [100.0]  # the cache's clock, moved by the test alone: a stalled machine cannot expire a key early
    cache = DataKeyCache(2, 0.05, clock=lambda: now[0])
    cache.put(("a", b"1"), b"k1")
    cache.put(("a", b"2"), b"k2")
    cache.put(("a", b"3"), b"k3")
    assert cache.get(("a", b"1")) is None and cache.get(("a", b"3")) == b"k3" and len(cache) == 2
    now[0] = 100.0 + 0.049
    assert cache.get(("a", b"3")) == b"k3"  # within its 50 ms
    now[0] = 100.0 + 0.05
    assert cache.get(("a", b"3")) is None  # at 50 ms it is gone
    off = DataKeyCache(0, 10)
    off.put(("a", b"1"), b"k1")
    assert off.get(("a", b"1")) is None


def _service_configs(provider: str, **extra: str) -> dict[str, str]:
    return {
        "chunk.size": "1024",
        "encryption.enabled": "true",
        "encryption.key.pair.id": "k",
        "encryption.key.pairs": "k",
        "encryption.key.pairs.k.provider": provider,
        **extra,
    }


def test_config_problems_of_service_pairs() -> None:
    problems = config_problems(_service_configs("aws-kms"))
    assert any("encryption.key.pairs.k.key.id" in p for p in problems), problems
    problems = config_problems(
        _service_configs("pkcs11", **{"encryption.key.pairs.k.key.id": "x", "encryption.key.pairs.k.private.key": "y"})
    )
    assert any("pkcs11.library" in p for p in problems), problems
    assert any("pkcs11.token.label or" in p for p in problems), problems
    assert any("no private key here" in p for p in problems), problems
    problems = config_problems(_service_configs("gcp-kms"))
    assert any("encryption.key.pairs.k.provider" in p and "gcp-kms" in p for p in problems), problems
    assert config_problems(_service_configs("aws-kms", **{"encryption.key.pairs.k.key.id": "alias/x"})) == []
    with pytest.raises(ConfigException, match="pkcs11.slot"):
        RsmConfig.from_map(
            _service_configs(
                "pkcs11",
                **{
                    "encryption.key.pairs.k.key.id": "x",
                    "encryption.key.pairs.k.pkcs11.library": "/l.so",
                    "encryption.key.pairs.k.pkcs11.slot": "-1",
                },
            )
        )
