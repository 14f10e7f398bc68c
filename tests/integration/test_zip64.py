#!/usr/bin/python3
"""Past 32 bits in every command: a torch.save-layout checkpoint of 4.6 GiB whose one big tensor
holds 4.5 GiB (1.2 G float32 elements: more than 2 GiB and more than 2^31 elements) and whose small
tensors sit past the 4 GiB mark, so sizes and offsets need ZIP64 (the extra field, the zip64 end
records). The big tensor's bytes are a hole: the file is built sparsely in a second and costs no
disk. Real torch 1.13 loads it (the fixture is real) and loads what strip-prefix and convert write;
the small tensors carry values, checked after every step.

inspect, diff-keys, verify (CRC-32 of 4.5 GiB, NaN/Inf, fingerprint), strip-prefix and convert (to
safetensors and back to .pth) each run on it. strip-prefix's output keeps the hole (its records are
copied hole by hole), so it stays sparse too.

Usage: test_zip64.py --tool PATH --work DIR
"""
import argparse
import collections
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import zlib

import torch

BIG_NUMEL = 1_207_959_552          # 4.5 GiB of float32, 0x48000000 elements (> 2^31)
BIG_SHAPE = (36_864, 32_768)


class FakeStorage:
    def __init__(self, key, cls, numel):
        self.key, self.cls, self.numel = key, cls, numel


class FakeTensor:
    """Pickles as torch.save pickles a tensor: _rebuild_tensor_v2 over a persistent storage id."""

    def __init__(self, storage, shape):
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        stride, n = [], 1
        for d in reversed(self.shape):
            stride.insert(0, n)
            n *= d
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, 0, torch.Size(self.shape), tuple(stride), False, collections.OrderedDict()))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, FakeStorage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


_zero_crcs = {}


def crc_of_zeros(n):
    if n in _zero_crcs:
        return _zero_crcs[n]
    crc, zeros, total = 0, bytes(64 << 20), n
    while n:
        k = min(n, len(zeros))
        crc = zlib.crc32(zeros[:k] if k < len(zeros) else zeros, crc)
        n -= k
    _zero_crcs[total] = crc
    return crc


def write_sparse_checkpoint(path, prefix, bigs=(("big", BIG_SHAPE),)):
    """{prefix+'big': zeros(BIG_SHAPE), prefix+'a': arange(6) 2x3, prefix+'b': [0.5, -1, 3]}; `bigs`
    names other all-zero float32 tensors (key, shape) to put first (bench/scale.py: 30 GiB)."""
    small_a = torch.arange(6, dtype=torch.float32)
    small_b = torch.tensor([0.5, -1.0, 3.0])
    sd = collections.OrderedDict()
    records = [("archive/data.pkl", None, None)]
    for key, shape in bigs:
        numel = 1
        for d in shape:
            numel *= d
        storage = str(len(records) - 1)
        sd[prefix + key] = FakeTensor(FakeStorage(storage, torch.FloatStorage, numel), shape)
        records.append(("archive/data/" + storage, None, numel * 4))
    for key, t in (("a", small_a.reshape(2, 3)), ("b", small_b)):
        storage = str(len(records) - 1)
        sd[prefix + key] = FakeTensor(FakeStorage(storage, torch.FloatStorage, t.numel()), tuple(t.shape))
        records.append(("archive/data/" + storage, t.numpy().tobytes(), None))
    records.append(("archive/version", b"3\n", None))
    import io
    buf = io.BytesIO()
    TorchPickler(buf, protocol=2).dump(sd)
    records[0] = ("archive/data.pkl", buf.getvalue(), None)
    central = []
    with open(path, "wb") as f:
        for name, data, hole in records:
            size = len(data) if data is not None else hole
            crc = zlib.crc32(data) if data is not None else crc_of_zeros(hole)
            offset = f.tell()
            big = size >= 0xFFFFFFFF
            extra = struct.pack("<HHQQ", 1, 16, size, size) if big else b""
            fixed = 30 + len(name) + len(extra) + 4
            pad = (64 - (offset + fixed) % 64) % 64
            extra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if big else 20, 0x0800, 0, 0, 0x21, crc,
                                0xFFFFFFFF if big else size, 0xFFFFFFFF if big else size,
                                len(name), len(extra)))
            f.write(name.encode() + extra)
            if data is not None:
                f.write(data)
            else:
                f.seek(size, os.SEEK_CUR)  # the hole: zeros that take no disk
            central.append((name, crc, size, offset))
        cd_offset = f.tell()
        for name, crc, size, offset in central:
            big_size, big_off = size >= 0xFFFFFFFF, offset >= 0xFFFFFFFF
            extra = b""
            if big_size or big_off:
                extra = struct.pack("<HH", 1, (16 if big_size else 0) + (8 if big_off else 0))
                if big_size:
                    extra += struct.pack("<QQ", size, size)
                if big_off:
                    extra += struct.pack("<Q", offset)
            f.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 45 if extra else 20, 0x0800, 0, 0,
                                0x21, crc, 0xFFFFFFFF if big_size else size, 0xFFFFFFFF if big_size else size,
                                len(name), len(extra), 0, 0, 0, 0o100644 << 16,
                                0xFFFFFFFF if big_off else offset))
            f.write(name.encode() + extra)
        cd_size = f.tell() - cd_offset
        zip64_end = f.tell()
        n = len(central)
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n, cd_size, cd_offset))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, zip64_end, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, min(cd_size, 0xFFFFFFFF),
                            0xFFFFFFFF, 0))
    return small_a.reshape(2, 3), small_b


def run(tool, *args, expect=0):
    p = subprocess.run([tool, *args], capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit("FAIL: %s exited %d, expected %d\nstdout: %s\nstderr: %s"
                 % (" ".join(args), p.returncode, expect, p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        sys.exit("FAIL: " + what)


def allocated(path):
    return os.stat(path).st_blocks * 512


def check_loaded(sd, prefix, a, b, what, order=True):
    keys = [prefix + "big", prefix + "a", prefix + "b"]
    check(list(sd) == keys if order else sorted(sd) == sorted(keys), "%s: keys %s" % (what, list(sd)))
    big = sd[prefix + "big"]
    check(tuple(big.shape) == BIG_SHAPE and big.dtype == torch.float32, "%s: big tensor %s" % (what, big.shape))
    check(big.numel() == BIG_NUMEL, what + ": big numel")
    # Its two ends and a stride through it are zeros (a full scan of 4.5 GiB adds nothing here).
    check(float(big[0].abs().sum()) == 0 and float(big[-1].abs().sum()) == 0 and
          float(big[::4096].abs().sum()) == 0, what + ": big tensor not zeros")
    check(torch.equal(sd[prefix + "a"], a) and torch.equal(sd[prefix + "b"], b), what + ": small tensors differ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    tool = args.tool
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    ddp = os.path.join(args.work, "ddp_big.pth")
    a, b = write_sparse_checkpoint(ddp, "module.")
    size = os.path.getsize(ddp)
    check(size > (4 << 30) + (512 << 20), "fixture is %d bytes" % size)
    check(allocated(ddp) < (16 << 20), "fixture is not sparse: %d bytes allocated" % allocated(ddp))
    before = open(ddp, "rb").read(4096), os.stat(ddp).st_mtime_ns

    # The fixture is a real checkpoint: torch reads it.
    sd = torch.load(ddp, map_location="cpu")
    check_loaded(sd, "module.", a, b, "torch.load of the fixture")
    del sd

    # inspect: the sizes past 32 bits, ZIP64 seen.
    j = json.loads(run(tool, "inspect", ddp, "--json"))
    check(j["container"]["zip64"] is True, "inspect: zip64 not reported")
    t = {x["key"]: x for x in j["tensors"]}
    check(t["module.big"]["nbytes"] == BIG_NUMEL * 4 and t["module.big"]["numel"] == BIG_NUMEL,
          "inspect: big tensor %s" % t["module.big"])
    check(t["module.big"]["shape"] == list(BIG_SHAPE), "inspect: big shape")
    check(t["module.a"]["shape"] == [2, 3] and t["module.b"]["nbytes"] == 12, "inspect: small tensors")
    check(j["totals"]["state_dict"]["bytes"] == BIG_NUMEL * 4 + 36, "inspect: totals")
    check(j["file_size"] == size, "inspect: file size")

    # verify: every CRC (4.5 GiB of them), NaN/Inf, and a fingerprint compared with itself.
    fp = os.path.join(args.work, "ddp_big.fp.json")
    vj = json.loads(run(tool, "verify", ddp, "--json", "--write-fingerprint", fp))
    check(vj["findings"] == [], "verify: findings on a clean file: %s" % vj["findings"][:3])
    run(tool, "verify", ddp, fp, "--exact")
    fpj = json.load(open(fp))
    big_fp = [x for x in fpj["tensors"] if x["key"] == "module.big"]
    check(len(big_fp) == 1 and big_fp[0]["count"] == BIG_NUMEL and big_fp[0]["mean"] == 0 and big_fp[0]["max"] == 0,
          "fingerprint of the big tensor: %s" % big_fp)

    # strip-prefix: output loads in torch with the plain keys, and keeps the hole.
    plain = os.path.join(args.work, "plain_big.pth")
    run(tool, "strip-prefix", ddp, "-o", plain)
    check(allocated(plain) < (16 << 20), "strip-prefix output not sparse: %d bytes allocated" % allocated(plain))
    plain_fp = os.path.join(args.work, "plain_big.fp.json")
    run(tool, "verify", plain, "--write-fingerprint", plain_fp)
    sd = torch.load(plain, map_location="cpu")
    check_loaded(sd, "", a, b, "torch.load after strip-prefix")
    del sd

    # diff-keys: the prefix found and named across 32-bit-busting files; plain against itself clean.
    dj = json.loads(run(tool, "diff-keys", ddp, plain, "--json", expect=1))
    check(dj["prefix_fix"] is not None and dj["prefix_fix"]["strip"] == "module." and dj["prefix_fix"]["complete"],
          "diff-keys: prefix fix %s" % dj["prefix_fix"])
    run(tool, "diff-keys", plain, plain)

    # convert to safetensors: offsets past 4 GiB in the header; read back with a plain parser here.
    st = os.path.join(args.work, "big.safetensors")
    run(tool, "convert", plain, "-o", st)
    with open(st, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        check(header["big"]["shape"] == list(BIG_SHAPE) and header["big"]["dtype"] == "F32", "safetensors: big entry")
        begin, end = header["big"]["data_offsets"]
        check(end - begin == BIG_NUMEL * 4, "safetensors: big byte range")
        for name, want in (("a", a), ("b", b)):
            lo, hi = header[name]["data_offsets"]
            f.seek(base + lo)
            got = torch.frombuffer(bytearray(f.read(hi - lo)), dtype=torch.float32).reshape(want.shape)
            check(torch.equal(got, want), "safetensors: tensor %s" % name)
        check(max(header[k]["data_offsets"][1] for k in header if k != "__metadata__") > (4 << 30),
              "safetensors: no offset past 4 GiB")
    run(tool, "diff-keys", st, plain)
    run(tool, "verify", st, plain_fp, "--exact")  # the same numbers, hash and all
    # and back to a .pth, which torch loads
    back = os.path.join(args.work, "back.pth")
    run(tool, "convert", st, "-o", back)
    run(tool, "verify", back, plain_fp, "--exact")
    sd = torch.load(back, map_location="cpu")
    check_loaded(sd, "", a, b, "torch.load after convert safetensors → pth", order=False)  # safetensors sorts
    del sd

    check((open(ddp, "rb").read(4096), os.stat(ddp).st_mtime_ns) == before, "input modified")
    print("zip64: %d checks passed (file %.2f GiB, %d KiB allocated)" % (checks, size / 2**30, allocated(ddp) // 1024))
    shutil.rmtree(args.work)  # sparse, but 23 GiB of apparent size is in nobody's interest


if __name__ == "__main__":
    main()
