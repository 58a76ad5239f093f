"""weft's safetensors files against an independent reader and writer.

Debian has no python3-safetensors, so this file implements the published
format with numpy and json: an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the
little-endian row-major data, which the offsets cover without gaps.
The C++ side is tests/train/safetensors_interop_tool (built with the tests).
"""

import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import pytest

NUMPY_DTYPES = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8"}


def build_dir():
    if "WEFT_BUILD_DIR" in os.environ:
        return pathlib.Path(os.environ["WEFT_BUILD_DIR"])
    try:
        import weft  # build/python/weft*.so

        return pathlib.Path(weft.__file__).resolve().parent.parent
    except ImportError:
        pytest.fail("set WEFT_BUILD_DIR to the build directory (or PYTHONPATH=<build>/python)")


@pytest.fixture(scope="module")
def tool():
    path = build_dir() / "tests" / "train" / "train_safetensors_interop_tool"
    if not path.exists():
        pytest.fail(f"{path} is missing; build the train_safetensors_interop_tool target")
    return path


def read_safetensors(path):
    """An independent reader, from the format description."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors, spans = {}, []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        chunk = data[begin:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(chunk, dtype=NUMPY_DTYPES[info["dtype"]])
        tensors[name] = (info["dtype"], array.reshape(info["shape"]))
        spans.append((begin, end))
    spans.sort()
    covered = 0
    for begin, end in spans:
        assert begin == covered, "holes or overlaps in the data section"
        covered = end
    assert covered == len(data)
    return tensors, metadata, n


def write_safetensors(path, tensors, metadata):
    """An independent writer: entries in reverse name order, no padding."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors, reverse=True):
        dtype, array = tensors[name]
        if dtype == "BF16":
            blob = (np.asarray(array, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            blob = np.ascontiguousarray(array, dtype=NUMPY_DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(array)), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = metadata
    text = json.dumps(header).encode("utf-8")
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_weft_file_reads_with_an_independent_reader(tool, tmp_path):
    path = tmp_path / "weft.safetensors"
    subprocess.run([str(tool), "write", str(path)], check=True)
    tensors, metadata, header_length = read_safetensors(path)
    assert (8 + header_length) % 8 == 0, "data section should be 8-byte aligned"
    assert metadata == {"format": "pt", "source": "weft"}
    dtype, wq = tensors["layers.0.attention.wq"]
    assert dtype == "F32"
    np.testing.assert_array_equal(wq, (np.arange(12, dtype=np.float64) * 0.25 - 1.5).reshape(3, 4))
    np.testing.assert_array_equal(tensors["bf16"][1], np.arange(5) - 2.5)
    np.testing.assert_array_equal(tensors["tokens"][1], (np.arange(6) * 7 - 20).reshape(2, 3))
    np.testing.assert_array_equal(tensors["positions"][1], (1 << 40) + np.arange(4))
    assert tensors["scalar"][1].shape == () and float(tensors["scalar"][1]) == 3.0
    assert tensors["empty"][1].shape == (0, 3)
    assert {name: t[0] for name, t in tensors.items()} == {
        "layers.0.attention.wq": "F32",
        "bf16": "BF16",
        "tokens": "I32",
        "positions": "I64",
        "scalar": "F32",
        "empty": "F32",
    }


def test_weft_reads_an_independently_written_file(tool, tmp_path):
    rng = np.random.default_rng(7)
    tensors = {
        "w": ("F32", rng.standard_normal((4, 6)).astype(np.float32)),
        "h": ("BF16", np.array([1.0, -2.0, 0.15625, 384.0], dtype=np.float32)),
        "ids": ("I32", rng.integers(-(2**31), 2**31 - 1, size=(3, 2), dtype=np.int64)),
        "big": ("I64", rng.integers(-(2**62), 2**62, size=(5,), dtype=np.int64)),
    }
    path = tmp_path / "numpy.safetensors"
    write_safetensors(path, tensors, {"author": "numpy"})
    result = subprocess.run([str(tool), "read", str(path)], check=True, capture_output=True, text=True)
    described = json.loads(result.stdout)
    assert described["metadata"] == {"author": "numpy"}
    for name, (dtype, array) in tensors.items():
        got = described["tensors"][name]
        assert got["dtype"] == dtype
        assert got["shape"] == list(array.shape)
        np.testing.assert_array_equal(np.asarray(got["values"]).reshape(array.shape), array)


def test_weft_rejects_a_truncated_file_naming_it(tool, tmp_path):
    path = tmp_path / "cut.safetensors"
    write_safetensors(path, {"w": ("F32", np.ones((8, 8), dtype=np.float32))}, {})
    path.write_bytes(path.read_bytes()[:-20])
    result = subprocess.run([str(tool), "read", str(path)], capture_output=True, text=True)
    assert result.returncode == 1
    assert str(path) in result.stderr
    assert "truncated" in result.stderr
