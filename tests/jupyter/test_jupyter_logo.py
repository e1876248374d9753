"""The devbox kernels' logo, drawn as PNG by the project itself."""

from __future__ import annotations

import struct
import zlib

import pytest
from devboxes_jupyter.logo import chip_png

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header chunk."""
    assert data.startswith(SIGNATURE)
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR"
    assert length == 13
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _chunks(data: bytes) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = {}
    offset = len(SIGNATURE)
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        found[kind] = found.get(kind, b"") + body
        offset += 12 + length
    return found


def _alpha(data: bytes, size: int, x: int, y: int) -> int:
    pixels = zlib.decompress(_chunks(data)[b"IDAT"])
    stride = 1 + 4 * size
    assert len(pixels) == stride * size
    return pixels[y * stride + 1 + 4 * x + 3]


@pytest.mark.parametrize("size", [32, 64])
def test_the_logo_is_an_rgba_png_of_its_size(size: int) -> None:
    data = chip_png(size)
    assert png_size(data) == (size, size)
    header = _chunks(data)[b"IHDR"]
    assert header[8:10] == bytes([8, 6])  # 8 bits per channel, RGBA
    assert set(_chunks(data)) == {b"IHDR", b"IDAT", b"IEND"}


@pytest.mark.parametrize("size", [32, 64])
def test_the_chip_is_drawn_on_a_transparent_ground(size: int) -> None:
    data = chip_png(size)
    unit = size / 24
    # A corner and the die in the middle are empty; the body's ring and a pin are solid.
    assert _alpha(data, size, 0, 0) == 0
    assert _alpha(data, size, size // 2, size // 2) == 0
    assert _alpha(data, size, int(8 * unit), size // 2) == 255
    assert _alpha(data, size, int(10 * unit), int(3 * unit)) == 255


def test_a_logo_needs_a_pixel() -> None:
    with pytest.raises(ValueError, match="at least one pixel"):
        chip_png(0)
