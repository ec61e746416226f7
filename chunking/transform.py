"""Turning one original chunk into its stored form and back: zstd (optional), then AES-GCM (optional).

Each chunk is independent (its own zstd frame with the content size in the header, its own IV), which is
what lets a reader decode any chunk without the ones before it. zstd and AES-GCM release the GIL, so a
thread pool over chunks uses every core; zstd contexts are not thread-safe, hence one per thread.
"""

from __future__ import annotations

import threading

import crc32c as _crc32c
import zstandard

from chunking.errors import CorruptChunkError
from encryption.aes import ChunkCipher, plaintext_size


def crc32c(data: bytes | memoryview) -> int:
    return _crc32c.crc32c(data)


class ChunkTransformer:
    """Transforms and detransforms the chunks of one segment with its compression flag and data key."""

    def __init__(self, compression: bool, level: int = 3, cipher: ChunkCipher | None = None) -> None:
        self.compression = compression
        self.level = level
        self.cipher = cipher
        self._local = threading.local()

    def _compressor(self) -> zstandard.ZstdCompressor:
        c = getattr(self._local, "compressor", None)
        if c is None:
            c = zstandard.ZstdCompressor(level=self.level, write_content_size=True)
            self._local.compressor = c
        return c

    def _decompressor(self) -> zstandard.ZstdDecompressor:
        d = getattr(self._local, "decompressor", None)
        if d is None:
            d = zstandard.ZstdDecompressor()
            self._local.decompressor = d
        return d

    @property
    def is_identity(self) -> bool:
        return not self.compression and self.cipher is None

    def transform(self, original: bytes | memoryview) -> bytes | memoryview:
        data: bytes | memoryview = original
        if self.compression:
            data = self._compressor().compress(data)
        if self.cipher is not None:
            data = self.cipher.encrypt(data)
        return data

    def detransform_into(self, stored: bytes | memoryview, out: memoryview, what: str) -> None:
        """Decode one stored chunk into ``out``, which must be exactly the size the chunk index gives.

        Nothing is allocated per chunk: an encrypted chunk is decrypted into this thread's scratch buffer (or
        straight into ``out`` when it is not compressed), and zstd decompresses straight into ``out``.
        """
        expected_size = len(out)
        data: bytes | memoryview = stored
        if self.cipher is not None:
            plain = plaintext_size(len(stored))
            if not self.compression:
                if plain != expected_size:
                    raise CorruptChunkError(f"{what} decodes to {plain} bytes, the chunk index says {expected_size}")
                self.cipher.decrypt_into(stored, out, what)
                return
            data = _scratch(plain)
            self.cipher.decrypt_into(stored, data, what)
        elif not self.compression:
            if len(data) != expected_size:
                raise CorruptChunkError(f"{what} decodes to {len(data)} bytes, the chunk index says {expected_size}")
            out[:] = data
            return
        self._decompress_into(data, out, what)

    def _decompress_into(self, data: bytes | memoryview, out: memoryview, what: str) -> None:
        expected_size = len(out)
        try:
            params = zstandard.get_frame_parameters(data)
        except zstandard.ZstdError as e:
            raise CorruptChunkError(f"{what} is not a zstd frame: {e}") from None
        if params.content_size != expected_size:
            raise CorruptChunkError(
                f"{what} zstd frame declares {params.content_size} bytes, the chunk index says {expected_size}"
            )
        try:
            reader = self._decompressor().stream_reader(data, read_size=max(len(data), 1), read_across_frames=False)
            got = 0
            while got < expected_size:
                n = reader.readinto(out[got:])
                if not n:
                    break
                got += n
            trailing = reader.read(1)
        except zstandard.ZstdError as e:
            raise CorruptChunkError(f"{what} failed to decompress: {e}") from None
        if got != expected_size or trailing:
            raise CorruptChunkError(
                f"{what} decodes to {'more than ' if trailing else ''}{got} bytes, the chunk index says "
                f"{expected_size}: the zstd frame is truncated or corrupt"
            )


SCRATCH_KEEP_BYTES = 8 * 1024 * 1024
"""A thread keeps its scratch buffer up to this size (two default chunks, stored): larger chunks, from a foreign
or hostile manifest, get a buffer of their own that goes away with them."""

_thread_scratch = threading.local()


def _scratch(size: int) -> memoryview:
    """``size`` writable bytes that live as long as this thread, shared by every segment it decodes: decrypted
    but still compressed chunks pass through here on their way to zstd. One per thread, not per segment, so
    the memory follows the number of decoding threads, not the number of cached manifests."""
    if size > SCRATCH_KEEP_BYTES:
        return memoryview(bytearray(size))
    buf: bytearray | None = getattr(_thread_scratch, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(max(size, len(buf) if buf is not None else 0))
        _thread_scratch.buf = buf
    return memoryview(buf)[:size]
