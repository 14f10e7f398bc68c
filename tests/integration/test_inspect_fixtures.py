#!/usr/bin/python3
"""Compares `ckpt-tool inspect --json` with what torch.load sees, field by field, for every fixture
written by make_fixtures.py. Usage: test_inspect_fixtures.py --tool PATH --work DIR"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIELDS = ["dtype", "shape", "stride", "storage_offset", "numel", "nbytes", "requires_grad", "parameter"]


def partition(tensors, field):
    groups = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t[field], []).append(i)
    return sorted(groups.values())


def check_case(tool, work, case, problems):
    path = os.path.join(work, case["file"])
    with open(os.path.join(work, case["name"] + ".truth.json")) as f:
        truth = json.load(f)
    run = subprocess.run([tool, "inspect", path, "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        problems.append("exit %d: %s" % (run.returncode, run.stderr.strip()))
        return
    got = json.loads(run.stdout)
    if got["container"]["root"] != case["root"]:
        problems.append("root %r, torch wrote %r" % (got["container"]["root"], case["root"]))
    if case.get("deflated") and got["container"]["compressed_records"] == 0:
        problems.append("no compressed records seen in a deflated file")
    gk = [t["key"] for t in got["tensors"]]
    tk = [t["key"] for t in truth["tensors"]]
    if gk != tk:
        problems.append("tensor keys %s, torch sees %s" % (gk, tk))
        return
    for g, t in zip(got["tensors"], truth["tensors"]):
        for field in FIELDS:
            if g[field] != t[field]:
                problems.append("%s.%s = %r, torch says %r" % (t["key"], field, g[field], t[field]))
    if partition(got["tensors"], "storage") != partition(truth["tensors"], "storage_id"):
        problems.append("storage sharing differs from torch's")
    go = [o["key"] for o in got["objects"]]
    if go != truth["objects"]:
        problems.append("object keys %s, expected %s" % (go, truth["objects"]))
    if case["name"] != "nested":
        if got["state_dict"] != truth["state_dict"]:
            problems.append("state dict at %r, expected %r" % (got["state_dict"], truth["state_dict"]))
        if got["state_dict_kind"] != case["kind"]:
            problems.append("state dict kind %r, expected %r" % (got["state_dict_kind"], case["kind"]))
        names = [t["state_dict_key"] for t in got["tensors"] if t["state_dict_key"] is not None]
        if names != truth["state_dict_keys"]:
            problems.append("state dict names %s, expected %s" % (names, truth["state_dict_keys"]))
    hints = {h["kind"]: h for h in got["hints"]}
    expect_prefix = {"ddp": "module.", "compiled": "_orig_mod.", "compiled_ddp": "_orig_mod.module.",
                     "ddp_compiled": "module._orig_mod."}.get(case["name"])
    if expect_prefix and ('"%s"' % expect_prefix) not in hints.get("wrapper_prefix", {}).get("message", ""):
        problems.append("no wrapper_prefix hint naming %s" % expect_prefix)
    if case["name"] == "lightning" and '"model."' not in hints.get("common_prefix", {}).get("message", ""):
        problems.append("no common_prefix hint naming model.")
    if case["name"] in ("cnn", "training", "lightning") and hints.get("unknown_global"):
        problems.append("warnings on a plain file")
    if case["name"] == "module" and not any("__main__.Net" in w["message"] for w in got["warnings"]):
        problems.append("no warning for the custom class __main__.Net")
    text = subprocess.run([tool, "inspect", path], capture_output=True, text=True)
    if text.returncode != 0:
        problems.append("text output exit %d" % text.returncode)
    else:
        for name in truth["state_dict_keys"]:
            if name not in text.stdout:
                problems.append("text output lacks %s" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "fixtures", "make_fixtures.py"), args.work],
                   check=True, stderr=subprocess.DEVNULL)
    with open(os.path.join(args.work, "index.json")) as f:
        index = json.load(f)
    passed = failed = 0
    for case in index:
        problems = []
        check_case(args.tool, args.work, case, problems)
        for p in problems:
            print("FAIL %s: %s" % (case["name"], p))
        if problems:
            failed += 1
        else:
            passed += 1
            print("ok   %s" % case["name"])
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
