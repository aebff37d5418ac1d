#!/usr/bin/env python3
"""Writes the safetensors golden files of tests/golden/safetensors/.

Run by hand, once per format version; the outputs are committed and the
test suite decodes them forever. It is deliberately independent of seqkv's
own writer: the header is produced by Python's json module in the compact
form the `safetensors` library writes (separators (",", ":"),
"__metadata__" first, padded with spaces to a multiple of 8).

    python3 make_golden.py            # in this directory

good_v1.safetensors must parse; each bad_*.safetensors must fail with the
error listed in EXPECTED.
"""
import json
import struct

EXPECTED = []


def header_bytes(obj_or_text, pad=True):
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(
        obj_or_text, separators=(",", ":"), ensure_ascii=False)
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if pad:
        raw += b" " * (-len(raw) % 8)
    return raw


def image(header, data=b"", pad=True, hlen=None):
    raw = header if isinstance(header, bytes) else header_bytes(header, pad)
    n = len(raw) if hlen is None else hlen
    return struct.pack("<Q", n) + raw + data


def write(name, blob, err=None):
    with open(name, "wb") as f:
        f.write(blob)
    if err:
        EXPECTED.append((name, err))


# ---- good_v1 ---------------------------------------------------------------
# name -> (dtype, shape, little-endian bytes)
f32 = struct.pack("<6f", -1.0, -0.5, 0.0, 0.5, 1.0, 1.5)
bf16 = struct.pack("<4H", 0x3F80, 0xC000, 0x7F80, 0x0001)  # 1, -2, inf, min subnormal
f16 = struct.pack("<4H", 0x3C00, 0xBC00, 0x7BFF, 0x0001)   # 1, -1, 65504, min subnormal
f8 = bytes([0x38, 0xB8, 0x7E])                               # 1, -1, 448
i32 = struct.pack("<3i", -1, 0, 2147483647)
scalar = struct.pack("<f", 3.25)

tensors = [
    ("a.f32", "F32", [2, 3], f32),
    ("b.bf16", "BF16", [4], bf16),
    ("c.f16", "F16", [2, 2], f16),
    ("d.f8", "F8_E4M3", [3], f8),
    ("e.i32", "I32", [3], i32),
    ("z.empty", "F32", [0, 4], b""),
    ("s.scalar", "F32", [], scalar),
]
hdr = {"__metadata__": {"format": "pt", "seqkv": "golden v1", "note": "\u00e9\"q\""}}
data = b""
for name, dt, shape, raw in tensors:
    hdr[name] = {"dtype": dt, "shape": shape,
                 "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
good = image(hdr, data)
write("good_v1.safetensors", good)


# ---- known-bad files ---------------------------------------------------------
def one(dtype="F32", shape=(2,), offsets=(0, 8), extra=None, meta=None, data=b"\0" * 8,
        name="t"):
    h = {}
    if meta is not None:
        h["__metadata__"] = meta
    entry = {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}
    if extra:
        entry.update(extra)
    h[name] = entry
    return image(h, data)


write("bad_short.safetensors", b"\x10\0\0\0\0", "SKV_ERR_FORMAT")
write("bad_header_len.safetensors", image("{}", hlen=4096), "SKV_ERR_RANGE")
write("bad_header_huge.safetensors", image("{}", hlen=1 << 40), "SKV_ERR_TOO_LARGE")
write("bad_empty_header.safetensors", image(b""), "SKV_ERR_FORMAT")
write("bad_not_object.safetensors", image("[]"), "SKV_ERR_FORMAT")
write("bad_json_trailing_comma.safetensors",
      image('{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},}', b"\0" * 8),
      "SKV_ERR_FORMAT")
write("bad_unknown_dtype.safetensors", one(dtype="F33"), "SKV_ERR_FORMAT")
write("bad_unsupported_dtype.safetensors", one(dtype="F64", shape=(1,)), "SKV_ERR_UNSUPPORTED")
write("bad_shape_size.safetensors", one(shape=(3,)), "SKV_ERR_SHAPE")
write("bad_offsets_range.safetensors", one(offsets=(0, 16), shape=(4,)), "SKV_ERR_RANGE")
write("bad_offsets_reversed.safetensors", one(offsets=(8, 0)), "SKV_ERR_RANGE")
write("bad_overlap.safetensors",
      image({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 16),
      "SKV_ERR_RANGE")
write("bad_duplicate_name.safetensors",
      image('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8),
      "SKV_ERR_FORMAT")
write("bad_meta_nonstring.safetensors", one(meta={"n": 1}), "SKV_ERR_FORMAT")
write("bad_meta_not_object.safetensors", one(meta=["x"]), "SKV_ERR_FORMAT")
write("bad_too_many_dims.safetensors", one(shape=(1,) * 9, offsets=(0, 4)), "SKV_ERR_TOO_LARGE")
write("bad_negative_dim.safetensors", one(shape=(-2,)), "SKV_ERR_FORMAT")
write("bad_shape_overflow.safetensors", one(shape=(1 << 62, 1 << 62)), "SKV_ERR_SHAPE")
write("bad_extra_field.safetensors", one(extra={"device": "cpu"}), "SKV_ERR_FORMAT")
write("bad_missing_field.safetensors",
      image({"t": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "SKV_ERR_FORMAT")
write("bad_deep_nesting.safetensors", image("[" * 100 + "]" * 100), "SKV_ERR_TOO_LARGE")
write("bad_invalid_utf8.safetensors",
      image(b'{"t\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\0" * 8),
      "SKV_ERR_FORMAT")
write("bad_lone_surrogate.safetensors",
      image('{"t\\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\0" * 8),
      "SKV_ERR_FORMAT")
write("bad_truncated_data.safetensors", good[:-1], "SKV_ERR_RANGE")

with open("EXPECTED", "w") as f:
    f.write("# file error (SKV_ERR_* name); written by make_golden.py\n")
    for name, err in EXPECTED:
        f.write(f"{name} {err}\n")
