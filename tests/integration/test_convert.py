#!/usr/bin/python3
"""`convert` to safetensors and back, with real torch on the pth side and an independent reader written here
on the output side (the format's README: u64 header length, JSON header, raw little-endian bytes):
every dtype, tied weights (stored once, the alias in __metadata__), views and transposes (written
contiguous), empty and 0-dim tensors, a training checkpoint's state dict, --metadata; the header
padded to 8, __metadata__ first, tensors ordered by element size then name and tiling the buffer;
failures exit 2 and leave no file.

Usage: test_convert.py --tool PATH --work DIR
"""
import argparse
import collections
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_repair import schema_problems, suite_main  # noqa: E402

NAMES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16, "I8": torch.int8,
         "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool,
         "C64": torch.complex64}


class RunConfig:
    """A class of the training script: what a checkpoint carries beside its weights (unknown to scan)."""

    def __init__(self):
        self.lr = 0.1


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(20, 6)
        self.norm = torch.nn.BatchNorm1d(6)
        self.head = torch.nn.Linear(6, 20, bias=False)
        self.head.weight = self.embed.weight


def read_safetensors(path):
    """The independent reader: (header, {name: tensor}, raw bytes of the file)."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    text = data[8:8 + n]
    header = json.loads(text, object_pairs_hook=collections.OrderedDict)
    tensors = collections.OrderedDict()
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + end])
        dt = NAMES[e["dtype"]]
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8)
        tensors[name] = t.view(dt).reshape(e["shape"]) if raw else torch.zeros(e["shape"], dtype=dt)
    return header, tensors, data, n


def same_bits(a, b):
    a, b = a.contiguous(), b.contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and (
        a.numel() == 0 or torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def test_convert(s):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(6, 8, generator=g, dtype=torch.float64)
    sd = collections.OrderedDict()
    for name, dt in NAMES.items():
        if dt.is_complex:
            sd["t_" + name] = torch.complex(base.float(), -base.float())
        elif dt == torch.bool:
            sd["t_" + name] = base > 0
        elif dt.is_floating_point:
            sd["t_" + name] = base.to(dt)
        else:
            sd["t_" + name] = (base * 10).to(dt)
    emb = torch.randn(10, 4, generator=g)
    sd["embed.weight"] = emb
    sd["lm_head.weight"] = emb          # tied: same storage, same view
    sd["transposed"] = base.float().t()  # a view: written contiguous
    sd["slice"] = base.float()[2:5, 1:7]
    sd["empty"] = torch.zeros(0, 3)
    sd["scalar"] = torch.tensor(1.5)
    sd['odd "name"\\ \u00e9\t'] = base.float()[0].clone()  # a header key that needs JSON escapes
    src = s.path("model.pth")
    torch.save(sd, src)
    out = s.path("model.safetensors")
    r = s.run("convert", src, "-o", out, "--metadata", "source=test", "--json")
    if not s.check(r.returncode == 0, "convert: exit %d %s" % (r.returncode, r.stderr.strip())):
        return
    rep = json.loads(r.stdout)
    s.check(not schema_problems(rep), "convert JSON vs schema: %s" % schema_problems(rep))
    s.check(rep["verified"] and rep["deduplicated"] == [{"alias": "lm_head.weight", "kept": "embed.weight"}]
            and rep["made_contiguous"] == 2 and rep["bytes_written"] == os.path.getsize(out), "report: %s" % rep)
    header, tensors, data, n = read_safetensors(out)
    s.check((8 + n) % 8 == 0 and data[8 + n - 1:8 + n] in (b" ", b"}"), "header not padded to 8: %d" % n)
    s.check(list(header.keys())[0] == "__metadata__", "__metadata__ not first")
    s.check(header["__metadata__"] == {"format": "pt", "lm_head.weight": "embed.weight", "source": "test"},
            "metadata: %s" % header["__metadata__"])
    want_names = [k for k in sd if k != "lm_head.weight"]
    s.check(sorted(tensors) == sorted(want_names), "names: %s" % sorted(tensors))
    for k in want_names:
        s.check(k in tensors and same_bits(tensors[k], sd[k]), "%s: bytes differ from torch's" % k)
    # The tied weight stored once is its alias again to every command: verify and diff-keys against
    # the source find every key (lm_head.weight too), with the same content.
    r = s.run("verify", out, src, "--exact", "--json")
    s.check(r.returncode == 0 and json.loads(r.stdout)["findings"] == [], "verify OUT SRC --exact: exit %d %s" % (r.returncode, r.stdout[-300:]))
    r = s.run("diff-keys", out, src)
    s.check(r.returncode == 0, "diff-keys OUT SRC: exit %d %s" % (r.returncode, r.stdout[-300:]))
    # data order: larger elements first, then by name; offsets tile the buffer
    entries = [(k, e) for k, e in header.items() if k != "__metadata__"]
    order = sorted(entries, key=lambda kv: kv[1]["data_offsets"][0])
    sizes = [torch.tensor([], dtype=NAMES[e["dtype"]]).element_size() for _, e in order]
    s.check(all(sizes[i] >= sizes[i + 1] for i in range(len(sizes) - 1)), "not ordered by element size: %s" % sizes)
    at = 0
    for _, e in order:
        s.check(e["data_offsets"][0] == at, "gap or overlap at %d" % at)
        at = e["data_offsets"][1]
    s.check(8 + n + at == len(data), "buffer does not end at the end of the file")
    # our own reader agrees
    rc = s.run("verify", out, "--json")
    s.check(rc.returncode == 0, "verify of the output: exit %d" % rc.returncode)

    # Back to .pth: an OrderedDict torch.load(weights_only=True) reads, equal bit for bit, the tie restored.
    back = s.path("back.pth")
    r = s.run("convert", out, "-o", back, "--json")
    if s.check(r.returncode == 0, "safetensors → pth: exit %d %s" % (r.returncode, r.stderr.strip())):
        rep = json.loads(r.stdout)
        s.check(not schema_problems(rep) and rep["format"] == "pth" and rep["verified"], "pth report: %s" % rep)
        got = torch.load(back, weights_only=True)
        s.check(type(got) is collections.OrderedDict and sorted(got) == sorted(sd), "pth keys: %s" % sorted(got))
        for k in sd:
            s.check(k in got and same_bits(got[k], sd[k]), "%s differs after the round trip" % k)
        s.check(got["embed.weight"].data_ptr() == got["lm_head.weight"].data_ptr(), "tie not restored")
        import zipfile
        with zipfile.ZipFile(back) as z:
            s.check(z.testzip() is None and all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), "pth zip")
    # A real model through both conversions, loaded with strict=True.
    m = Tied()
    torch.save(m.state_dict(), s.path("tied.pth"))
    r1 = s.run("convert", s.path("tied.pth"), "-o", s.path("tied.safetensors"))
    r2 = s.run("convert", s.path("tied.safetensors"), "-o", s.path("tied.back.pth"))
    if s.check(r1.returncode == 0 and r2.returncode == 0, "tied model: %s %s" % (r1.stderr, r2.stderr)):
        fresh = Tied()
        try:
            fresh.load_state_dict(torch.load(s.path("tied.back.pth"), weights_only=True), strict=True)
            s.check(all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), m.state_dict().values())), "values")
        except Exception as e:  # noqa: BLE001
            s.check(False, "load_state_dict(strict=True) after the round trip: %s" % str(e).splitlines()[0])

    # A training checkpoint: its state dict only.
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}, s.path("train.pth"))
    r = s.run("convert", s.path("train.pth"), "-o", s.path("train.safetensors"), "--state-dict-key", "model")
    if s.check(r.returncode == 0, "training checkpoint: exit %d %s" % (r.returncode, r.stderr)):
        _, t, _, _ = read_safetensors(s.path("train.safetensors"))
        s.check(sorted(t) == ["bias", "weight"] and same_bits(t["weight"], model.weight.detach()), "training: %s" % sorted(t))

    # --weights-only: a training checkpoint's state dict alone, views and ties kept as views and ties.
    net = Tied()
    sdm = net.state_dict()
    sdm["view.t"] = sdm["embed.weight"].t()       # a transpose of a tied storage
    sdm["view.row"] = sdm["embed.weight"][3]      # an offset view
    opt = torch.optim.Adam(net.parameters())
    import argparse as _argparse
    torch.save({"epoch": 5, "model": sdm, "optimizer": opt.state_dict(), "args": _argparse.Namespace(lr=0.1)},
               s.path("train_full.pth"))
    r = s.run("convert", s.path("train_full.pth"), "--weights-only", "-o", s.path("weights.pth"), "--json")
    if s.check(r.returncode == 0, "--weights-only: exit %d %s" % (r.returncode, r.stderr.strip())):
        rep = json.loads(r.stdout)
        s.check(rep["dropped"] == ["epoch", "optimizer", "args"] and rep["verified"], "--weights-only report: %s" % rep)
        got = torch.load(s.path("weights.pth"), weights_only=True)
        s.check(list(got) == list(sdm), "--weights-only keys: %s" % list(got))
        for k, v in sdm.items():
            g = got.get(k)
            s.check(g is not None and same_bits(g, v) and g.stride() == v.stride() and g.storage_offset() == v.storage_offset(),
                    "--weights-only %s differs (or lost its view)" % k)
        ptr = got["embed.weight"].storage().data_ptr()
        s.check(all(got[k].storage().data_ptr() == ptr for k in ("head.weight", "view.t", "view.row")),
                "--weights-only: ties and views no longer share one storage")
    # What --weights-only leaves behind is said: the keys, and the globals off the allow-lists with them.
    torch.save({"model": sdm, "config": RunConfig()}, s.path("train_cfg.pth"))
    r = s.run("convert", s.path("train_cfg.pth"), "--weights-only", "-o", s.path("weights_cfg.pth"), "--json")
    if s.check(r.returncode == 0, "--weights-only with a class: exit %d %s" % (r.returncode, r.stderr.strip())):
        rep = json.loads(r.stdout)
        s.check(rep["dropped"] == ["config"] and rep["globals_dropped"] == ["__main__.RunConfig (unknown)"] and not schema_problems(rep),
                "--weights-only with a class: %s %s" % (rep["dropped"], rep["globals_dropped"]))
        text = s.run("convert", s.path("train_cfg.pth"), "--weights-only", "-o", s.path("weights_cfg2.pth"))
        s.check("not carried" in text.stdout and "__main__.RunConfig (unknown)" in text.stdout, "--weights-only text: %s" % text.stdout)

    # --dtype: floating-point tensors cast with torch's own rounding, bit for bit; integers and bools kept.
    cast_out = s.path("model.bf16.safetensors")
    r = s.run("convert", src, "-o", cast_out, "--dtype", "bfloat16", "--json")
    if s.check(r.returncode == 0, "--dtype bfloat16: exit %d %s" % (r.returncode, r.stderr.strip())):
        rep = json.loads(r.stdout)
        _, t, _, _ = read_safetensors(cast_out)
        floating = [k for k in want_names if sd[k].is_floating_point() and sd[k].dtype != torch.bfloat16]
        s.check(rep["verified"] and rep["cast"] == len(floating), "cast report: %s" % rep)
        for k in want_names:
            want = sd[k].to(torch.bfloat16) if sd[k].is_floating_point() else sd[k]
            s.check(k in t and same_bits(t[k], want), "--dtype bfloat16: %s is not torch's .to(bfloat16)" % k)
    r = s.run("convert", s.path("train_full.pth"), "--weights-only", "--dtype", "float16", "-o", s.path("weights16.pth"))
    if s.check(r.returncode == 0, "--weights-only --dtype float16: exit %d %s" % (r.returncode, r.stderr.strip())):
        got = torch.load(s.path("weights16.pth"), weights_only=True)
        for k, v in sdm.items():
            want = v.to(torch.float16) if v.is_floating_point() else v
            s.check(same_bits(got[k], want) and got[k].stride() == v.stride(), "float16 %s differs from torch's .to()" % k)
        s.check(got["norm.num_batches_tracked"].dtype == torch.int64, "an integer buffer was cast")
        s.check(got["view.t"].storage().data_ptr() == got["embed.weight"].storage().data_ptr(), "cast views lost their storage")

    # --max-shard-size: Hugging Face's shard names and index; the shards reassemble to the same tensors.
    shard_out = s.path("sharded/model.safetensors")
    os.makedirs(os.path.dirname(shard_out), exist_ok=True)
    r = s.run("convert", src, "-o", shard_out, "--max-shard-size", "300B", "--json")
    if s.check(r.returncode == 0, "--max-shard-size: exit %d %s" % (r.returncode, r.stderr.strip())):
        rep = json.loads(r.stdout)
        shards = rep["outputs"][:-1]
        s.check(len(shards) > 2 and rep["outputs"][-1] == shard_out + ".index.json"
                and all(os.path.basename(p) == "model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i, p in enumerate(shards)),
                "shard names: %s" % rep["outputs"])
        with open(shard_out + ".index.json") as f:
            index = json.load(f)
        merged = {}
        for p in shards:
            h, t, _, _ = read_safetensors(p)
            size = sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in h.items() if k != "__metadata__")
            s.check(size <= 300 or len(t) == 1, "%s holds %d bytes in %d tensors" % (p, size, len(t)))
            for k, v in t.items():
                s.check(index["weight_map"].get(k) == os.path.basename(p), "index places %s wrongly" % k)
                merged[k] = v
        s.check(sorted(merged) == sorted(want_names) and all(same_bits(merged[k], sd[k]) for k in want_names),
                "the shards do not reassemble to the input")
        s.check(index["metadata"]["total_size"] == sum(v.numel() * v.element_size() for k, v in sd.items() if k != "lm_head.weight"),
                "index total_size %s" % index["metadata"])
        s.check(sorted(index["weight_map"]) == sorted(want_names), "weight_map keys")
        s.check(not os.path.exists(shard_out), "a single-file output was written too")
        # The index (or its directory) is one checkpoint to every command, and is checked.
        index_path = shard_out + ".index.json"
        for target in (index_path, os.path.dirname(shard_out)):
            rc = s.run("inspect", target, "--json")
            j = json.loads(rc.stdout) if rc.returncode == 0 else {}
            # lm_head.weight, the alias in its shard's __metadata__, is an entry of embed.weight's tensor again.
            s.check(rc.returncode == 0 and sorted(t["state_dict_key"] for t in j["tensors"]) == sorted(sd),
                    "inspect %s: exit %d %s" % (target, rc.returncode, rc.stderr))
        rc = s.run("verify", index_path, out, "--exact")
        s.check(rc.returncode == 0, "verify of the shards against the single file: exit %d %s" % (rc.returncode, rc.stdout[-400:]))
        rc = s.run("diff-keys", index_path, out)
        s.check(rc.returncode == 0, "diff-keys of the shards: exit %d" % rc.returncode)
        r2 = s.run("convert", index_path, "-o", s.path("joined.pth"))
        if s.check(r2.returncode == 0, "shards → pth: exit %d %s" % (r2.returncode, r2.stderr)):
            joined = torch.load(s.path("joined.pth"), weights_only=True)
            s.check(all(same_bits(joined[k], sd[k]) for k in want_names), "shards → pth differ")
        # A broken index: a tensor moved to the wrong shard, a wrong total_size, a missing shard.
        broken_dir = s.path("broken")
        shutil.copytree(os.path.dirname(shard_out), broken_dir)
        bi = os.path.join(broken_dir, "model.safetensors.index.json")
        with open(bi) as f:
            idx = json.load(f)
        per_shard = collections.Counter(idx["weight_map"].values())
        moved = sorted(k for k, v in idx["weight_map"].items() if per_shard[v] > 1)[0]  # its shard stays named
        other = [v for v in idx["weight_map"].values() if v != idx["weight_map"][moved]][0]
        idx["weight_map"][moved] = other
        idx["weight_map"]["ghost.weight"] = other  # a name no shard holds
        idx["metadata"]["total_size"] += 1
        with open(bi, "w") as f:
            json.dump(idx, f)
        rc = s.run("verify", bi, "--json")
        kinds = sorted({f["kind"] for f in json.loads(rc.stdout).get("findings", [])}) if rc.stdout else []
        s.check(rc.returncode == 1 and kinds == ["index_missing_tensor", "index_total_size", "index_wrong_shard"],
                "broken index: exit %d %s" % (rc.returncode, kinds))
        os.remove(os.path.join(broken_dir, shards[-1].split("/")[-1]))
        rc = s.run("inspect", bi)
        s.check(rc.returncode == 2 and "does not exist" in rc.stderr and len(rc.stderr.strip().splitlines()) == 1,
                "missing shard: exit %d %s" % (rc.returncode, rc.stderr))
    r = s.run("convert", src, "-o", s.path("one.safetensors"), "--max-shard-size", "10GB")
    s.check(r.returncode == 0 and os.path.exists(s.path("one.safetensors")) and not os.path.exists(s.path("one.safetensors.index.json")),
            "one shard is a plain file: exit %d" % r.returncode)

    # Failures: exit 2, one line, no file.
    torch.save({"z": torch.zeros(2, dtype=torch.complex128)}, s.path("c128.pth"))
    for what, args, output in [
        ("complex128", ["convert", s.path("c128.pth"), "-o", s.path("c128.safetensors")], s.path("c128.safetensors")),
        ("exists", ["convert", src, "-o", out], None),
        ("bad --dtype", ["convert", src, "-o", s.path("i8.safetensors"), "--dtype", "int8"], s.path("i8.safetensors")),
        ("bad size", ["convert", src, "-o", s.path("bs.safetensors"), "--max-shard-size", "2 lightyears"], s.path("bs.safetensors")),
        ("unknown extension", ["convert", src, "-o", s.path("x.data")], s.path("x.data")),
        ("missing directory", ["convert", src, "-o", s.path("no/dir/x.safetensors")], s.path("no/dir/x.safetensors")),
    ]:
        r = s.run(*args)
        s.check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == "",
                "%s: exit %d %r" % (what, r.returncode, r.stderr))
        if output:
            s.check(not os.path.exists(output), "%s: output written" % what)
    s.check(not [f for f in os.listdir(s.work) if f.endswith(".tmp")], "temporaries left")


def main():
    return suite_main(lambda s, _args: test_convert(s))


if __name__ == "__main__":
    sys.exit(main())
