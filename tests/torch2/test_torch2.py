#!/usr/bin/python3
"""`make test-torch2`: real torch 2.6 on both ends. In the Debian 13 root ROOT (python3-torch 2.6,
Python 3.13, numpy 2; made and cached by the Makefile), in_root.py writes the fixtures with
torch.save and torch.distributed.checkpoint.save; ckpt-tool, built here, verifies each, repairs and
converts them (strip-prefix, convert, merge); in_root.py then loads every output with torch 2.6's
weights_only=True and compares it with its input, bit for bit, the rest of the object kept, the
model's state dict accepted by load_state_dict(strict=True).

Usage: test_torch2.py --tool PATH --root ROOT"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from test_torch2_corpus import score  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--root", required=True)
    args = ap.parse_args()
    tool = os.path.abspath(args.tool)
    inside = "/ckpt-tool-torch2"
    work = args.root + inside
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shutil.copy(os.path.join(HERE, "in_root.py"), work)

    def in_root(*argv):
        r = subprocess.run(["chroot", args.root, "python3", inside + "/in_root.py"] + list(argv),
                           capture_output=True, text=True, timeout=900)
        return r.returncode, [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")], r.stderr

    rc, out, err = in_root("write", inside + "/f")
    if rc != 0:
        sys.exit("writing the torch 2.6 fixtures failed: %s" % err[-2000:])
    print("fixtures: %s" % out[0])
    d = work + "/f"
    failures = []

    def tool_run(*argv, want=0):
        r = subprocess.run([tool] + list(argv), capture_output=True, text=True, timeout=300)
        if r.returncode != want:
            failures.append("%s: exit %d, expected %d: %s%s" % (" ".join(argv), r.returncode, want, r.stdout[-600:], r.stderr[-600:]))
        return r

    for name in ("ddp.pt", "compiled.pt", "train_ddp.pt", "fp8.pt", "nocrc_ddp.pt", "proto5_ddp.pt", "dcp"):
        tool_run("verify", os.path.join(d, name))
        tool_run("inspect", "--json", os.path.join(d, name))
    checks = []
    for name, prefix, path in (("ddp.pt", "module.", ""), ("compiled.pt", "_orig_mod.", ""), ("train_ddp.pt", "module.", "model"),
                               ("nocrc_ddp.pt", "module.", ""), ("proto5_ddp.pt", "module.", "")):
        outname = name.replace(".pt", ".plain.pt")
        tool_run("strip-prefix", os.path.join(d, name), "-o", os.path.join(d, outname))
        checks.append({"output": outname, "input": name, "expect": "strip:" + prefix, "path": path, "strict": path or "."})
    tool_run("convert", os.path.join(d, "fp8.pt"), "-o", os.path.join(d, "fp8.conv.pt"))
    checks.append({"output": "fp8.conv.pt", "input": "fp8.pt", "expect": "same"})
    tool_run("convert", os.path.join(d, "compiled.pt"), "-o", os.path.join(d, "compiled.safetensors"))
    tool_run("convert", os.path.join(d, "compiled.safetensors"), "-o", os.path.join(d, "compiled.st.pt"))
    checks.append({"output": "compiled.st.pt", "input": "compiled.pt", "expect": "same", "unordered": True})
    tool_run("convert", os.path.join(d, "train_ddp.pt"), "-o", os.path.join(d, "train_ddp.conv.pt"))
    checks.append({"output": "train_ddp.conv.pt", "input": "train_ddp.pt", "expect": "same"})
    tool_run("merge", os.path.join(d, "dcp"), "-o", os.path.join(d, "dcp.merged.pt"))
    checks.append({"output": "dcp.merged.pt", "input": "dcp", "expect": "dcp"})
    # per-rank DTensor state dicts of real runs (FSDP2 on 3 ranks; tensor parallelism on a 2 × 2 mesh,
    # Shard(1) blocks saved as strided views): merged as full_tensor() gives them, every dtype kept
    for kind in ("fsdp2", "tp"):
        tool_run("verify", os.path.join(d, "dtensor_" + kind))
        tool_run("merge", os.path.join(d, "dtensor_" + kind), "-o", os.path.join(d, "dtensor_%s.merged.pt" % kind))
        checks.append({"output": "dtensor_%s.merged.pt" % kind, "input": "dtensor_%s.expected.pt" % kind, "expect": "same"})

    # Tensors that are not one plain view of a storage, and a torch.export archive: read as torch 2.6
    # reads them (the torch2 corpus's rule), the weights_only answer torch 2.6's, kept by the writers.
    truth = json.load(open(os.path.join(d, "exotic_truth.json")))
    for name, t in sorted(truth.items()):
        path = os.path.join(d, name)
        wrong, problems, _ = score(tool, path, t)
        print("%-22s %d of %d tensors as torch 2.6 reads them %s" % (name, len(t["tensors"]) - len(wrong), len(t["tensors"]), wrong[:3] or ""))
        failures.extend("%s: %s" % (name, w) for w in wrong + problems)
        r = tool_run("inspect", "--json", path)
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        objects = {o["key"]: o["repr"] for o in j.get("objects", [])}
        for key, attrs in t["attributes"].items():
            for a, rep in attrs.items():
                if objects.get(key + "." + a) != rep:
                    failures.append("%s: attribute %s.%s is %r, torch: %r" % (name, key, a, objects.get(key + "." + a), rep))
        if t["weights_only_loadable"] is not None and j:
            a = j["weights_only"][0]
            if a["loads"] != t["weights_only_loadable"]:
                failures.append("%s: torch 2.6's weights_only load %s, ckpt-tool says %s %s" % (name, t["weights_only_loadable"], a["loads"], a["blockers"]))
    tool_run("strip-prefix", os.path.join(d, "attrs_ddp.pt"), "-o", os.path.join(d, "attrs.plain.pt"))
    checks.append({"output": "attrs.plain.pt", "input": "attrs_ddp.pt", "expect": "strip:module."})
    for name in ("sparse.pt", "nested.pt", "quantized.pt", "attrs_ddp.pt", "bits.pt"):
        out = name.replace(".pt", ".conv.pt")
        tool_run("convert", os.path.join(d, name), "-o", os.path.join(d, out))
        checks.append({"output": out, "input": name, "expect": "same"})
    tool_run("convert", os.path.join(d, "export.pt2"), "-o", os.path.join(d, "export.pth"))
    checks.append({"output": "export.pth", "input": "export.pt2", "expect": "export"})
    tool_run("convert", os.path.join(d, "export.pt2"), "-o", os.path.join(d, "export.safetensors"))
    tool_run("convert", os.path.join(d, "export.safetensors"), "-o", os.path.join(d, "export.st.pt"))
    checks.append({"output": "export.st.pt", "input": "export.pt2", "expect": "export", "unordered": True})
    tool_run("convert", os.path.join(d, "sparse.pt"), "-o", os.path.join(d, "sparse.safetensors"), want=2)
    with open(os.path.join(d, "checks.json"), "w") as f:
        json.dump(checks, f)
    rc, out, err = in_root("check", inside + "/f")
    for r in out:
        print("%-22s %s%s %s" % (r["output"], "ok" if r["ok"] else "DIFFERS", " (weights_only=True)" if r.get("weights_only") else "",
                                 r.get("differences") or r.get("error") or ""))
        if not r["ok"]:
            failures.append("%s: %s" % (r["output"], r.get("differences") or r.get("error")))
    if rc != 0 and not failures:
        failures.append("check in the root failed: %s" % err[-2000:])
    if len(out) != len(checks):
        failures.append("%d of %d outputs checked: %s" % (len(out), len(checks), err[-2000:]))
    # What torch 2.6 and numpy 2 run code from, proven there first; scan must flag it. And files of
    # torch 2.6 that must scan clean.
    rc, cases, err = in_root("hostile", inside + "/h")
    if rc != 0 or not cases:
        failures.append("writing the hostile torch 2.6 files failed: %s" % err[-2000:])
    for c in cases:
        path = work + "/h/" + c["file"]
        r = subprocess.run([tool, "scan", "--json", path], capture_output=True, text=True, timeout=120)
        j = json.loads(r.stdout) if r.stdout.strip() else {"files": []}
        got = {x["kind"] for f in j["files"] for x in f["findings"]} | {x["global"] for f in j["files"] for x in f["findings"] if x["global"]}
        if c.get("clean"):
            ok = r.returncode == 0 and not got
        else:
            ok = c["proven"] and r.returncode == 1 and set(c["want"]) <= got
            if "weights_only_refused" in c:
                wo = j["files"][0]["weights_only"][0] if j["files"] and j["files"][0]["weights_only"] else {}
                ok = ok and c["weights_only_refused"] and wo.get("loads") is False
        print("%-62s %s%s" % (c["name"], "ok" if ok else "FAIL", "" if c.get("clean") else " (proven)" if c["proven"] else " (NOT proven)"))
        if not ok:
            failures.append("scan of %s (%s): exit %d, findings %s, proven %s" % (c["file"], c["name"], r.returncode, sorted(got), c.get("proven")))
    for f in failures:
        print("FAIL: " + f)
    print("%d outputs loaded back by torch 2.6, %d failures" % (len(out), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
