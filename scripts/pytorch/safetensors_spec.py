"""Safetensors files as the format's specification writes and reads them, with torch,
json and struct alone (the safetensors package is not needed): how Python reads what
poplar-worker writes, and writes what it reads.

The spec (https://github.com/huggingface/safetensors): 8 bytes, the little-endian
length N of the header; N bytes of a JSON object {name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}, padded with spaces; then
every tensor's bytes, little-endian, C order, offsets counted from the header's end.
"""
import json
import struct

import torch

DTYPES = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


def write(path, tensors, metadata=None):
    """Writes `tensors` (name -> tensor) to `path` in reverse name order (so that the
    bytes' order is not the header's key order), the header padded to 8 bytes."""
    header, data, begin = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors, reverse=True):
        tensor = tensors[name].contiguous()
        raw = tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [begin, begin + len(raw)]}
        data.append(raw)
        begin += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(data))


def read(path):
    """The tensors and metadata of the safetensors file `path`."""
    with open(path, "rb") as file:
        blob = file.read()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = blob[8 + size:]
    tensors, ends = {}, []
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        raw = bytearray(data[begin:end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.zeros(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"])
        ends.append((begin, end))
    covered = 0
    for begin, end in sorted(ends):
        assert begin == covered, f"{path}: hole or overlap at byte {begin}"
        covered = end
    assert covered == len(data), f"{path}: {len(data) - covered} bytes after the last tensor"
    return tensors, metadata, size
