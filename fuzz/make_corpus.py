#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from real torch.save output
(torch 1.13, Debian's python3-torch), the samples in data/, and the tool's own outputs.

Usage: /usr/bin/python3 fuzz/make_corpus.py [--tool PATH/ckpt-tool] [--out fuzz/corpus]

Every seed is small (the targets run with -max_len 64 KiB; a longer seed would be cut, and a zip cut
short loses its directory). Deterministic apart from what torch and zipfile write (no timestamps
are taken from the clock: torch writes fixed ones, and the zips re-packed here are given one).
The corpus is committed; run this again only to refresh it (it empties each target's folder first).
"""
import argparse
import collections
import io
import json
import math
import os
import pickle
import pickletools
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
import zipfile

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = ["zip", "pickle", "safetensors", "legacy", "json"]
MAX_SEED = 48 * 1024


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 2)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).mean(dim=(2, 3)))


def objects():
    """(name, object) pairs: the shapes of checkpoint people save, kept to a few elements each."""
    torch.manual_seed(0)
    net = Tiny()
    sd = net.state_dict()
    ddp = collections.OrderedDict(("module." + k, v) for k, v in sd.items())
    ddp._metadata = collections.OrderedDict(("module." + k if k else "module", m) for k, m in sd._metadata.items())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    net(torch.randn(1, 1, 3, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, 5)
    dtypes = collections.OrderedDict()
    for dt in [torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.complex64, torch.complex128,
               torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]:
        dtypes[str(dt).replace("torch.", "")] = (torch.arange(4) % 3).to(dt).reshape(2, 2)
    m = torch.arange(12.).reshape(3, 4)
    emb = nn.Parameter(torch.randn(3, 2))
    views = collections.OrderedDict([("emb.weight", emb), ("head.weight", emb), ("m", m), ("row", m[1]),
                                     ("cols", m[:, 1:3]), ("t", m.t()), ("every_other", m.view(-1)[::3]),
                                     ("expanded", torch.ones(1).expand(4))])
    edge = collections.OrderedDict([("empty", torch.zeros(0, 3)), ("scalar", torch.tensor(3.5)),
                                    ("long_scalar", torch.tensor(7)),
                                    ("frozen", nn.Parameter(torch.ones(2), requires_grad=False))])
    nested = {"list": [1, 2.5, "three", None, True], "tensors": [torch.ones(2), (torch.zeros(1), 5)],
              "tuple": (1, (2, 3)), "set": {1, 2, 3}, "fs": frozenset({"a"}), "bytes": b"\x00\xffxy",
              "big": 2 ** 100, "neg": -2 ** 70, "inf": math.inf, "nan": math.nan, "none": None,
              "text": "h\u00e9llo \u2713", "dict": {1: "int key", "x": {"deep": [torch.ones(1)]}},
              "size": torch.Size([2, 3]), "device": torch.device("cpu"), "dtype": torch.float16,
              "empty_dict": {}, "empty_list": [], "complex": 1 + 2j}
    training = {"model": net.state_dict(), "optimizer": opt.state_dict(), "lr_scheduler": sched.state_dict(),
                "epoch": 3, "args": argparse.Namespace(lr=0.1, epochs=10, name="run")}
    quantized = {"w": torch.ones(3), "q": torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)}
    return [("state_dict", sd), ("ddp", ddp), ("dtypes", dtypes), ("views", views), ("edge", edge),
            ("nested", nested), ("training", training), ("quantized", quantized), ("module", net)]


def small(path):
    return os.path.getsize(path) <= MAX_SEED


def put(out, target, name, data):
    if len(data) > MAX_SEED:
        print("  skipped %s/%s: %d bytes" % (target, name, len(data)))
        return
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def repack(src, dst, compression, zip64=False):
    """The records of a torch zip written again by zipfile: DEFLATE, or every ZIP64 structure forced."""
    saved = zipfile.ZIP64_LIMIT
    if zip64:
        zipfile.ZIP64_LIMIT = 0  # zipfile then writes ZIP64 extras, the zip64 EOCD and its locator
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
            for info in zin.infolist():
                zi = zipfile.ZipInfo(info.filename, date_time=(2020, 1, 1, 0, 0, 0))
                zi.compress_type = compression
                with zout.open(zi, "w", force_zip64=zip64) as dest:
                    dest.write(zin.read(info.filename))
    finally:
        zipfile.ZIP64_LIMIT = saved


def legacy_pickles(data):
    """The back-to-back pickles of a legacy file (magic, version, sys_info, object, keys)."""
    f = io.BytesIO(data)
    out = []
    for _ in range(5):
        start = f.tell()
        for _op in pickletools.genops(f):
            pass
        out.append(data[start:f.tell()])
    return out


def safetensors_bytes(tensors, metadata=None, pad=True):
    """A safetensors file by hand: {name: (dtype, shape, bytes)}, header padded to 8 with spaces."""
    header, blobs, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "ckpt-tool"))
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    args = ap.parse_args()
    for t in TARGETS:
        shutil.rmtree(os.path.join(args.out, t), ignore_errors=True)
        os.makedirs(os.path.join(args.out, t))
    env = dict(os.environ, CKPT_TORCH_BACKEND=os.path.join(os.path.dirname(args.tool), "libckpt-torch.so"))

    def tool(*argv):
        return subprocess.run([args.tool, *argv], capture_output=True, env=env)

    work = tempfile.mkdtemp(prefix="ckpt-corpus-")
    try:
        zips, legacies = [], []
        warnings.simplefilter("ignore")
        for name, obj in objects():
            for proto in (2, 4):
                suffix = "" if proto == 2 else "_p%d" % proto
                z = os.path.join(work, "%s%s.pth" % (name, suffix))
                torch.save(obj, z, pickle_protocol=proto)
                zips.append(z)
                lg = os.path.join(work, "%s%s.legacy.pth" % (name, suffix))
                torch.save(obj, lg, pickle_protocol=proto, _use_new_zipfile_serialization=False)
                legacies.append(lg)
        for sample in ("resnet_ddp.pth", "training.pth"):
            zips.append(os.path.join(ROOT, "data", sample))
        script = os.path.join(work, "scripted.pt")
        torch.jit.save(torch.jit.script(Tiny().eval()), script)
        deflated = os.path.join(work, "training_deflated.pth")
        repack(os.path.join(work, "training.pth"), deflated, zipfile.ZIP_DEFLATED)
        zip64 = os.path.join(work, "views_zip64.pth")
        repack(os.path.join(work, "views.pth"), zip64, zipfile.ZIP_STORED, zip64=True)
        deflated64 = os.path.join(work, "edge_deflated_zip64.pth")
        repack(os.path.join(work, "edge.pth"), deflated64, zipfile.ZIP_DEFLATED, zip64=True)

        # zip: torch's zips (protocol 2 only: the container is the same), re-packs, TorchScript.
        for z in [z for z in zips if "_p4" not in z] + [script, deflated, zip64, deflated64]:
            if small(z):
                put(args.out, "zip", os.path.basename(z), read(z))

        # pickle: every zip's data.pkl (both protocols), the legacy files' object pickles, the tool's
        # own data.pkl (safetensors → .pth), and plain pickles of every protocol (0 and 1 are text).
        for z in zips + [script]:
            with zipfile.ZipFile(z) as zf:
                for info in zf.infolist():
                    if info.filename.endswith(".pkl"):
                        base = os.path.basename(z).replace(".pth", "").replace(".pt", "")
                        put(args.out, "pickle", "%s.%s" % (base, os.path.basename(info.filename)),
                            zf.read(info.filename))
        for lg in legacies:
            parts = legacy_pickles(read(lg))
            put(args.out, "pickle", os.path.basename(lg).replace(".pth", ".object.pkl"), parts[3])
            if lg.endswith("dtypes.legacy.pth"):
                for i, part in enumerate(("magic", "version", "sys_info")):
                    put(args.out, "pickle", "legacy.%s.pkl" % part, parts[i])
        plain = {"ints": [0, 1, -1, 255, 256, 65535, 2 ** 31, -2 ** 31 - 1, 2 ** 63, 2 ** 100],
                 "floats": [0.0, -1.5, 1e300, math.inf], "str": "a\u00e9\u2713\n\\", "bytes": b"\x00\x80",
                 "bytearray": bytearray(b"ab"), "tuple": (), "t1": (1,), "t2": (1, 2), "t3": (1, 2, 3),
                 "set": {1}, "frozenset": frozenset(), "none": None, "bools": [True, False],
                 "ordered": collections.OrderedDict(a=1), "complex": 1j}
        plain["shared"] = [plain["tuple"], plain["tuple"]]
        cycle = [1]
        cycle.append(cycle)
        plain["cycle"] = cycle
        for proto in range(0, 6):
            put(args.out, "pickle", "plain_p%d.pkl" % proto, pickle.dumps(plain, protocol=proto))
        # Containers larger than the arena's first slot block (256 items) as the first ones built: a
        # first tuple of 300 items once wrote past that block.
        for proto in (0, 2, 4):
            put(args.out, "pickle", "long_p%d.pkl" % proto,
                pickle.dumps((tuple(range(300)), list(range(3000)), {i: i for i in range(300)}), protocol=proto))

        # safetensors: the tool's conversions of real checkpoints, and hand-made edge cases.
        sts = []
        for name in ("state_dict", "ddp", "dtypes", "views", "edge", "training", "quantized"):
            st = os.path.join(work, name + ".safetensors")
            r = tool("convert", os.path.join(work, name + ".pth"), "-o", st)
            if r.returncode == 0:
                sts.append(st)
                put(args.out, "safetensors", name + ".safetensors", read(st))
            else:
                print("  convert %s → safetensors refused: %s" % (name, r.stderr.decode().strip()[:160]))
        f32 = struct.pack("<4f", 1, 2, 3, 4)
        handmade = {
            "empty.safetensors": safetensors_bytes({}),
            "metadata_only.safetensors": safetensors_bytes({}, {"format": "pt", "note": "\u2713"}),
            "unpadded.safetensors": safetensors_bytes({"a": ("F32", [2, 2], f32)}, pad=False),
            "zero_size.safetensors": safetensors_bytes({"z": ("F16", [0, 4], b""), "a": ("F32", [4], f32),
                                                        "y": ("I64", [3, 0], b"")}),
            "every_dtype.safetensors": safetensors_bytes(collections.OrderedDict(
                (d, (d, [2], b"\x01" * (2 * n))) for d, n in [
                    ("BOOL", 1), ("U8", 1), ("I8", 1), ("I16", 2), ("U16", 2), ("I32", 4), ("U32", 4),
                    ("I64", 8), ("U64", 8), ("F16", 2), ("BF16", 2), ("F32", 4), ("F64", 8), ("C64", 8),
                    ("F8_E4M3", 1), ("F8_E5M2", 1)])),
            "scalar.safetensors": safetensors_bytes({"s": ("F64", [], struct.pack("<d", 2.5))},
                                                    {"format": "pt"}),
        }
        for name, data in handmade.items():
            put(args.out, "safetensors", name, data)

        # legacy: torch's legacy files (both protocols), and a few files of the other formats, since
        # Checkpoint::open sniffs them all.
        for lg in legacies:
            if small(lg):
                put(args.out, "legacy", os.path.basename(lg), read(lg))
        for other in [os.path.join(work, "views.pth"), script, sts[0] if sts else None]:
            if other:
                put(args.out, "legacy", os.path.basename(other), read(other))

        # json: inspect --json and fingerprints (verify --write-fingerprint) of real checkpoints, a
        # verify --json report, and the manifest forms diff-keys reads.
        for name in ("state_dict", "ddp", "views", "training", "nested", "module"):
            src = os.path.join(work, name + ".pth")
            r = tool("inspect", src, "--json")
            if r.returncode == 0:
                put(args.out, "json", name + ".inspect.json", r.stdout)
            fp = os.path.join(work, name + ".fp.json")
            r = tool("verify", src, "--write-fingerprint", fp)
            if os.path.exists(fp):
                put(args.out, "json", name + ".fp.json", read(fp))
        r = tool("verify", os.path.join(work, "dtypes.pth"), "--all", "--json")
        if r.stdout:
            put(args.out, "json", "dtypes.verify.json", r.stdout)
        r = tool("verify", os.path.join(work, "training.pth"), os.path.join(work, "training.fp.json"), "--json")
        if r.stdout:
            put(args.out, "json", "training.verify-against.json", r.stdout)
        manifests = {
            "keys.json": ["conv.weight", "conv.bias", "fc.weight"],
            "rows.json": [{"key": "conv.weight", "shape": [2, 1, 2, 2], "dtype": "float32"},
                          {"key": "fc.bias", "shape": [2], "dtype": "torch.bfloat16"},
                          {"name": "bn.num_batches_tracked", "shape": [], "dtype": None}],
            "keys_object.json": {"keys": ["a", {"key": "b", "shape": None}]},
            "fingerprint_nan.json": {"command": "fingerprint", "file": "x.pth", "file_size": 10, "scope": "all",
                                     "tensors": [{"key": "w", "dtype": "float32", "shape": [1], "count": 1,
                                                  "mean": "nan", "std": None, "min": "-inf", "max": "inf",
                                                  "abs_mean": 1.0, "l2": 0, "nan": 1, "inf": 0,
                                                  "hash": "xxh3-128:" + "0" * 32}]},
        }
        for name, obj in manifests.items():
            put(args.out, "json", name, json.dumps(obj).encode())
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for t in TARGETS:
        d = os.path.join(args.out, t)
        files = os.listdir(d)
        print("%-12s %3d seeds, %6.1f KiB" % (t, len(files), sum(os.path.getsize(os.path.join(d, f)) for f in files) / 1024))


if __name__ == "__main__":
    main()
