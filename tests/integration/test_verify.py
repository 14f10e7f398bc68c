#!/usr/bin/python3
"""`verify` with real torch on both ends.

- Fingerprints equal what torch computes for the same tensors (t.double().mean(), .std(), .min(),
  .max(), .abs().mean(), .norm(); torch.view_as_real for complex), for every dtype, views, transposes,
  slices with offsets, expanded (stride 0), 0-dim, empty and NaN/Inf tensors; a view and its
  contiguous copy hash the same.
- The ATen oracle (oracle_check) agrees with the core on every tensor of every fixture of
  tests/fixtures/make_fixtures.py and of this test.
- A file and its copy verify clean; one element changed by 1e-3 in a 1,000-element layer is caught
  with the right key; a CRC-corrupted record, a truncated file and a short storage record are each
  reported; NaN/Inf injected by torch are found; two rank files equal and differing (--exact); a
  TorchScript model as the reference matches its own state dict and catches a renamed layer; an
  optimizer state that belongs to another model is reported.
- safetensors files written by an independent writer in this test read with the right dtypes,
  shapes and metadata, fingerprint like torch's numbers, and hash equal to the same tensors saved
  by torch.save.
- inspect and verify against a fingerprint map no LibTorch library (LD_DEBUG=files lists every
  library the process loads, dlopen'ed ones included); diff-keys against a TorchScript model does.

Usage: test_verify.py --tool PATH --oracle PATH --work DIR
"""
import argparse
import collections
import json
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_repair import Suite, schema_problems, suite_main  # noqa: E402  (one harness for the integration tests)

STATS = ["mean", "std", "min", "max", "abs_mean", "l2"]


class Custom:
    def __init__(self, depth):
        self.depth = depth


def torch_stats(t):
    """What torch says, in float64, with the fingerprint's conventions."""
    x = torch.view_as_real(t.reshape(1) if t.dim() == 0 else t) if t.is_complex() else t
    d = x.detach().to(torch.float64).reshape(-1)
    n = d.numel()
    out = {"count": n, "nan": int(d.isnan().sum()), "inf": int(d.isinf().sum())}
    if n == 0:
        return dict(out, **{k: None for k in STATS})
    out.update(mean=d.mean().item(), min=d.min().item(), max=d.max().item(),
               abs_mean=d.abs().mean().item(), l2=d.norm().item(),
               std=d.std().item() if n > 1 else None)
    return out


def close(got, want):
    if want is None or got is None:
        return got is None and want is None
    if isinstance(got, str):
        got = float(got)
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= 1e-12 or abs(got - want) <= 1e-9 * abs(want)


def dtype_cases():
    g = torch.Generator().manual_seed(5)
    base = torch.randn(6, 7, generator=g, dtype=torch.float64) * 3 + 1
    sd = collections.OrderedDict()
    for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        name = str(dt).split(".")[1]
        sd[name] = base.to(dt)
        sd[name + "_t"] = base.to(dt).t()                      # a transpose (a view)
        sd[name + "_slice"] = base.to(dt)[1:5, 2:6]           # an offset, strided view
        sd[name + "_step"] = base.to(dt)[::2, ::3]
    sd["contig_of_t"] = base.float().t().contiguous()         # hashes as float32_t does
    for dt in [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]:
        sd[str(dt).split(".")[1]] = (base * 10).to(dt)
    sd["big_int64"] = torch.tensor([2**62, -2**61, 7], dtype=torch.int64)
    sd["bool"] = base > 1
    sd["complex64"] = torch.complex(base.float(), -base.float())
    sd["complex128_t"] = torch.complex(base, base * 2).t()
    sd["expanded"] = torch.arange(5.0).expand(4, 5)           # stride 0
    sd["scalar"] = torch.tensor(3.25)
    sd["one"] = torch.tensor([2.5])
    sd["empty"] = torch.zeros(0, 4)
    sd["nan_inf"] = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    sd["inf_only"] = torch.tensor([1.0, float("inf"), 3.0])
    sd["both_inf"] = torch.tensor([float("-inf"), float("inf")])
    sd["half_extremes"] = torch.tensor([65504.0, -65504.0, 6e-8, 0.0], dtype=torch.float16)
    sd["large_mean"] = torch.full((1000,), 1e6, dtype=torch.float64) + torch.arange(1000) * 1e-3
    return sd


def run_json(s, *args):
    r = s.run(*args, "--json")
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return r.returncode, {"stderr": r.stderr}
    s.check(not schema_problems(j), "%s JSON vs schema: %s" % (args[0], schema_problems(j)))
    return r.returncode, j


def test_stats(s):
    sd = dtype_cases()
    path = s.path("dtypes.pth")
    torch.save(sd, path)
    rc, j = run_json(s, "verify", path)
    s.check(rc == 1, "dtypes: exit %d (NaN/Inf are findings)" % rc)
    rows = {t["key"]: t for t in j.get("tensors", [])}
    s.check(set(rows) == set(sd), "dtypes: keys %s" % sorted(set(sd) ^ set(rows)))
    for k, t in sd.items():
        if k not in rows:
            continue
        want = torch_stats(t)
        for f in STATS + ["count", "nan", "inf"]:
            s.check(close(rows[k][f], want[f]) if f in STATS else rows[k][f] == want[f],
                    "%s.%s = %r, torch says %r" % (k, f, rows[k][f], want[f]))
    s.check(rows["contig_of_t"]["hash"] == rows["float32_t"]["hash"], "a view and its contiguous copy hash differently")
    s.check(rows["float32"]["hash"] != rows["float32_t"]["hash"], "a matrix and its transpose hash the same")
    kinds = sorted({(f["kind"], f["key"]) for f in j.get("findings", [])})
    s.check(("nan", "nan_inf") in kinds and ("inf", "inf_only") in kinds and ("inf", "both_inf") in kinds
            and all(k in ("nan", "inf") for k, _ in kinds), "dtypes: findings %s" % kinds)


def test_oracle(s, oracle, fixtures_dir):
    files = sorted(glob_pth(fixtures_dir)) + [s.path("dtypes.pth")]
    r = subprocess.run([oracle] + files, capture_output=True, text=True)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr
    s.check(r.returncode == 0, "ATen oracle: %s\n%s" % (last, r.stdout[-2000:]))
    print("oracle:", last)


def glob_pth(d):
    return [os.path.join(d, f) for f in os.listdir(d) if f.endswith((".pth", ".pt", ".ckpt", ".bin"))]


def net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 40),
                         nn.Linear(40, 25))


def test_integrity_and_drift(s):
    m = net(1)
    orig = s.path("model.pth")
    torch.save(m.state_dict(), orig)
    shutil.copy(orig, s.path("copy.pth"))
    fp = s.path("model.fp.json")
    rc, j = run_json(s, "verify", orig, "--write-fingerprint", fp)
    s.check(rc == 0 and j["ok"] and j["records_checked"] == len(zipfile.ZipFile(orig).infolist()),
            "clean file: exit %d %s" % (rc, j.get("findings")))
    with open(fp) as f:
        fpj = json.load(f)
    s.check(not schema_problems(fpj), "fingerprint vs schema: %s" % schema_problems(fpj))
    s.check(len(fpj["tensors"]) == len(m.state_dict()), "fingerprint rows %d" % len(fpj["tensors"]))
    for ref in (fp, orig):
        rc, j = run_json(s, "verify", s.path("copy.pth"), ref)
        s.check(rc == 0 and all(t["status"] == "ok" for t in j["tensors"]), "copy vs %s: exit %d" % (ref, rc))
    rc, _ = run_json(s, "verify", s.path("copy.pth"), orig, "--exact")
    s.check(rc == 0, "copy --exact: exit %d" % rc)
    # A fingerprint is a key manifest too.
    rc, j = run_json(s, "diff-keys", s.path("copy.pth"), fp)
    s.check(rc == 0 and j.get("counts", {}).get("matched") == len(m.state_dict()), "diff-keys against a fingerprint: exit %d" % rc)
    torch.save(nn.DataParallel(m).state_dict(), s.path("ddp.pth"))
    rc, j = run_json(s, "diff-keys", s.path("ddp.pth"), fp)
    s.check(rc == 1 and (j.get("prefix_fix") or {}).get("strip") == "module.", "ddp vs fingerprint: %s" % j.get("prefix_fix"))
    r = s.run("verify", s.path("ddp.pth"), fp)
    s.check(r.returncode == 1 and "diff-keys" in r.stdout.splitlines()[-1], "verify with other keys points at diff-keys:\n" + r.stdout[-300:])

    # One element of the 1,000-element layer (Linear 40→25) moved by 1e-3.
    sd = m.state_dict()
    s.check(sd["4.weight"].numel() == 1000, "layer size")
    sd["4.weight"] = sd["4.weight"].clone()
    sd["4.weight"][7, 3] += 1e-3
    torch.save(sd, s.path("nudged.pth"))
    rc, j = run_json(s, "verify", s.path("nudged.pth"), fp)
    drift = [f for f in j.get("findings", []) if f["kind"] == "drift"]
    s.check(rc == 1 and [f["key"] for f in drift] == ["4.weight"], "one nudged element: exit %d %s" % (rc, drift))
    rows = {t["key"]: t for t in j.get("tensors", [])}
    s.check(rows.get("4.weight", {}).get("status") == "drift" and rows.get("4.bias", {}).get("status") == "ok",
            "nudged statuses: %s" % {k: v.get("status") for k, v in rows.items()})

    # A byte flipped inside a storage record: the CRC catches it.
    with zipfile.ZipFile(orig) as z:
        info = {i.filename: i for i in z.infolist()}
    rec = "model/data/0"
    with open(orig, "rb") as f:
        data = bytearray(f.read())
    i = info[rec]
    start = i.header_offset + 30 + len(i.filename.encode()) + int.from_bytes(data[i.header_offset + 28:i.header_offset + 30], "little")
    data[start + 5] ^= 0x40
    with open(s.path("crc.pth"), "wb") as f:
        f.write(data)
    rc, j = run_json(s, "verify", s.path("crc.pth"))
    s.check(rc == 1 and [(f["kind"], f["key"]) for f in j.get("findings", [])] == [("crc_mismatch", "model/data/0")],
            "CRC: exit %d %s" % (rc, j.get("findings")))
    # Truncated: exit 2, one line naming the file.
    with open(s.path("truncated.pth"), "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    r = s.run("verify", s.path("truncated.pth"))
    s.check(r.returncode == 2 and "truncated.pth" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
            "truncated: exit %d %s" % (r.returncode, r.stderr))
    # A short storage record (a consistent zip whose data/1 lost bytes).
    with zipfile.ZipFile(orig) as zin, zipfile.ZipFile(s.path("short.pth"), "w") as zout:
        for item in zin.infolist():
            b = zin.read(item.filename)
            zout.writestr(item.filename, b[:-4] if item.filename == "model/data/1" else b)
    rc, j = run_json(s, "verify", s.path("short.pth"))
    s.check(rc == 1 and any(f["kind"] == "record_size" and f["key"] == "model/data/1" for f in j.get("findings", [])),
            "short record: exit %d %s" % (rc, j.get("findings")))

    # NaN and Inf written by torch.
    sd = net(2).state_dict()
    sd["0.weight"][0, 0, 0, 0] = float("nan")
    sd["3.bias"][1] = float("-inf")
    torch.save(sd, s.path("nan.pth"))
    rc, j = run_json(s, "verify", s.path("nan.pth"))
    kinds = {(f["kind"], f["key"]) for f in j.get("findings", [])}
    s.check(rc == 1 and kinds == {("nan", "0.weight"), ("inf", "3.bias")}, "NaN/Inf: exit %d %s" % (rc, kinds))

    # A custom class in the pickle: torch.load would import and run it; weights_only would refuse it.
    torch.save({"model": net(6).state_dict(), "config": Custom(3)}, s.path("custom.pth"))
    rc, j = run_json(s, "verify", s.path("custom.pth"))
    s.check(rc == 1 and [(f["kind"], f["key"]) for f in j.get("findings", [])] == [("unsafe_global", "__main__.Custom")],
            "custom class: exit %d %s" % (rc, j.get("findings")))

    # Two DDP ranks: equal, then one replica differs.
    torch.save(m.state_dict(), s.path("rank0.pth"))
    torch.save(m.state_dict(), s.path("rank1.pth"))
    rc, _ = run_json(s, "verify", s.path("rank0.pth"), s.path("rank1.pth"), "--exact")
    s.check(rc == 0, "equal ranks: exit %d" % rc)
    sd = m.state_dict()
    sd["1.running_mean"] = sd["1.running_mean"] + 1e-7
    torch.save(sd, s.path("rank1.pth"))
    rc, j = run_json(s, "verify", s.path("rank0.pth"), s.path("rank1.pth"), "--exact")
    s.check(rc == 1 and [f["key"] for f in j["findings"]] == ["1.running_mean"], "differing ranks: exit %d %s" % (rc, j.get("findings")))


def stepped(params):
    """An Adam over `params` (or AdamW param groups) after one step with all-ones gradients."""
    opt = torch.optim.AdamW(params) if params and isinstance(params[0], dict) else torch.optim.Adam(params)
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    opt.step()
    return opt


def optimizer_verdict(s, name, obj):
    """verify of torch.save(obj): exit code, the JSON, its optimizer_mismatch findings."""
    torch.save(obj, s.path(name))
    rc, j = run_json(s, "verify", s.path(name))
    return rc, j, [f for f in j.get("findings", []) if f["kind"] == "optimizer_mismatch"]


def decay_split(model):
    """Hugging Face's param groups: matrices with weight decay, the rest (biases, norms) without."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]


def test_torchscript_and_optimizer(s):
    m = net(3)
    torch.jit.save(torch.jit.script(m), s.path("model.ts.pt"))
    torch.save(m.state_dict(), s.path("own.pth"))
    rc, j = run_json(s, "verify", s.path("own.pth"), s.path("model.ts.pt"))
    s.check(rc == 0 and len(j.get("tensors", [])) == len(m.state_dict()), "own state dict vs its TorchScript model: exit %d %s"
            % (rc, j.get("findings", j)))
    sd = collections.OrderedDict((("head." + k[2:]) if k.startswith("4.") else k, v) for k, v in m.state_dict().items())
    torch.save(sd, s.path("renamed.pth"))
    rc, j = run_json(s, "verify", s.path("renamed.pth"), s.path("model.ts.pt"))
    kinds = sorted((f["kind"], f["key"]) for f in j.get("findings", []))
    s.check(rc == 1 and kinds == [("extra", "head.bias"), ("extra", "head.weight"), ("missing", "4.bias"), ("missing", "4.weight")],
            "renamed layer vs TorchScript: exit %d %s" % (rc, kinds))

    # An optimizer state taken from another model.
    other = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 3))
    model = net(4)
    opt_other = torch.optim.Adam(other.parameters())
    other(torch.randn(2, 8)).sum().backward()
    opt_other.step()
    opt_good = torch.optim.Adam(model.parameters())
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt_good.step()
    torch.save({"model": model.state_dict(), "optimizer": opt_good.state_dict(), "epoch": 2}, s.path("train_ok.pth"))
    rc, j = run_json(s, "verify", s.path("train_ok.pth"))
    s.check(rc == 0, "matching optimizer: exit %d %s" % (rc, j.get("findings")))
    # --all: every tensor by its key, the optimizer's state included, equal to torch's.
    rc, j = run_json(s, "verify", s.path("train_ok.pth"), "--all")
    rows = {t["key"]: t for t in j.get("tensors", [])}
    exp_avg = opt_good.state_dict()["state"][0]["exp_avg"]
    s.check(rc == 0 and "optimizer.state.0.exp_avg" in rows and "model.0.weight" in rows
            and close(rows["optimizer.state.0.exp_avg"]["mean"], exp_avg.double().mean().item()),
            "--all: exit %d, keys %s" % (rc, sorted(rows)[:6]))
    # Same parameter count, other shapes: 4 params of `other` vs the 8 of `model` would be a count
    # mismatch; give it a model with the same number of parameters and other shapes.
    twin = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 30), nn.Linear(30, 25))
    sd = model.state_dict()
    rc, j, mism = optimizer_verdict(s, "train_twin.pth", {"model": sd, "optimizer": stepped(list(twin.parameters())).state_dict()})
    s.check(rc == 1 and mism and "3.weight" in mism[0]["message"], "optimizer of another model: exit %d %s" % (rc, mism))
    # Fewer optimizer parameters than the model has: frozen layers (the first conv and its BN left
    # out) are legal, no finding; another model's 4 parameters, whose shapes are not the model's in
    # order, are a finding.
    trainable = [p for n, p in model.named_parameters() if not n.startswith(("0.", "1."))]
    rc, j, mism = optimizer_verdict(s, "train_frozen.pth", {"model": sd, "optimizer": stepped(trainable).state_dict()})
    s.check(rc == 0, "optimizer without the frozen layers: exit %d %s" % (rc, j.get("findings")))
    rc, j, mism = optimizer_verdict(s, "train_fewer.pth", {"model": sd, "optimizer": opt_other.state_dict()})
    s.check(rc == 1 and mism and "16×8" in mism[0]["message"], "another model's smaller optimizer: exit %d %s" % (rc, mism))
    # Hugging Face's split, each group in model order. torch numbers group 0's first, so state 1 is
    # not the model's parameter 1.
    opt_split = stepped(decay_split(model))
    rc, j, mism = optimizer_verdict(s, "train_split.pth", {"model": sd, "optimizer": opt_split.state_dict()})
    s.check(rc == 0, "decay / no-decay param groups: exit %d %s" % (rc, j.get("findings")))
    rc, j, mism = optimizer_verdict(s, "train_split_twin.pth", {"model": sd, "optimizer": stepped(decay_split(twin)).state_dict()})
    s.check(rc == 1 and mism and "param group" in mism[0]["message"], "another model's split optimizer: exit %d %s" % (rc, mism))
    # A file holding only an optimizer's state dict: nothing to fit it to, no finding.
    rc, j, mism = optimizer_verdict(s, "optimizer_only.pth", opt_split.state_dict())
    s.check(rc == 0, "a bare optimizer state dict: exit %d %s" % (rc, j.get("findings")))
    # More optimizer parameters than the model has: it belongs to another model.
    bigger = nn.Sequential(net(5), nn.Linear(25, 2))
    opt_big = torch.optim.SGD(bigger.parameters(), lr=0.1, momentum=0.9)
    for p in bigger.parameters():
        p.grad = torch.ones_like(p)
    opt_big.step()
    rc, j, mism = optimizer_verdict(s, "train_more.pth", {"model": sd, "optimizer": opt_big.state_dict()})
    s.check(rc == 1 and len(mism) == 1 and "10 parameters" in mism[0]["message"], "optimizer with more params: %s" % mism)

ST_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int8: "I8", torch.uint8: "U8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
             torch.bool: "BOOL", torch.complex64: "C64"}


def write_safetensors(path, tensors, metadata):
    """An independent safetensors writer (the format's README): header JSON padded to 8, raw bytes."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def test_safetensors_read(s):
    g = torch.Generator().manual_seed(9)
    base = torch.randn(5, 6, generator=g, dtype=torch.float64)
    tensors = collections.OrderedDict()
    for dt in ST_DTYPES:
        name = "t_" + str(dt).split(".")[1]
        if dt.is_complex:
            tensors[name] = torch.complex(base.float(), base.float() * 2)
        elif dt == torch.bool:
            tensors[name] = base > 0
        elif dt.is_floating_point:
            tensors[name] = base.to(dt)
        else:
            tensors[name] = (base * 20).to(dt)
    tensors["empty"] = torch.zeros(0, 3)
    tensors["scalar"] = torch.tensor(2.5)
    st = s.path("all.safetensors")
    write_safetensors(st, tensors, {"format": "pt", "source": "test"})
    pth = s.path("all.pth")
    torch.save(tensors, pth)
    rc, j = run_json(s, "inspect", st)
    got = [(t["key"], t["dtype"], t["shape"]) for t in j.get("tensors", [])]
    want = [(k, str(v.dtype).split(".")[1].replace("bool", "bool"), list(v.shape)) for k, v in tensors.items()]
    s.check(rc == 0 and j.get("format") == "safetensors" and got == want and j.get("metadata") == {"format": "pt", "source": "test"},
            "safetensors inspect: exit %d %s\n%s" % (rc, got[:3], want[:3]))
    rc, j = run_json(s, "verify", st)
    rows = {t["key"]: t for t in j.get("tensors", [])}
    s.check(rc == 0 and j.get("records_checked") == 0, "safetensors verify: exit %d %s" % (rc, j.get("findings")))
    for k, t in tensors.items():
        want = torch_stats(t)
        for f in STATS + ["count"]:
            s.check(k in rows and (close(rows[k][f], want[f]) if f in STATS else rows[k][f] == want[f]),
                    "safetensors %s.%s = %r, torch says %r" % (k, f, rows.get(k, {}).get(f), want[f]))
    rc, j = run_json(s, "verify", st, pth, "--exact")
    s.check(rc == 0, "safetensors vs the same tensors by torch.save, --exact: exit %d %s" % (rc, j.get("findings")))
    rc, j = run_json(s, "diff-keys", st, pth)
    s.check(rc == 0, "diff-keys safetensors vs pth: exit %d" % rc)
    # strip-prefix of safetensors: the header renamed, the buffer copied, the metadata kept.
    r = s.run("strip-prefix", st, "--add-prefix", "module.", "-o", s.path("x.safetensors"))
    if s.check(r.returncode == 0, "strip-prefix --add-prefix of safetensors: exit %d %s" % (r.returncode, r.stderr)):
        r = s.run("strip-prefix", s.path("x.safetensors"), "-o", s.path("y.safetensors"))
        s.check(r.returncode == 0, "strip-prefix of safetensors: exit %d %s" % (r.returncode, r.stderr))
        rc, j = run_json(s, "inspect", s.path("x.safetensors"))
        s.check([t["key"] for t in j.get("tensors", [])] == ["module." + k for k in tensors] and j.get("metadata") == {"format": "pt", "source": "test"},
                "renamed safetensors: %s" % [t["key"] for t in j.get("tensors", [])][:3])
        rc, _ = run_json(s, "verify", s.path("y.safetensors"), st, "--exact")
        s.check(rc == 0, "strip-prefix round trip of safetensors differs: exit %d" % rc)
        def parts(path):
            with open(path, "rb") as f:
                data = f.read()
            n = int.from_bytes(data[:8], "little")
            return json.loads(data[8:8 + n], object_pairs_hook=collections.OrderedDict), data[8 + n:]
        (ha, da), (hb, db) = parts(st), parts(s.path("y.safetensors"))
        meta_a, meta_b = ha.pop("__metadata__"), hb.pop("__metadata__")  # ours goes first in the header
        s.check(list(ha.items()) == list(hb.items()) and meta_a == meta_b and da == db,
                "add then strip is not the identity on a safetensors file (same header entries in order, same buffer)")


def libtorch_loaded(s, *args):
    env = dict(os.environ, LD_DEBUG="files")
    r = subprocess.run([s.tool] + list(args), capture_output=True, text=True, env=env)
    return r.returncode, any("libtorch" in line and "file=" in line for line in r.stderr.splitlines())


def test_no_libtorch(s):
    fp = s.path("model.fp.json")
    for args in (["inspect", s.path("model.pth")], ["verify", s.path("model.pth")], ["verify", s.path("copy.pth"), fp],
                 ["diff-keys", s.path("model.pth"), s.path("copy.pth")],
                 ["strip-prefix", s.path("model.pth"), "--add-prefix", "module.", "--dry-run"]):
        rc, loaded = libtorch_loaded(s, *args)
        s.check(rc == 0 and not loaded, "%s: exit %d, LibTorch mapped: %s" % (args[0], rc, loaded))
    # A cast loads it (the check must be able to see it); a TorchScript reference is read by the
    # helper ckpt-torch-load in a process of its own, so the tool itself still maps none.
    rc, loaded = libtorch_loaded(s, "convert", s.path("model.pth"), "-o", s.path("cast.pth"), "--dtype", "bfloat16",
                                 "--weights-only", "--force")
    s.check(rc == 0 and loaded, "convert --dtype should load LibTorch (the check must be able to see it)")
    rc, loaded = libtorch_loaded(s, "diff-keys", s.path("own.pth"), s.path("model.ts.pt"))
    s.check(rc == 0 and not loaded, "diff-keys against TorchScript: exit %d, LibTorch mapped in the tool: %s" % (rc, loaded))
    # Without the backend beside the binary: a clear one-line error naming the file, exit 2; the
    # commands that do not need it still work.
    lonely = os.path.join(s.work, "no-backend")
    os.makedirs(lonely, exist_ok=True)
    shutil.copy(s.tool, os.path.join(lonely, "ckpt-tool"))
    env = {k: v for k, v in os.environ.items() if k != "CKPT_TORCH_BACKEND"}
    r = subprocess.run([os.path.join(lonely, "ckpt-tool"), "verify", s.path("own.pth"), s.path("model.ts.pt")],
                       capture_output=True, text=True, env=env)
    s.check(r.returncode == 2 and "model.ts.pt" in r.stderr and "LibTorch backend" in r.stderr
            and "libtorch-dev" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
            "missing backend: exit %d %r" % (r.returncode, r.stderr))
    r = subprocess.run([os.path.join(lonely, "ckpt-tool"), "verify", s.path("own.pth")], capture_output=True, text=True, env=env)
    s.check(r.returncode == 0, "verify without the backend: exit %d %s" % (r.returncode, r.stderr))


def test_what_people_read(s):
    """The answers of issue 23, each on files torch wrote, checked against torch's own numbers."""
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.Linear(16, 4))
    sd = m.state_dict()
    orig, bf16 = s.path("w_orig.pth"), s.path("w_bf16.pth")
    torch.save(sd, orig)
    torch.save({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()}, bf16)
    floats = [k for k, v in sd.items() if v.is_floating_point()]
    # A bfloat16 copy passes at --rtol 1e-2, compared after the cast, and the change is said once.
    rc, j = run_json(s, "verify", bf16, orig, "--rtol", "1e-2")
    s.check(rc == 0 and j.get("findings") == [] and len(j.get("notes", [])) == 1
            and j["notes"][0].startswith("%d tensors changed dtype, float32 → bfloat16 (%s" % (len(floats), floats[0])),
            "bf16 copy at --rtol 1e-2: exit %d %s %s" % (rc, j.get("findings"), j.get("notes")))
    r = s.run("verify", bf16, orig, "--rtol", "1e-2")
    s.check(r.returncode == 0 and r.stdout.count("note: ") == 1 and "changed dtype" in r.stdout, "bf16 text: %r" % r.stdout)
    # ... and not at 1e-4 (bfloat16 keeps 8 bits), each drift naming the cast; --exact: each a change.
    rc, j = run_json(s, "verify", bf16, orig, "--rtol", "1e-4")
    s.check(rc == 1 and j["findings"] and all(f["kind"] == "drift" and f["message"].endswith("(dtype float32 → bfloat16)") for f in j["findings"]),
            "bf16 copy at --rtol 1e-4: exit %d %s" % (rc, j.get("findings", [])[:2]))
    rc, j = run_json(s, "verify", bf16, orig, "--exact")
    s.check(rc == 1 and sorted(f["key"] for f in j["findings"] if f["kind"] == "changed") == sorted(floats),
            "bf16 --exact: exit %d %s" % (rc, j.get("findings", [])[:2]))

    # A transposed square weight keeps every statistic: within the tolerance, a note that the bytes
    # differ (the fingerprint's hash says so); --exact makes it a change.
    fp = s.path("w_orig.fp.json")
    r = s.run("verify", orig, "--write-fingerprint", fp)
    s.check(r.returncode == 0, "write fingerprint: %d %s" % (r.returncode, r.stderr))
    t = collections.OrderedDict((k, v.clone()) for k, v in sd.items())
    t["0.weight"] = t["0.weight"].t().contiguous()
    transposed = s.path("w_transposed.pth")
    torch.save(t, transposed)
    rc, j = run_json(s, "verify", transposed, fp)
    s.check(rc == 0 and j.get("findings") == [] and len(j.get("notes", [])) == 1
            and j["notes"][0].startswith("1 tensor is within the tolerance but its bytes differ (0.weight)"),
            "transposed vs fingerprint: exit %d %s %s" % (rc, j.get("findings"), j.get("notes")))
    rc, j = run_json(s, "verify", transposed, fp, "--exact")
    s.check(rc == 1 and [(f["kind"], f["key"]) for f in j["findings"]] == [("changed", "0.weight")], "transposed --exact: %s" % j.get("findings"))

    # NaN and Inf: where the first one is, as torch indexes it.
    n = collections.OrderedDict((k, v.clone()) for k, v in sd.items())
    n["2.weight"][3, 7] = float("nan")
    n["2.weight"][1, 9] = float("nan")
    n["0.weight"][5, 2] = float("-inf")
    bad = s.path("w_nan.pth")
    torch.save(n, bad)
    rc, j = run_json(s, "verify", bad)
    msgs = {f["kind"]: f["message"] for f in j.get("findings", [])}
    first_nan = [int(i) for i in n["2.weight"].isnan().nonzero()[0]]
    first_inf = [int(i) for i in n["0.weight"].isinf().nonzero()[0]]
    s.check(rc == 1 and msgs.get("nan") == "2.weight holds 2 NaN of 64 values, the first at [%d, %d]" % tuple(first_nan)
            and msgs.get("inf") == "0.weight holds 1 Inf of 256 values, the first at [%d, %d]" % tuple(first_inf),
            "NaN/Inf first index (torch: %s, %s): %s" % (first_nan, first_inf, msgs))

    # BatchNorm's step counter always moves: --ignore leaves it out on both sides.
    c = collections.OrderedDict((k, v.clone()) for k, v in sd.items())
    c["1.num_batches_tracked"] += 7
    c["0.bias"][0] += 1e-3
    counted = s.path("w_counted.pth")
    torch.save(c, counted)
    rc, j = run_json(s, "verify", counted, orig)
    s.check(rc == 1 and sorted(f["key"] for f in j["findings"]) == ["0.bias", "1.num_batches_tracked"], "drift: %s" % j.get("findings"))
    for ref in (orig, fp):
        rc, j = run_json(s, "verify", counted, ref, "--ignore", "*.num_batches_tracked")
        s.check(rc == 1 and [f["key"] for f in j["findings"]] == ["0.bias"]
                and "1.num_batches_tracked" not in [t["key"] for t in j["tensors"]], "--ignore vs %s: %s" % (ref, j.get("findings")))
    # Drift in words: a few significant digits, enough to tell the two numbers apart.
    msg = [f["message"] for f in run_json(s, "verify", counted, orig)[1]["findings"] if f["key"] == "0.bias"][0]
    got = re.match(r"0\.bias: (\w+) (\S+) → (\S+) \(", msg)
    digits = lambda x: len(x.lstrip("-").replace(".", "").lstrip("0").split("e")[0])  # noqa: E731
    s.check(got and got.group(2) != got.group(3) and digits(got.group(2)) <= 7 and digits(got.group(3)) <= 7,
            "drift message digits: %r" % msg)


def main():
    def body(s, args):
        fixtures = os.path.join(args.work, "fixtures")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "fixtures", "make_fixtures.py"), fixtures],
                       check=True, capture_output=True)
        test_stats(s)
        test_oracle(s, os.path.abspath(args.oracle), fixtures)
        test_integrity_and_drift(s)
        test_torchscript_and_optimizer(s)
        test_safetensors_read(s)
        test_no_libtorch(s)
        test_what_people_read(s)
    return suite_main(body, ("--oracle",))


if __name__ == "__main__":
    sys.exit(main())
