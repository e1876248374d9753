"""The devbox kernels' logo: the sidebar's chip icon, drawn as a PNG at any size.

The Launcher shows ``logo-32x32.png`` / ``logo-64x64.png`` from a kernelspec's directory;
they are drawn here rather than shipped, from the same 24-unit shapes as the SVG icon of
the labextension, with the standard library's zlib.
"""

from __future__ import annotations

import struct
import zlib

# Rectangles (left, top, right, bottom) on the icon's 24 x 24 grid: the chip's body with
# its die cut out, and two pins on each side.
_BODY = (7.0, 7.0, 17.0, 17.0)
_DIE = (9.0, 9.0, 15.0, 15.0)
_PINS = (
    (9.0, 2.0, 11.0, 5.0),
    (13.0, 2.0, 15.0, 5.0),
    (9.0, 19.0, 11.0, 22.0),
    (13.0, 19.0, 15.0, 22.0),
    (2.0, 9.0, 5.0, 11.0),
    (2.0, 13.0, 5.0, 15.0),
    (19.0, 9.0, 22.0, 11.0),
    (19.0, 13.0, 22.0, 15.0),
)
_GRID = 24.0
# Readable on the light and the dark theme alike.
_COLOR = (0x4C, 0x8B, 0x2B)
# Samples per pixel along each axis, for smooth edges at 32 px.
_SAMPLES = 4


def _inside(box: tuple[float, float, float, float], x: float, y: float) -> bool:
    left, top, right, bottom = box
    return left <= x < right and top <= y < bottom


def _covered(x: float, y: float) -> bool:
    if _inside(_BODY, x, y):
        return not _inside(_DIE, x, y)
    return any(_inside(pin, x, y) for pin in _PINS)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def chip_png(size: int) -> bytes:
    """A ``size`` x ``size`` RGBA PNG of the chip on a transparent background."""
    if size < 1:
        raise ValueError("a logo needs at least one pixel")
    scale = _GRID / size
    rows = bytearray()
    for row in range(size):
        rows.append(0)  # filter type: none
        for column in range(size):
            hits = sum(
                _covered(
                    (column + (i + 0.5) / _SAMPLES) * scale,
                    (row + (j + 0.5) / _SAMPLES) * scale,
                )
                for i in range(_SAMPLES)
                for j in range(_SAMPLES)
            )
            alpha = round(255 * hits / _SAMPLES**2)
            rows.extend((*_COLOR, alpha))
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + _chunk(b"IEND", b"")
    )
