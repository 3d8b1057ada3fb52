#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checkpoints round-trip between ct and PyTorch.

1. st_roundtrip write: the C program saves one tensor per dtype (values from
   a recipe recomputed here with numpy), a seeded MLP with ct_module_save and
   that MLP's output on a fixed input.
2. Here: the files' headers are checked against the format (8-byte length,
   JSON, "__metadata__" first, keys in the order written, space padding to a
   multiple of 8); the tensors are loaded with tools/fixtures/st.py into torch
   tensors (and with safetensors.torch.load_file too when that package is
   installed) and compared with the recipe; the C model's state_dict is
   loaded into torch.nn.Sequential(Linear(4, 6), ReLU(), Linear(6, 2)) with
   load_state_dict(strict=True) and must reproduce the C output.
3. Here: a torch model's state_dict, its input and output, and the dtype
   recipe (bf16 through torch) are written with st.py.
4. st_roundtrip read: ct_module_load of torch's state_dict, forward on torch's
   input, compared with torch's output; the recipe checked in C.
Exit 77 (skipped) when torch is not importable.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "fixtures"))
import st  # noqa: E402

# name: (torch dtype, shape, recipe of element i); the C program's recipe.
RECIPE = {
    "f64": (torch.float64, (2, 3), lambda i: i / 3 - 0.5),
    "f32": (torch.float32, (4,), lambda i: i * 0.25 - 1),
    "f16": (torch.float16, (2, 2, 2), lambda i: i * 0.5 - 2),
    "bf16": (torch.bfloat16, (3,), lambda i: i * 1.5 - 2),
    "i64": (torch.int64, (5,), lambda i: i * 10**12 - 7),
    "i32": (torch.int32, (2, 3), lambda i: 3 - 1000 * i),
    "u8": (torch.uint8, (6,), lambda i: 50 * i),
    "bool": (torch.bool, (7,), lambda i: i % 3 == 0),
    "scalar": (torch.float32, (), lambda i: 3.25),
    "empty": (torch.float32, (0, 4), lambda i: 0),
    "big": (torch.float32, (64, 33), lambda i: (i % 97) * 0.125),
}
ST_CODE = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAILED:", msg)


def recipe_tensor(name):
    dtype, shape, f = RECIPE[name]
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == torch.int64:  # exact integers beyond float64's 2^53 would need this; keep it integral
        vals = torch.tensor([f(i) for i in range(n)], dtype=torch.int64)
    else:
        vals = torch.tensor([float(f(i)) for i in range(n)], dtype=torch.float64).to(dtype)
    return vals.reshape(shape)


def check_header(path, names, metadata):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    check(n % 8 == 0, f"{path}: header length {n} is not a multiple of 8")
    text = raw[8:8 + n].decode("utf-8")
    body = text.rstrip(" ")
    check(len(text) - len(body) < 8, f"{path}: more than 7 bytes of padding")
    header = json.loads(text)  # dicts keep the file's key order
    keys = list(header)
    want = (["__metadata__"] if metadata is not None else []) + list(names)
    check(keys == want, f"{path}: header keys {keys}, expected {want}")
    if metadata is not None:
        check(header["__metadata__"] == metadata, f"{path}: metadata {header['__metadata__']!r}, expected {metadata!r}")
    # The layout the reference writer produces: compact JSON, fields in this order.
    check(body == json.dumps(header, separators=(",", ":"), ensure_ascii=False),
          f"{path}: header is not compact JSON in the reference layout")
    for k in names:
        check(list(header[k]) == ["dtype", "shape", "data_offsets"], f"{path}: {k} fields {list(header[k])}")


def compare_recipe(tensors, source):
    for name in RECIPE:
        want = recipe_tensor(name)
        got = tensors.get(name)
        check(got is not None, f"{source}: no tensor {name}")
        if got is None:
            continue
        check(got.dtype == want.dtype, f"{source}: {name} dtype {got.dtype}, expected {want.dtype}")
        check(tuple(got.shape) == tuple(want.shape), f"{source}: {name} shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if got.dtype == want.dtype and got.shape == want.shape:
            check(torch.equal(got, want), f"{source}: {name} values differ:\n{got}\nexpected\n{want}")


def mlp(i, h, o):
    return torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.ReLU(), torch.nn.Linear(h, o))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--helper", required=True, help="the st_roundtrip program")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--keep", help="work in this directory and keep the files")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="ct_st_torch_")
    os.makedirs(work, exist_ok=True)
    try:
        return run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args, work):
    torch.set_num_threads(1)
    r = subprocess.run([args.helper, "write", work, args.device])
    if r.returncode == 77:
        return 77
    if r.returncode != 0:
        print(f"st_roundtrip write failed ({r.returncode})")
        return 1

    # ---- C -> PyTorch -------------------------------------------------------------------
    dpath = os.path.join(work, "c_dtypes.safetensors")
    meta = {"producer": "ct st_roundtrip", "quoted": 'a "b" \\ c\n\u00e9'}
    check_header(dpath, list(RECIPE), meta)
    compare_recipe(st.load_torch(dpath), "st.load_torch(c_dtypes)")
    arrays, got_meta = st.load(dpath, with_metadata=True)
    check(got_meta == meta, f"st.load metadata {got_meta!r}")
    check(arrays["bf16"].dtype == np.float32 and arrays["bf16"].tolist() == [-2.0, -0.5, 1.0], "st.load bf16 widened")
    try:
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
        print("note: the safetensors package is not installed; checked with st.py only")
    if load_file:
        compare_recipe(load_file(dpath), "safetensors.torch.load_file(c_dtypes)")

    mpath, iopath = os.path.join(work, "c_model.safetensors"), os.path.join(work, "c_io.safetensors")
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    check_header(mpath, names, {"format": "pt"})
    check_header(iopath, ["x", "y"], None)
    model = mlp(4, 6, 2)
    sd = load_file(mpath) if load_file else st.load_torch(mpath)
    result = model.load_state_dict(sd, strict=True)
    check(not result.missing_keys and not result.unexpected_keys, f"load_state_dict: {result}")
    io = st.load_torch(iopath)
    want_x = (torch.arange(12, dtype=torch.float32) - 5).reshape(3, 4) / 4
    check(torch.equal(io["x"], want_x), "c_io x is not the recipe's input")
    with torch.no_grad():
        y = model(io["x"])
    err = ((y - io["y"]).abs() / (io["y"].abs() + 1e-3)).max().item()
    check(torch.allclose(io["y"], y, rtol=1e-5, atol=1e-6), f"C output differs from torch's on C's weights (max rel {err:.2e})")
    print(f"C model loaded into torch.nn.Sequential; outputs agree (max rel err {err:.2e})")

    # ---- PyTorch -> C -------------------------------------------------------------------
    torch.manual_seed(0)
    model = mlp(5, 7, 3)
    x = torch.randn(4, 5)
    with torch.no_grad():
        y = model(x)
    st.save(os.path.join(work, "py_model.safetensors"), model.state_dict())
    st.save(os.path.join(work, "py_io.safetensors"), {"x": x, "y": y})
    st.save(os.path.join(work, "py_dtypes.safetensors"), {k: recipe_tensor(k) for k in RECIPE},
            metadata={"producer": "check_st_torch.py"})
    if load_file:  # st.py's files are the real format
        compare_recipe(load_file(os.path.join(work, "py_dtypes.safetensors")), "load_file(py_dtypes)")
    r = subprocess.run([args.helper, "read", work, args.device])
    check(r.returncode == 0, f"st_roundtrip read failed ({r.returncode})")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("checkpoint round trip through PyTorch: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
