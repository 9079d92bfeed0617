"""plexus.codec, the Python package: round trips, info without a model, the
codec's message in plexus.codec.Error, arrays with a row stride, and the
bytes and pixels of plexus-ae for the same image and quality.

Run with pytest, plexus.codec importable (PYTHONPATH=<build>/python, or
`pip install .`); PLEXUS_AE names the plexus-ae executable for the
comparison with the command line (skipped without it).
"""
import os
import pathlib
import struct
import subprocess
import zlib

import numpy as np
import pytest

import plexus.codec as codec

SOURCE = pathlib.Path(__file__).resolve().parents[2]
KODIM = SOURCE / "data" / "eval-sample" / "kodim04.png"


def read_png_rgb(path):
    """The pixels of an 8-bit RGB, non-interlaced PNG (as the bundled images are), H x W x 3."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks, idat = 8, {}, b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour, interlace) == (8, 2, 0), "an 8-bit RGB PNG without interlacing"
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * 3)
    rows = np.zeros((height, width * 3), np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        above = rows[y - 1] if y else np.zeros_like(line)
        if kind == 0:
            rows[y] = line
        elif kind == 2:
            rows[y] = (line + above) % 256
        else:  # Sub, Average, Paeth: each byte depends on the one to its left
            out = rows[y]
            for x in range(width * 3):
                left = out[x - 3] if x >= 3 else 0
                corner = above[x - 3] if x >= 3 else 0
                if kind == 1:
                    predicted = left
                elif kind == 3:
                    predicted = (left + above[x]) // 2
                else:
                    p = left + above[x] - corner
                    pa, pb, pc = abs(p - left), abs(p - above[x]), abs(p - corner)
                    predicted = left if pa <= pb and pa <= pc else above[x] if pb <= pc else corner
                out[x] = (line[x] + predicted) % 256
    return rows.astype(np.uint8).reshape(height, width, 3)


@pytest.fixture(scope="module")
def model():
    return codec.Model(quality=3, device="cpu")


def gradient(height, width):
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 4 % 256, y * 5 % 256, (x + y) * 3 % 256], axis=-1).astype(np.uint8)


def test_round_trip(model):
    pixels = gradient(40, 56)
    data = model.compress(pixels)
    assert isinstance(data, bytes) and data[:4] == b"PXAE"
    decoded = model.decompress(data)
    assert decoded.shape == (40, 56, 3) and decoded.dtype == np.uint8
    error = np.abs(decoded.astype(int) - pixels.astype(int)).mean()
    assert 0 < error < 12, error  # lossy, and close
    assert model.compress(pixels) == data  # deterministic


def test_info_without_a_model(model):
    data = model.compress(gradient(21, 13))
    info = codec.info(data)
    assert info["width"] == 13 and info["height"] == 21
    assert info["model_fingerprint"] == model.fingerprint
    assert info["format_version"] == 5
    assert info["grey"] is False
    assert info["rate_level"] == 2.0  # quality 3: level 2 of the variable-rate model


def test_bad_bytes_raise_the_codecs_message(model):
    with pytest.raises(codec.Error, match="not a plexus-ae compressed image"):
        codec.info(b"hello, world")
    data = bytearray(model.compress(gradient(16, 16)))
    data[len(data) // 2] ^= 1
    with pytest.raises(codec.Error, match="checksum mismatch"):
        model.decompress(bytes(data))
    with pytest.raises(codec.Error, match="is not in \\[1, 99\\]"):
        codec.Model(quality=0)
    with pytest.raises(ValueError):
        model.compress(np.zeros((4, 4), np.uint8))


def test_a_buffer_with_a_stride(model):
    pixels = gradient(24, 30)
    expected = model.compress(pixels)
    wide = np.zeros((24, 41, 4), np.uint8)  # RGBA rows of 41 pixels, 30 used
    wide[:, :30, :3] = pixels
    wide[:, :30, 3] = 99
    assert model.compress(wide[:, :30]) == expected
    assert model.compress(wide[:, :30, :3]) == expected  # pixels 4 bytes apart: copied
    assert model.compress(memoryview(np.ascontiguousarray(pixels))) == expected


def test_a_torch_tensor_when_torch_is_installed(model):
    torch = pytest.importorskip("torch")
    pixels = gradient(16, 24)
    assert model.compress(torch.from_numpy(pixels)) == model.compress(pixels)


@pytest.mark.skipif(not os.environ.get("PLEXUS_AE"), reason="PLEXUS_AE does not name plexus-ae")
def test_the_same_bytes_and_pixels_as_the_command_line(model, tmp_path):
    ae = os.environ["PLEXUS_AE"]
    file, png = tmp_path / "cli.pxae", tmp_path / "cli.png"
    subprocess.run([ae, "compress", "--quality", "3", "--metadata", "none", "--device", "cpu", str(KODIM),
                    "-o", str(file)], check=True)
    subprocess.run([ae, "decompress", "--device", "cpu", str(file), "-o", str(png)], check=True)
    pixels = read_png_rgb(KODIM)
    data = model.compress(pixels)
    assert data == file.read_bytes()
    assert np.array_equal(model.decompress(data), read_png_rgb(png))
