"""A minimal PNG encoder (8-bit RGB, no interlace) on the standard library, for the heat map's cells.

One pixel per cell: a 1,000-GPU fleet over 72 buckets is 72,000 pixels, a few kilobytes once deflated, where the
same cells as SVG rectangles would be megabytes of markup for the browser to lay out.
"""
from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode(width: int, height: int, rgb: bytes) -> bytes:
    """A PNG of ``width`` x ``height`` pixels from ``rgb``: 3 bytes a pixel, rows top to bottom."""
    if width <= 0 or height <= 0:
        raise ValueError(f"a PNG needs a positive size, not {width}x{height}")
    if len(rgb) != width * height * 3:
        raise ValueError(f"{len(rgb)} bytes of pixels for {width}x{height} RGB (needs {width * height * 3})")
    stride = width * 3
    raw = b"".join(b"\x00" + rgb[y * stride:(y + 1) * stride] for y in range(height))   # filter 0 on every row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")


def decode(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes of a PNG written by :func:`encode` (for tests and checks)."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    pos, idat, width, height = len(SIGNATURE), b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in chunk {kind!r}")
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if (depth, color) != (8, 2):
                raise ValueError("only 8-bit RGB is read")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * 3
    rows = []
    for y in range(height):
        line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
        if line[0] != 0:
            raise ValueError("only filter 0 is read")
        rows.append(line[1:])
    return width, height, b"".join(rows)
