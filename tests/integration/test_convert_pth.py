#!/usr/bin/python3
"""`convert` to pth with real torch on both ends, and `strip-prefix` of sharded checkpoints:

- a whole training checkpoint (model, optimizer, scheduler, Namespace, an `ema` copy, epoch) written
  again, plain and with --dtype bfloat16: every object kept, the state dict's floating tensors equal
  to torch's .to(bfloat16) bit for bit, optimizer state and integer buffers untouched, ties, views
  and `_metadata` kept, weights_only loading the output exactly when it loads the input; protocol 4
  (STACK_GLOBAL) and protocol 2 state dicts; a DEFLATE zip written back STORED;
- pth shards (`pytorch_model-00001-of-0000N.bin` + `pytorch_model.bin.index.json`): names, index,
  every shard loadable with weights_only, tied tensors in one shard and still one storage, the shards
  reassembling to the input and loading with load_state_dict(strict=True);
- safetensors' own __metadata__ carried through convert, and reported when pth has no place for it;
- strip-prefix of sharded checkpoints (safetensors and pth shards, into another directory and
  --in-place); refusals exit 2 and leave no file.

Usage: test_convert_pth.py --tool PATH --work DIR
"""
import argparse
import collections
import json
import os
import shutil
import sys
import zipfile

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_convert import read_safetensors, same_bits  # noqa: E402
from test_repair import expect_failure, schema_problems, sha, suite_main, zip_layout  # noqa: E402


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 6)
        self.norm = nn.BatchNorm1d(6)
        self.head = nn.Linear(6, 20, bias=False)
        self.head.weight = self.embed.weight


def loads_weights_only(path):
    try:
        torch.load(path, weights_only=True)
        return True
    except Exception:  # noqa: BLE001
        return False


def load_strict(module, sd):
    try:
        module.load_state_dict(sd, strict=True)
        return True
    except Exception as e:  # noqa: BLE001
        print("  load_state_dict:", str(e).splitlines()[0])
        return False


def bf16(v):
    return v.to(torch.bfloat16) if v.is_floating_point() else v


def training_checkpoint(path, protocol=2):
    torch.manual_seed(1)
    model = Tied()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    out = model.head(model.norm(model.embed(torch.randint(0, 20, (8,)))))
    out.sum().backward()
    opt.step()
    sched.step()
    sd = model.state_dict()
    sd["view.t"] = sd["embed.weight"].t()   # a transpose of the tied storage
    sd["view.row"] = sd["embed.weight"][3]  # an offset view
    ckpt = {"epoch": 7, "model": sd, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "args": argparse.Namespace(lr=1e-3, name="run"), "ema": {k: v.clone() for k, v in model.state_dict().items()},
            "note": "bf16 me"}
    torch.save(ckpt, path, pickle_protocol=protocol)
    return ckpt


def same_structure(a, b, cast_ids, where=""):
    """a: the source object, b: the written one; tensors of the state dict (cast_ids: id()s) must be
    a's cast to bfloat16, every other tensor and value equal."""
    if isinstance(a, torch.Tensor):
        want = bf16(a) if id(a) in cast_ids else a
        ok = isinstance(b, torch.Tensor) and same_bits(b, want) and b.stride() == a.stride() and b.storage_offset() == a.storage_offset()
        return [] if ok else [where]
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b) or type(a) is not type(b):
            return [where + " (keys or type)"]
        return [p for k in a for p in same_structure(a[k], b[k], cast_ids, "%s.%s" % (where, k))]
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return [where]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in same_structure(x, y, cast_ids, "%s[%d]" % (where, i))]
    if isinstance(a, argparse.Namespace):
        return [] if vars(a) == vars(b) else [where]
    return [] if a == b else [where]


def test_whole(s):
    src = s.path("train.pth")
    training_checkpoint(src)
    ck = torch.load(src)
    for name, args, cast in [("copy", [], False), ("bfloat16", ["--dtype", "bfloat16"], True)]:
        out = s.path("train.%s.pth" % name)
        before = sha(src)
        r = s.run("convert", src, "-o", out, "--json", *args)
        if not s.check(r.returncode == 0, "whole %s: exit %d %s" % (name, r.returncode, r.stderr.strip())):
            continue
        rep = json.loads(r.stdout)
        s.check(not schema_problems(rep), "whole %s JSON vs schema: %s" % (name, schema_problems(rep)))
        s.check(rep["verified"] and rep["dropped"] == [] and rep["outputs"] == [out], "whole %s report: %s" % (name, rep))
        s.check(sha(src) == before, "whole %s: the input changed" % name)
        got = torch.load(out)
        # the state dict's floating tensors are cast (with their views: one storage), nothing else
        cast_ids = {id(v) for k, v in ck["model"].items() if v.is_floating_point()} if cast else set()
        s.check(rep["cast"] == (len(cast_ids) if cast else 0), "whole %s: cast count %s" % (name, rep["cast"]))
        problems = same_structure(ck, got, cast_ids)
        s.check(not problems, "whole %s differs at %s" % (name, problems[:5]))
        m = got["model"]
        s.check(m["embed.weight"].data_ptr() == m["head.weight"].data_ptr()
                and m["view.t"].storage().data_ptr() == m["embed.weight"].storage().data_ptr(), "whole %s: ties or views lost" % name)
        s.check(getattr(m, "_metadata", None) == getattr(ck["model"], "_metadata", None), "whole %s: _metadata differs" % name)
        s.check(m["norm.num_batches_tracked"].dtype == torch.int64, "whole %s: an integer buffer was cast" % name)
        s.check(got["optimizer"]["state"][0]["exp_avg"].dtype == torch.float32, "whole %s: optimizer state was cast" % name)
        s.check(loads_weights_only(out) == loads_weights_only(src), "whole %s: weights_only loading changed" % name)
        names, problems = zip_layout(out)
        s.check(not problems and names == zip_layout(src)[0], "whole %s: zip layout %s %s" % (name, problems, names))
        if cast:
            s.check(os.path.getsize(out) < os.path.getsize(src), "bfloat16 output is not smaller")

    # A bare state dict, protocol 2 and 4 (the storage class by GLOBAL, or by STACK_GLOBAL from memoized strings).
    net = Tied()
    for proto in (2, 4):
        p = s.path("sd.p%d.pth" % proto)
        torch.save(net.state_dict(), p, pickle_protocol=proto)
        out = s.path("sd.p%d.f16.pth" % proto)
        r = s.run("convert", p, "-o", out, "--dtype", "float16")
        if s.check(r.returncode == 0, "protocol %d --dtype: exit %d %s" % (proto, r.returncode, r.stderr.strip())):
            got, want = torch.load(out), net.state_dict()
            s.check(list(got) == list(want) and all(
                same_bits(got[k], v.to(torch.float16) if v.is_floating_point() else v) for k, v in want.items()),
                "protocol %d float16 differs from torch's .to()" % proto)
            s.check(got._metadata == want._metadata, "protocol %d: _metadata lost" % proto)
            s.check(loads_weights_only(out) == loads_weights_only(p), "protocol %d: weights_only loading changed" % proto)
            s.check(load_strict(Tied().half(), got), "protocol %d: load_state_dict(strict=True) fails" % proto)

    # A DEFLATE zip (rewritten by Python's zipfile) comes back STORED and equal.
    deflated = s.path("deflated.pth")
    with zipfile.ZipFile(s.path("sd.p2.pth")) as zin, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zout:
        for i in zin.infolist():
            zout.writestr(i.filename, zin.read(i.filename))
    out = s.path("stored.pth")
    r = s.run("convert", deflated, "-o", out)
    if s.check(r.returncode == 0, "DEFLATE input: exit %d %s" % (r.returncode, r.stderr.strip())):
        got = torch.load(out, weights_only=True)
        s.check(all(same_bits(got[k], v) for k, v in net.state_dict().items()), "DEFLATE input: values differ")
        with zipfile.ZipFile(out) as z:
            s.check(all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), "DEFLATE input: output not STORED")


def test_pth_shards(s):
    torch.manual_seed(2)
    net = Tied()
    sd = net.state_dict()
    sd["extra.big"] = torch.randn(30, 10)
    src = s.path("shard_src.pth")
    torch.save(sd, src)
    os.makedirs(s.path("pshards"))
    out = s.path("pshards/pytorch_model.bin")
    r = s.run("convert", src, "-o", out, "--max-shard-size", "500B", "--json")
    if not s.check(r.returncode == 0, "pth shards: exit %d %s" % (r.returncode, r.stderr.strip())):
        return
    rep = json.loads(r.stdout)
    s.check(not schema_problems(rep) and rep["verified"], "pth shards report: %s" % rep)
    shards, index_path = rep["outputs"][:-1], rep["outputs"][-1]
    s.check(index_path == out + ".index.json" and len(shards) >= 3 and not os.path.exists(out)
            and all(os.path.basename(p) == "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(shards)) for i, p in enumerate(shards)),
            "pth shard names: %s" % rep["outputs"])
    with open(index_path) as f:
        index = json.load(f)
    merged = collections.OrderedDict()
    for p in shards:
        part = torch.load(p, weights_only=True)
        for k, v in part.items():
            s.check(index["weight_map"].get(k) == os.path.basename(p), "index places %s wrongly" % k)
            merged[k] = v
        storage_bytes = sum({v.storage().data_ptr(): v.storage().nbytes() for v in part.values()}.values())
        s.check(storage_bytes <= 500 or len({v.storage().data_ptr() for v in part.values()}) == 1,
                "%s holds %d bytes of storage" % (p, storage_bytes))
    s.check(sorted(merged) == sorted(sd) and all(same_bits(merged[k], v) for k, v in sd.items()), "pth shards do not reassemble")
    s.check(list(index["weight_map"]) == list(sd), "weight_map order: %s" % list(index["weight_map"]))
    s.check(index["metadata"]["total_size"] == sum(v.numel() * v.element_size() for v in sd.values()), "total_size %s" % index["metadata"])
    s.check(index["weight_map"]["embed.weight"] == index["weight_map"]["head.weight"]
            and merged["embed.weight"].data_ptr() == merged["head.weight"].data_ptr(), "tied weights split or copied")
    del merged["extra.big"]
    s.check(load_strict(Tied(), merged), "pth shards: load_state_dict(strict=True) fails")
    for target in (index_path, s.path("pshards")):
        rc = s.run("verify", target, src, "--exact")
        s.check(rc.returncode == 0, "verify pth shards %s against the source: exit %d %s" % (target, rc.returncode, rc.stdout[-300:]))
    # a cast on the way, and a training checkpoint needs --weights-only to be sharded
    r = s.run("convert", src, "-o", s.path("pshards/half.bin"), "--max-shard-size", "300B", "--dtype", "bfloat16")
    if s.check(r.returncode == 0, "pth shards --dtype: exit %d %s" % (r.returncode, r.stderr.strip())):
        with open(s.path("pshards/half.bin.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        part = {}
        for name in files:
            part.update(torch.load(s.path("pshards/" + name), weights_only=True))
        s.check(all(same_bits(part[k], bf16(v)) for k, v in sd.items()), "pth shards --dtype: not torch's .to(bfloat16)")
    training_checkpoint(s.path("train_s.pth"))
    expect_failure(s, "shard a training checkpoint", ["convert", s.path("train_s.pth"), "-o", s.path("pshards/t.bin"),
                                                      "--max-shard-size", "1KB"],
                   [s.path("train_s.pth")], s.path("pshards/t.bin.index.json"), "--weights-only")
    r = s.run("convert", s.path("train_s.pth"), "-o", s.path("pshards/t.bin"), "--max-shard-size", "400B", "--weights-only", "--json")
    if s.check(r.returncode == 0, "shards --weights-only: exit %d %s" % (r.returncode, r.stderr.strip())):
        rep = json.loads(r.stdout)
        s.check(rep["dropped"] == ["epoch", "optimizer", "scheduler", "args", "ema", "note"], "dropped: %s" % rep["dropped"])


def test_metadata(s):
    sd = collections.OrderedDict(a=torch.arange(6.0).reshape(2, 3), b=torch.ones(4, dtype=torch.int32))
    src = s.path("meta.pth")
    torch.save(sd, src)
    st = s.path("meta.safetensors")
    r = s.run("convert", src, "-o", st, "--metadata", "license=mit", "--metadata", "step=100")
    if not s.check(r.returncode == 0, "meta: exit %d" % r.returncode):
        return
    st2 = s.path("meta2.safetensors")
    r = s.run("convert", st, "-o", st2, "--metadata", "step=200")
    if s.check(r.returncode == 0, "safetensors → safetensors: exit %d %s" % (r.returncode, r.stderr.strip())):
        h, t, _, _ = read_safetensors(st2)
        s.check(h["__metadata__"] == {"format": "pt", "license": "mit", "step": "200"}, "metadata not carried: %s" % h["__metadata__"])
        s.check(all(same_bits(t[k], v) for k, v in sd.items()), "safetensors → safetensors values")
    r = s.run("convert", st, "-o", s.path("meta.back.pth"), "--json")
    if s.check(r.returncode == 0, "meta → pth: exit %d" % r.returncode):
        rep = json.loads(r.stdout)
        s.check(rep["metadata_dropped"] == ["license", "step"] and not schema_problems(rep), "metadata_dropped: %s" % rep)


def test_sharded_strip(s):
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))
    dp = nn.DataParallel(m).state_dict()
    src = s.path("dp.pth")
    torch.save(dp, src)
    for kind, name in (("safetensors", "model.safetensors"), ("pth", "pytorch_model.bin")):
        d_in, d_out = s.path("dp_" + kind), s.path("plain_" + kind)
        os.makedirs(d_in)
        os.makedirs(d_out)
        r = s.run("convert", src, "-o", os.path.join(d_in, name), "--max-shard-size", "100B", "--metadata", "k=v")
        if not s.check(r.returncode == 0, "%s shards for strip: exit %d %s" % (kind, r.returncode, r.stderr.strip())):
            continue
        index_in = os.path.join(d_in, name + ".index.json")
        with open(index_in) as f:
            idx_before = json.load(f)
        hashes = {f: sha(os.path.join(d_in, f)) for f in os.listdir(d_in)}
        r = s.run("strip-prefix", d_in, "-o", d_out, "--json")
        if not s.check(r.returncode == 0, "strip-prefix %s shards: exit %d %s" % (kind, r.returncode, r.stderr.strip())):
            continue
        rep = json.loads(r.stdout)
        s.check(not schema_problems(rep) and len(rep["renamed"]) == len(dp), "strip-prefix shards report: %s" % rep)
        s.check({f: sha(os.path.join(d_in, f)) for f in os.listdir(d_in)} == hashes, "%s: input shards changed" % kind)
        s.check(sorted(os.listdir(d_out)) == sorted(os.listdir(d_in)), "%s: output files %s" % (kind, os.listdir(d_out)))
        with open(os.path.join(d_out, name + ".index.json")) as f:
            idx = json.load(f)
        s.check(idx["metadata"] == idx_before["metadata"]
                and idx["weight_map"] == {k[len("module."):]: v for k, v in idx_before["weight_map"].items()}, "%s: index %s" % (kind, idx))
        got = {}
        for f in sorted(set(idx["weight_map"].values())):
            p = os.path.join(d_out, f)
            if kind == "pth":
                got.update(torch.load(p, weights_only=True))
            else:
                h, t, _, _ = read_safetensors(p)
                s.check(h["__metadata__"].get("k") == "v", "%s: shard metadata lost" % kind)
                got.update(t)
        fresh = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))
        s.check(load_strict(fresh, got), "%s: load_state_dict(strict=True) after strip fails" % kind)
        s.check(all(same_bits(got[k[len("module."):]], v) for k, v in dp.items()), "%s: values after strip" % kind)
        rc = s.run("diff-keys", d_out, src)
        s.check(rc.returncode == 1, "%s: diff-keys of stripped vs wrapped should differ" % kind)
        # in place, then refusals
        d_ip = s.path("ip_" + kind)
        shutil.copytree(d_in, d_ip)
        r = s.run("strip-prefix", d_ip, "--in-place")
        s.check(r.returncode == 0 and sorted(os.listdir(d_ip)) == sorted(os.listdir(d_in)),
                "%s --in-place: exit %d %s %s" % (kind, r.returncode, r.stderr.strip(), os.listdir(d_ip)))
        rc = s.run("diff-keys", d_ip, d_out)
        s.check(rc.returncode == 0, "%s --in-place result differs from -o result" % kind)
        expect_failure(s, "%s shards into their own directory" % kind, ["strip-prefix", index_in, "-o", os.path.join(d_in, "x.index.json")],
                       [os.path.join(d_in, f) for f in os.listdir(d_in)], os.path.join(d_in, "x.index.json"), "replace the input's shards")
        expect_failure(s, "%s shards onto existing files" % kind, ["strip-prefix", index_in, "-o", d_out],
                       [os.path.join(d_out, f) for f in os.listdir(d_out)], None, "exists")


def main():
    def body(s, _args):
        test_whole(s)
        test_pth_shards(s)
        test_metadata(s)
        test_sharded_strip(s)
        s.check(not [f for _, _, fs in os.walk(s.work) for f in fs if ".tmp" in f], "temporaries left")
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
