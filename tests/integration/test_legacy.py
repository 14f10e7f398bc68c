#!/usr/bin/python3
"""The legacy format (torch < 1.6, or torch.save(..., _use_new_zipfile_serialization=False)), with files
written by real torch 1.13 and read back by real torch.load:

- inspect --json against torch.load, field by field: keys in order, dtype, shape, stride, storage
  offset, storage sharing (a partition equal to torch's), every dtype, views, ties, a training
  checkpoint (Adam, Namespace, epoch), a pickled nn.Module; without reading tensor bytes;
- values: `convert` to the zip format and to safetensors equal torch.load's bit for bit; `verify`
  of the legacy file against the converted one with --exact; the whole checkpoint is kept by
  `convert old.pth -o new.pth` and torch.load reads it as the same object;
- `strip-prefix` of a legacy DataParallel checkpoint writes a zip that loads with strict=True;
  `diff-keys` between the legacy file and its conversion finds nothing.

Usage: test_legacy.py --tool PATH --work DIR
"""
import argparse
import collections
import json
import os
import sys
import zipfile

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_convert import read_safetensors, same_bits  # noqa: E402
from test_convert_pth import Tied, same_structure  # noqa: E402
from test_repair import expect_failure, sha, suite_main  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]


def legacy_save(obj, path):
    torch.save(obj, path, _use_new_zipfile_serialization=False)


def tensors_of(obj, prefix=""):
    """(dotted key, tensor) of every tensor leaf, in the order inspect flattens them."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors_of(v, "%s.%s" % (prefix, k) if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors_of(v, "%s.%d" % (prefix, i) if prefix else str(i))


def compare_inspect(s, name, path, obj):
    r = s.run("inspect", path, "--json", "--all")
    if not s.check(r.returncode == 0, "%s: inspect exit %d %s" % (name, r.returncode, r.stderr.strip())):
        return
    j = json.loads(r.stdout)
    s.check(j["format"] == "legacy" and j["container"]["version"] == "1001" and j["container"]["byteorder"] == "little",
            "%s: container %s %s" % (name, j["format"], j["container"]))
    want = list(tensors_of(obj))
    got = {t["key"]: t for t in j["tensors"]}
    s.check([k for k, _ in want] == [t["key"] for t in j["tensors"]], "%s: keys %s" % (name, [t["key"] for t in j["tensors"]][:6]))
    storage_of = {}
    for k, t in want:
        g = got.get(k)
        if not s.check(g is not None, "%s: %s missing" % (name, k)):
            continue
        s.check(g["dtype"] == str(t.dtype).replace("torch.", "") and g["shape"] == list(t.shape) and g["stride"] == list(t.stride())
                and g["storage_offset"] == t.storage_offset(), "%s: %s is %s, torch says %s %s %s %s" % (
                    name, k, {f: g[f] for f in ("dtype", "shape", "stride", "storage_offset")}, t.dtype, list(t.shape),
                    t.stride(), t.storage_offset()))
        storage_of[k] = (g["storage"], t.storage().data_ptr())
    ours = collections.defaultdict(set)
    theirs = collections.defaultdict(set)
    for k, (a, b) in storage_of.items():
        ours[a].add(k)
        theirs[b].add(k)
    s.check(sorted(map(sorted, ours.values())) == sorted(map(sorted, theirs.values())), "%s: storage sharing differs from torch's" % name)


def test_legacy(s):
    torch.manual_seed(5)
    g = torch.Generator().manual_seed(5)
    base = torch.randn(5, 7, generator=g, dtype=torch.float64)
    every = collections.OrderedDict()
    for dt in DTYPES:
        if dt.is_complex:
            every[str(dt)] = torch.complex(base, -base).to(dt)
        elif dt == torch.bool:
            every[str(dt)] = base > 0
        else:
            every[str(dt)] = (base * 10).to(dt)
    every["view.t"] = every["torch.float32"].t()
    every["view.slice"] = every["torch.float32"][1:4, 2:6]
    every["scalar"] = torch.tensor(2.5)
    every["empty"] = torch.zeros(0, 3)

    net = Tied()
    opt = torch.optim.Adam(net.parameters())
    net.head(net.norm(net.embed(torch.randint(0, 20, (8,))))).sum().backward()
    opt.step()
    sd = net.state_dict()
    train = {"epoch": 4, "model": sd, "optimizer": opt.state_dict(), "args": argparse.Namespace(lr=1e-3), "best": 0.5}

    cases = [("dtypes", every), ("state dict", sd), ("training", train)]
    for name, obj in cases:
        path = s.path(name.replace(" ", "_") + ".legacy.pth")
        legacy_save(obj, path)
        s.check(not zipfile.is_zipfile(path), "%s: torch wrote a zip, not the legacy format" % name)
        back = torch.load(path)
        compare_inspect(s, name, path, back)
        # The whole file in the zip format: torch reads the same object.
        before = sha(path)
        out = s.path(name.replace(" ", "_") + ".zip.pth")
        r = s.run("convert", path, "-o", out, "--json")
        if s.check(r.returncode == 0, "%s: convert exit %d %s" % (name, r.returncode, r.stderr.strip())):
            rep = json.loads(r.stdout)
            s.check(rep["verified"] and rep["dropped"] == [], "%s: convert report %s" % (name, rep))
            s.check(zipfile.is_zipfile(out), "%s: convert did not write a zip" % name)
            got = torch.load(out)
            problems = same_structure(back, got, set())
            s.check(not problems, "%s: converted file differs at %s" % (name, problems[:5]))
            rv = s.run("verify", path, out, "--exact", "--all")
            s.check(rv.returncode == 0, "%s: verify legacy vs converted exit %d %s" % (name, rv.returncode, rv.stdout[-300:]))
            rd = s.run("diff-keys", path, out)
            s.check(rd.returncode == 0, "%s: diff-keys legacy vs converted exit %d" % (name, rd.returncode))
        s.check(sha(path) == before, "%s: the input changed" % name)
        rv = s.run("verify", path, "--all")
        s.check(rv.returncode == 0, "%s: verify of the legacy file exit %d %s" % (name, rv.returncode, rv.stdout[-300:]))

    # To safetensors: the bytes of every tensor equal torch's (views written contiguous).
    path = s.path("dtypes_st.legacy.pth")
    legacy_save(collections.OrderedDict((k, v) for k, v in every.items() if v.dtype != torch.complex128), path)
    expect_failure(s, "legacy complex128 → safetensors", ["convert", s.path("dtypes.legacy.pth"), "-o", s.path("c128.safetensors")],
                   [s.path("dtypes.legacy.pth")], s.path("c128.safetensors"), "complex128")
    r = s.run("convert", path, "-o", s.path("dtypes.safetensors"))
    if s.check(r.returncode == 0, "legacy → safetensors exit %d %s" % (r.returncode, r.stderr.strip())):
        _, t, _, _ = read_safetensors(s.path("dtypes.safetensors"))
        back = torch.load(path)
        for k, v in back.items():
            s.check(k in t and same_bits(t[k], v), "legacy → safetensors: %s differs" % k)

    # --dtype on a legacy training checkpoint: the state dict cast, the optimizer kept.
    path = s.path("training.legacy.pth")
    r = s.run("convert", path, "-o", s.path("training.bf16.pth"), "--dtype", "bfloat16")
    if s.check(r.returncode == 0, "legacy --dtype exit %d %s" % (r.returncode, r.stderr.strip())):
        got = torch.load(s.path("training.bf16.pth"))
        cast_ids = {id(v) for v in train["model"].values() if v.is_floating_point()}
        problems = same_structure(train, got, cast_ids)
        s.check(not problems, "legacy --dtype differs at %s" % problems[:5])

    # strip-prefix of a legacy DataParallel checkpoint: a zip that loads into the bare model.
    dp = nn.DataParallel(Tied()).state_dict()
    path = s.path("ddp.legacy.pth")
    legacy_save(dp, path)
    out = s.path("ddp.stripped.pth")
    r = s.run("strip-prefix", path, "-o", out)
    if s.check(r.returncode == 0, "legacy strip-prefix exit %d %s" % (r.returncode, r.stderr.strip())):
        got = torch.load(out, weights_only=True)
        fresh = Tied()
        try:
            fresh.load_state_dict(got, strict=True)
            s.check(all(same_bits(got[k[len("module."):]], v) for k, v in dp.items()), "legacy strip-prefix: values")
        except Exception as e:  # noqa: BLE001
            s.check(False, "legacy strip-prefix: load_state_dict(strict=True): %s" % str(e).splitlines()[0])
        s.check(getattr(got, "_metadata", None) is not None and "" in got._metadata and "embed" in got._metadata,
                "legacy strip-prefix: _metadata not renamed: %s" % list(getattr(got, "_metadata", {}))[:4])

    # A pickled nn.Module (its classes saved as persistent ids): inspected, its state dict converted.
    path = s.path("module.legacy.pth")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        legacy_save(Tied(), path)
    r = s.run("inspect", path, "--json")
    if s.check(r.returncode == 0, "legacy nn.Module: inspect exit %d %s" % (r.returncode, r.stderr.strip())):
        j = json.loads(r.stdout)
        s.check(j["state_dict_kind"] == "module" and {t["state_dict_key"] for t in j["tensors"]} >= {"embed.weight", "norm.running_mean"},
                "legacy nn.Module: %s %s" % (j["state_dict_kind"], [t["state_dict_key"] for t in j["tensors"]]))
    r = s.run("convert", path, "-o", s.path("module.weights.pth"), "--weights-only")
    if s.check(r.returncode == 0, "legacy nn.Module --weights-only exit %d %s" % (r.returncode, r.stderr.strip())):
        m = torch.load(path)
        got = torch.load(s.path("module.weights.pth"), weights_only=True)
        s.check(all(same_bits(got[k], v) for k, v in m.state_dict().items() if k in got) and "embed.weight" in got,
                "legacy nn.Module --weights-only values")
    expect_failure(s, "legacy nn.Module whole", ["convert", path, "-o", s.path("module.whole.pth")], [path],
                   s.path("module.whole.pth"), "--weights-only")


class _StorageView:
    """A storage slice of torch < 0.4: elements [offset, offset + size) of the storage `root`."""

    def __init__(self, root, root_numel, key, offset, size):
        self.root, self.root_numel, self.key, self.offset, self.size = root, root_numel, key, offset, size


class _TensorOn:
    """A tensor pickled as torch 0.3 did: _rebuild_tensor(storage, offset, size, stride)."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride)

    def __reduce__(self):
        return (torch._utils._rebuild_tensor, self.args)


def legacy_with_views(path, obj, storages):
    """A legacy file as torch 0.3 wrote one with storage slices: persistent ids with view_metadata
    (view_key, offset, size), the roots' bytes after the pickles. `storages`: [(key, float32 values)]."""
    import io
    import pickle
    import struct

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, _StorageView):
                return ("storage", torch.FloatStorage, o.root, "cpu", o.root_numel, (o.key, o.offset, o.size))
            return None

    out = io.BytesIO()
    for header in (0x1950a86a20f9469cfc6c, 1001,
                   {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(header, out, protocol=2)
    Pickler(out, protocol=2).dump(obj)
    pickle.dump([k for k, _ in storages], out, protocol=2)
    for _, values in storages:
        out.write(struct.pack("<q", len(values)))
        out.write(struct.pack("<%df" % len(values), *values))
    with open(path, "wb") as f:
        f.write(out.getvalue())


def test_storage_views(s):
    """torch < 0.4 saved storage slices (view_metadata), as PyTorch's own test_serialization_storage_slice
    and public projects' storage_view.legacy.pt hold: the slices as storages, tensors on them read at
    the slice's offset; torch 1.13's torch.load is the oracle."""
    root = [float(i) + 0.5 for i in range(10)]
    a = _StorageView("140001", 10, "140002", 2, 5)  # elements 2..7
    b = _StorageView("140001", 10, "140003", 6, 4)  # elements 6..10
    path = s.path("views.legacy.pt")
    legacy_with_views(path, {"a": _TensorOn(a, 1, (2, 2), (2, 1)), "b": _TensorOn(b, 0, (4,), (1,)), "s": (a, b)},
                      [("140001", root)])
    want = torch.load(path)
    r = s.run("inspect", path, "--json", "--all")
    if s.check(r.returncode == 0, "storage views: inspect exit %d %s" % (r.returncode, r.stderr.strip())):
        j = json.loads(r.stdout)
        got = {t["key"]: t for t in j["tensors"]}
        for key in ("a", "b"):
            t, w = got.get(key), want[key]
            s.check(t is not None and t["shape"] == list(w.shape) and t["stride"] == list(w.stride()) and
                    t["storage_offset"] == w.storage_offset() + (2 if key == "a" else 6),
                    "storage views: %s is %s, torch: %s %s offset %d in its slice" %
                    (key, t, list(w.shape), list(w.stride()), w.storage_offset()))
        objects = {o["key"]: o["repr"] for o in j["objects"]}
        s.check("elements 2–7 of storage 140001" in objects.get("s", "") and "elements 6–10 of storage 140001" in objects.get("s", ""),
                "storage views: the slices are %s" % objects)
    r = s.run("verify", path, "--json", "--all")
    if s.check(r.returncode == 0, "storage views: verify exit %d %s %s" % (r.returncode, r.stdout[-300:], r.stderr.strip())):
        means = {t["key"]: t["mean"] for t in json.loads(r.stdout)["tensors"]}
        for key in ("a", "b"):
            s.check(abs(means.get(key, 1e9) - want[key].double().mean().item()) < 1e-9,
                    "storage views: mean of %s %s, torch %s" % (key, means.get(key), want[key].double().mean().item()))
    out = s.path("views.safetensors")
    r = s.run("convert", path, "-o", out, "--state-dict-key", "")
    if s.check(r.returncode == 0, "storage views: convert exit %d %s" % (r.returncode, r.stderr.strip())):
        got = read_safetensors(out)[1]
        s.check(all(same_bits(got[k], want[k]) for k in ("a", "b")), "storage views: converted values")
    # A slice that reaches past its storage, byte by byte: a clear error naming the file.
    bad = s.path("views.bad.legacy.pt")
    legacy_with_views(bad, {"a": _TensorOn(_StorageView("1", 4, "2", 2, 5), 0, (5,), (1,))}, [("1", [1.0] * 4)])
    r = s.run("inspect", bad)
    s.check(r.returncode == 2 and bad in r.stderr and "storage view 2" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
            "storage views: a slice past its storage: exit %d %s" % (r.returncode, r.stderr.strip()))


def test_old_protocols(s):
    """torch.save(..., pickle_protocol=1) in the legacy format: the magic number is LONG text, every
    pickle protocol 1's opcodes (gopickle's test files are such). (Protocol 0 writes persistent ids
    as text, which torch.load itself does not read back.)"""
    obj = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.tensor([1, 2], dtype=torch.int64), "h": torch.ones(3, dtype=torch.bfloat16)}
    for proto in (1,):
        path = s.path("proto%d.legacy.pt" % proto)
        torch.save(obj, path, _use_new_zipfile_serialization=False, pickle_protocol=proto)
        compare_inspect(s, "protocol %d" % proto, path, torch.load(path))
        r = s.run("verify", path, "--json")
        if s.check(r.returncode == 0, "protocol %d: verify exit %d %s" % (proto, r.returncode, r.stderr.strip())):
            means = {t["key"]: t["mean"] for t in json.loads(r.stdout)["tensors"]}
            s.check(all(abs(means[k] - v.double().mean().item()) < 1e-9 for k, v in obj.items()), "protocol %d: means %s" % (proto, means))


def main():
    def body(s, _args):
        test_legacy(s)
        test_storage_views(s)
        test_old_protocols(s)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
