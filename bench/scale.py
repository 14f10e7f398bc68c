#!/usr/bin/python3
"""A checkpoint larger than this machine's memory, through every command, with the peak resident
memory of each run.

The file is torch.save's layout (as tests/integration/test_zip64.py builds it: ZIP64, tensors past
2 GiB and 2^31 elements) and holds --gib GiB (default: 1.25 × this machine's memory) of float32
zeros in 4 GiB tensors, plus two small tensors with values. The zeros are holes, so the file costs no
disk; reading them still goes through the page cache page by page, as a real file's bytes would, so
the kernel must evict as the run goes. A command holding the tensors resident would grow past
physical memory; the peak RSS column shows that it does not.

Outputs: strip-prefix and convert write next to the file (sparse as well: copies skip the holes).
Usage: bench/scale.py --tool build/ckpt-tool [--gib N] [--dir bench/out]
"""
import argparse
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the tree from the imports below
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import benchlib  # noqa: E402
from test_zip64 import write_sparse_checkpoint  # noqa: E402

TENSOR = (32768, 32768)  # 4 GiB of float32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--gib", type=float, default=None)
    ap.add_argument("--dir", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    mem = (benchlib.mem_total_kib() or 0) * 1024
    launcher = benchlib.Launcher()
    gib = args.gib or 1.25 * mem / 2**30
    n = max(1, int(gib // 4 + (1 if gib % 4 else 0)))
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "scale-%dx4g.pth" % n)
    if not os.path.exists(path):
        write_sparse_checkpoint(path, "module.", [("layers.%d.weight" % i, TENSOR) for i in range(n)])
    size = os.path.getsize(path)
    fp = path + ".fp.json"
    plain = os.path.join(args.dir, "scale-plain.pth")
    st = os.path.join(args.dir, "scale.safetensors")
    runs = [
        ("inspect", [args.tool, "inspect", path]),
        ("verify (CRC-32, NaN/Inf)", [args.tool, "verify", path]),
        ("verify --write-fingerprint", [args.tool, "-q", "verify", path, "--write-fingerprint", fp]),
        ("verify against the fingerprint", [args.tool, "verify", path, fp, "--exact"]),
        ("strip-prefix", [args.tool, "strip-prefix", path, "-o", plain, "--force"]),
        ("diff-keys", [args.tool, "diff-keys", plain, path]),
        ("convert to safetensors (read back and compared)", [args.tool, "convert", plain, "-o", st, "--force"]),
    ]
    print("machine: %s, %d cores, %.1f GiB memory; %s" % (platform.node(), os.cpu_count(), mem / 2**30,
                                                       subprocess.run([args.tool, "--version"], capture_output=True,
                                                                      text=True).stdout.strip()))
    print("file: %s, %.1f GiB (%d tensors of 4 GiB, sparse), %.2f × memory\n" % (path, size / 2**30, n, size / mem))
    print("| command | time | peak RSS | exit |")
    print("| --- | --- | --- | --- |")
    for name, argv in runs:
        s = launcher.run(argv)  # wall time, and peak RSS through GNU time
        took, rss, rc = s["wall_s"], s["maxrss_kib"] * 1024, s["rc"]
        rate = " (%.2f GiB/s)" % (size / 2**30 / took) if took >= 1 else ""  # only where bytes are read
        print("| %s | %.2f s%s | %.0f MiB | %d |" % (name, took, rate, rss / 2**20, rc))
    for f in (plain, st):
        if os.path.exists(f):
            os.remove(f)


if __name__ == "__main__":
    main()
