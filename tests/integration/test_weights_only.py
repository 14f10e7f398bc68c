#!/usr/bin/python3
"""`inspect --json`'s weights_only answers against the real thing: for files written here by torch 1.13
(and, when ../shared is here, the torch 2.6 corpus), torch 1.13's own torch.load(weights_only=True)
decides, and ckpt-tool's torch 1.13 answer must agree; the torch 2.6 answer is scored against the
corpus's truth.json (what torch 2.6's weights_only load did). A refusal must name what blocks it.

Usage: test_weights_only.py --tool PATH --work DIR
"""
import argparse
import glob
import json
import os
import pickle
import sys
import warnings

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_repair import suite_main  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "shared", "corpus", "torch2")


def torch_113_answer(path):
    """True / False as torch 1.13's weights_only load decides; None when torch cannot read the file at
    all for another reason (no CUDA for cuda storages, a newer format)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.load(path, weights_only=True)
            return True
        except pickle.UnpicklingError as e:
            return None if "CUDA" in str(e) else False
        except Exception:  # noqa: BLE001 - not weights_only's doing
            return None


def answers(s, path):
    r = s.run("inspect", "--json", path)
    if not s.check(r.returncode == 0, "%s: inspect exit %d %s" % (path, r.returncode, r.stderr.strip())):
        return None
    a = {x["torch"]: x for x in json.loads(r.stdout)["weights_only"]}
    s.check(set(a) == {"2.6", "1.13"}, "%s: answers for %s" % (path, list(a)))
    r = s.run("scan", "--json", path)  # scan gives the same answers for a torch file, none for the rest
    if s.check(r.returncode in (0, 1), "%s: scan exit %d %s" % (path, r.returncode, r.stderr.strip())):
        got = json.loads(r.stdout)["files"][0]["weights_only"]
        want = [x for x in json.loads(s.run("inspect", "--json", path).stdout)["weights_only"] if x["applies"]]
        s.check(got == want, "%s: scan's weights_only %s, inspect's %s" % (path, got, want))
    for x in a.values():
        s.check(x["loads"] is True or not x["applies"] or (x["blockers"] and x["fix"]), "%s: torch %s refuses without a reason or a fix: %s" % (path, x["torch"], x))
    return a


def test_written_here(s):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    cases = {
        "state_dict": m.state_dict(),
        "floats": {"model": m.state_dict(), "lr": 0.5},
        "optimizer": {"model": m.state_dict(), "optimizer": opt.state_dict()},
        "namespace": {"model": m.state_dict(), "args": argparse.Namespace(epochs=3)},
        "bf16_value": {"w": torch.ones(2), "dtype": torch.bfloat16},
        "device_value": {"w": torch.ones(2), "device": torch.device("cpu")},
        "bytes": {"w": torch.ones(2), "b": b"\x00\x01"},
        "set": {"w": torch.ones(2), "s": {1, 2}},
        "bf16_tensor": {"w": torch.ones(2, dtype=torch.bfloat16)},
        "parameter": {"p": nn.Parameter(torch.ones(2))},
        "quantized": {"q": torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)},
        "sparse": {"s": torch.ones(2, 2).to_sparse()},
        "meta": {"m": torch.empty(2, device="meta")},
    }
    for name, obj in cases.items():
        for proto in (2, 4):
            path = s.path("%s.p%d.pt" % (name, proto))
            torch.save(obj, path, pickle_protocol=proto)
            a = answers(s, path)
            want = torch_113_answer(path)
            if a and want is not None:
                s.check(a["1.13"]["loads"] == want, "%s: torch 1.13's weights_only load %s, ckpt-tool says %s (%s)" %
                        (path, "succeeds" if want else "fails", a["1.13"]["loads"], [b["name"] for b in a["1.13"]["blockers"]]))
    # The answers name what blocks: a float for 1.13 only, protocol 4's opcodes for both.
    a = answers(s, s.path("floats.p2.pt"))
    if a:
        s.check(a["2.6"]["loads"] and [b["name"] for b in a["1.13"]["blockers"]] == ["BINFLOAT"], "floats: %s" % a)
    a = answers(s, s.path("state_dict.p4.pt"))
    if a:
        s.check(not a["2.6"]["loads"] and {"FRAME", "MEMOIZE"} <= {b["name"] for b in a["2.6"]["blockers"]}, "protocol 4: %s" % a["2.6"])
    a = answers(s, s.path("namespace.p2.pt"))
    if a:
        s.check("argparse.Namespace" in a["2.6"]["fix"] and "add_safe_globals" in a["2.6"]["fix"], "namespace fix: %s" % a["2.6"]["fix"])
    # A dangerous global: the advice is not to load the file, never an allow-list entry or a way round.
    import zipfile
    evil = s.path("evil.pt")
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("evil/data.pkl", b"\x80\x02cposix\nsystem\n(X\x04\x00\x00\x00truetR.")
        z.writestr("evil/version", "3\n")
    a = answers(s, evil)
    if a:
        for rel in ("2.6", "1.13"):
            fix = a[rel]["fix"] or ""
            s.check(not a[rel]["loads"] and fix.startswith("do not load this file") and "posix.system" in fix
                    and "add_safe_globals" not in fix and "convert" not in fix, "dangerous global, torch %s: %s" % (rel, fix))
    # Not torch.load's files: said so, not answered.
    st = s.path("w.safetensors")
    r = s.run("convert", s.path("state_dict.p2.pt"), "-o", st)
    if s.check(r.returncode == 0, "convert: %s" % r.stderr):
        a = answers(s, st)
        s.check(a and not a["2.6"]["applies"] and a["2.6"]["loads"] is None, "safetensors: %s" % a)


def test_corpus(s):
    if not os.path.isdir(CORPUS):
        print("torch2 corpus not here: its part skipped")
        return
    truth = json.load(open(os.path.join(CORPUS, "truth.json")))["files"]
    agreed = 0
    for path in sorted(glob.glob(os.path.join(CORPUS, "*.pt"))):
        name = os.path.basename(path)
        a = answers(s, path)
        if not a:
            continue
        want26 = truth[name].get("weights_only_loadable")
        if want26 is not None:
            s.check(a["2.6"]["loads"] == want26, "%s: torch 2.6's weights_only load %s, ckpt-tool says %s %s" %
                    (name, want26, a["2.6"]["loads"], [b["name"] for b in a["2.6"]["blockers"]]))
        else:  # a TorchScript archive: torch 2.6 raises with weights_only=True
            s.check(truth[name]["container"] != "torchscript" or not a["2.6"]["loads"], "%s: %s" % (name, a["2.6"]))
        want13 = torch_113_answer(path)
        if want13 is not None:
            agreed += a["1.13"]["loads"] == want13
            s.check(a["1.13"]["loads"] == want13, "%s: torch 1.13's weights_only load %s, ckpt-tool says %s %s" %
                    (name, want13, a["1.13"]["loads"], [b["name"] for b in a["1.13"]["blockers"]]))
    print("torch2 corpus: torch 1.13's answer matched on %d files" % agreed)


def main():
    def body(s, _args):
        test_written_here(s)
        test_corpus(s)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
