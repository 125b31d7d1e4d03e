#!/usr/bin/env python3
"""Safetensors files as the format's specification writes and reads them, with torch,
json and struct alone (the safetensors package is not installed here): the other side
of launcher/model/safetensors_file.h in tests/launcher/safetensors_file_test.cc.

    write_safetensors.py write PATH   # sample_tensors() to PATH
    write_safetensors.py check PATH   # PATH read back equals sample_tensors(); exit 1 if not

The spec's reader and writer: scripts/pytorch/safetensors_spec.py.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "pytorch"))
from safetensors_spec import read, write  # noqa: E402


def sample_tensors():
    """One tensor of each dtype, a scalar and an empty one; the C++ test's SampleTensors()."""
    return {
        "f32": torch.tensor([[-2.0, -1.5, -1.0, -0.5], [0.0, 0.5, 1.0, 1.5], [2.0, 2.5, 3.0, 2.0 ** 100]]),
        "f16": torch.tensor([[-0.75, -0.5, -0.25], [0.0, 0.25, 65504.0]], dtype=torch.float16),
        "bf16": torch.tensor([0.0, 1.5, -3.0, 2.0 ** 100], dtype=torch.bfloat16),
        "f64": torch.tensor([1.0 / 3.0, -2.5], dtype=torch.float64),
        "i64": torch.tensor([-(2 ** 40), 7, 2 ** 62], dtype=torch.int64),
        "i32": torch.tensor([[-3, -2, -1], [0, 1, 2 ** 31 - 1]], dtype=torch.int32),
        "i16": torch.tensor([-300, 300], dtype=torch.int16),
        "i8": torch.tensor([-128, 127, 0], dtype=torch.int8),
        "u8": torch.tensor([0, 255, 7], dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 4),
    }


def check(path):
    tensors, metadata, size = read(path)
    expected = sample_tensors()
    problems = []
    if set(tensors) != set(expected):
        problems.append(f"names {sorted(tensors)}, expected {sorted(expected)}")
    for name in sorted(set(tensors) & set(expected)):
        got, want = tensors[name], expected[name]
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            problems.append(f"{name}: {got!r}, expected {want!r}")
    if metadata.get("format") != "pt":
        problems.append(f"metadata {metadata}, expected format pt")
    if (8 + size) % 8:
        problems.append(f"header of {size} bytes: not padded to a multiple of 8")
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "write":
        write(sys.argv[2], sample_tensors(), {"format": "pt"})
        return 0
    return check(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
