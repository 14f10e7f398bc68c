#!/usr/bin/python3
"""The seeds of fuzz_dist: sharded folders written by tests/fixtures/make_dist.py with torch 1.13
(DeepSpeed ZeRO-1/2/3 with frozen parameters, buffers and tied weights; torch.distributed.checkpoint
of two eras with sharded and replicated tensors) and make_megatron.py (Megatron-LM's torch format
with TP × PP and with experts, its torch_dist), each packed as dist_fuzzer.cpp reads its input:
records of [u8 name length][name][u32 little-endian size][bytes], one per file.

Usage: fuzz/make_dist_corpus.py [--out fuzz/corpus]
"""
import argparse
import collections
import os
import shutil
import struct
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))
import make_dist  # noqa: E402
import make_megatron  # noqa: E402

MAX_SEED = 64 * 1024


def pack(folder):
    out = b""
    for top, _dirs, files in sorted(os.walk(folder)):
        for f in sorted(files):
            path = os.path.join(top, f)
            name = os.path.relpath(path, folder).encode()
            with open(path, "rb") as fh:
                data = fh.read()
            out += struct.pack("<B", len(name)) + name + struct.pack("<I", len(data)) + data
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    args = ap.parse_args()
    target = os.path.join(args.out, "dist")
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    work = tempfile.mkdtemp(prefix="ckpt-dist-corpus-")
    try:
        seeds = {}
        for stage in (1, 2, 3):
            top = os.path.join(work, "ds%d" % stage)
            make_dist.write_deepspeed(top, stage=stage, ws=2, groups=[[("a.weight", (3, 2)), ("a.bias", (3,))], [("b", (5,))]],
                                      frozen=[("f", (2,))], buffers=[("buf", torch.arange(3.0))], tied=[("c.weight", "a.weight")])
            seeds["deepspeed_zero%d" % stage] = top
        top = os.path.join(work, "ds_bf16")
        make_dist.write_deepspeed(top, stage=2, ws=2, groups=[[("x", (4,))]], module_dtype=torch.bfloat16, bf16_files=True)
        seeds["deepspeed_bf16"] = top
        g = torch.Generator().manual_seed(3)
        sd = {"model": collections.OrderedDict([("row.weight", torch.randn(5, 2, generator=g)),
                                                ("rep.bias", torch.randn(3, generator=g)),
                                                ("half", torch.randn(4, generator=g).to(torch.bfloat16))]),
              "step": 7, "extra": {"name": "run-a"}}
        shards = {"model.row.weight": [(0, [0, 0], [3, 2]), (1, [3, 0], [2, 2])], "model.half": [(1, [0], [2]), (0, [2], [2])]}
        for era in ("2.4", "2.2"):
            folder = os.path.join(work, "dcp" + era)
            make_dist.write_dcp(folder, sd, shards, ws=2, era=era)
            seeds["dcp_" + era] = folder
        tiny = dict(layers=2, hidden=8, ffn=16, heads=2, groups=2, vocab=20)
        top = os.path.join(work, "megatron_torch")
        make_megatron.write(top, tp=2, pp=2, **tiny)
        seeds["megatron_torch"] = top
        top = os.path.join(work, "megatron_moe")
        make_megatron.write(top, tp=1, ep=2, experts=2, swiglu=True, **tiny)
        seeds["megatron_moe"] = top
        top = os.path.join(work, "megatron_dist")
        make_megatron.write_dist(top, tp=2, pp=1, moments=False, **tiny)
        seeds["megatron_dist"] = top
        for name, folder in seeds.items():
            data = pack(folder)
            if len(data) > MAX_SEED:
                print("  skipped %s: %d bytes" % (name, len(data)))
                continue
            with open(os.path.join(target, name), "wb") as f:
                f.write(data)
            print("  %s: %d bytes" % (name, len(data)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
