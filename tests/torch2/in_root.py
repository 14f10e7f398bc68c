#!/usr/bin/python3
"""Runs inside the Debian 13 root (torch 2.6, Python 3.13, numpy 2): `write DIR` writes the 2.x
fixtures with real torch.save (and torch.distributed.checkpoint.save) and their expected tensors;
`check DIR` loads every output ckpt-tool wrote back with torch 2.6 and compares it with its input.
Prints JSON lines; exits 1 on any difference. Driven from outside by test_torch2.py."""
import json
import os
import sys
import warnings

import torch
import torch.nn as nn

warnings.filterwarnings("ignore")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)
        self.head = nn.Linear(5, 5, bias=False)


def write(d):
    torch.manual_seed(0)
    os.makedirs(d, exist_ok=True)
    m = Net()
    sd = m.state_dict()
    cases = {}

    def save(name, obj, **kw):
        torch.save(obj, os.path.join(d, name), **kw)
        cases[name] = True

    save("ddp.pt", {"module." + k: v for k, v in sd.items()})
    save("compiled.pt", {"_orig_mod." + k: v for k, v in sd.items()})
    # weights with decay / without, as Hugging Face's trainer splits them, on a DDP model
    decay = [p for n, p in m.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in m.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}])
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    save("train_ddp.pt", {"model": {"module." + k: v for k, v in m.state_dict().items()},
                          "optimizer": opt.state_dict(), "epoch": 3, "step": torch.tensor(7)})
    save("fp8.pt", {n: torch.arange(120, dtype=torch.uint8).view(getattr(torch, n)).reshape(6, 20)
                    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")})
    torch.serialization.set_crc32_options(False)
    save("nocrc_ddp.pt", {"module." + k: v for k, v in sd.items()})
    torch.serialization.set_crc32_options(True)
    save("proto5_ddp.pt", {"module." + k: v for k, v in sd.items()}, pickle_protocol=5)
    # torch.distributed.checkpoint, one process (no process group: torch 2.6 saves as rank 0)
    import torch.distributed.checkpoint as dcp
    dcp.save({"model": m.state_dict(), "step": 5}, checkpoint_id=os.path.join(d, "dcp"))
    cases["dcp"] = True
    print(json.dumps({"torch": torch.__version__, "written": sorted(cases)}))


def same(a, b, where, bad):
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride() and a.is_contiguous() != b.is_contiguous():
            bad.append("%s: %s %s vs %s" % (where, getattr(a, "dtype", type(a)), tuple(a.shape), getattr(b, "dtype", type(b))))
        elif not torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)):
            bad.append("%s: bytes differ" % where)
    elif isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            bad.append("%s: keys %s vs %s" % (where, list(a)[:4], list(b)[:4] if isinstance(b, dict) else type(b)))
        else:
            for k in a:
                same(a[k], b[k], "%s.%s" % (where, k), bad)
    elif isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            bad.append("%s: %r vs %r" % (where, type(a), type(b)))
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, "%s.%d" % (where, i), bad)
    elif a != b and not (a != a and b != b):
        bad.append("%s: %r vs %r" % (where, a, b))


def strip(obj, prefix):
    if isinstance(obj, dict):
        return {(k[len(prefix):] if isinstance(k, str) and k.startswith(prefix) else k): v for k, v in obj.items()}
    return obj


def check(d):
    """checks.json: [{"output", "input", "expect": "same" | "strip:PREFIX" | "dcp", "path": key or "",
    "unordered": true when the output's format does not keep the order (safetensors sorts)}]. The
    output is loaded with weights_only=True where the input loads so (torch 2.6 refuses some files
    torch.save itself writes, e.g. pickle protocol 5's MEMOIZE and FRAME)."""
    ok = True
    for c in json.load(open(os.path.join(d, "checks.json"))):
        out = os.path.join(d, c["output"])
        bad = []
        inp = os.path.join(d, c["input"])
        try:
            input_wo = os.path.isdir(inp) or torch.load(inp, weights_only=True) is not None
        except Exception:  # noqa: BLE001 - torch 2.6 refuses the input itself
            input_wo = False
        try:
            got = torch.load(out, weights_only=input_wo)
        except Exception as e:  # noqa: BLE001 - the error is the finding
            print(json.dumps({"output": c["output"], "ok": False, "error": "load (weights_only=%s): %s" % (input_wo, str(e)[-300:])}))
            ok = False
            continue
        if c["expect"] == "dcp":
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
            ref = os.path.join(d, c["output"] + ".torch.pt")
            dcp_to_torch_save(os.path.join(d, c["input"]), ref)
            want = torch.load(ref, weights_only=False)
        else:
            want = torch.load(os.path.join(d, c["input"]), weights_only=False)
        if c["expect"].startswith("strip:"):
            p = c["expect"][len("strip:"):]
            if c.get("path"):
                want = dict(want)
                want[c["path"]] = strip(want[c["path"]], p)
            else:
                want = strip(want, p)
        if c.get("unordered"):
            want = dict(sorted(want.items()))
            got = dict(sorted(got.items()))
        same(want, got, c["output"], bad)
        if c.get("strict"):
            m = Net()
            sd = got[c["strict"]] if c["strict"] != "." else got
            m.load_state_dict(sd, strict=True)
        print(json.dumps({"output": c["output"], "ok": not bad, "weights_only": input_wo, "differences": bad[:5]}))
        ok = ok and not bad
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
