#!/usr/bin/python3
"""Locks the JSON contract: the --json output of every command on the shipped samples equals the
committed golden files (tool.version aside) and satisfies its docs/schema/COMMAND.schema.json's
required fields and types; a --json run that ends in an error prints one JSON object of it
(docs/schema/error.schema.json) whose message is the line on stderr. Usage: test_json_golden.py
--tool PATH [--update]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# (golden file, command line, expected exit code); paths relative to the repository.
CASES = [
    ("resnet_ddp.pth.inspect.json", ["inspect", "data/resnet_ddp.pth"], 0),
    ("training.pth.inspect.json", ["inspect", "data/training.pth"], 0),
    ("resnet_ddp.pth.diff-keys.json", ["diff-keys", "data/resnet_ddp.pth", "data/training.pth"], 1),
    ("resnet_ddp.pth.strip-prefix.json", ["strip-prefix", "data/resnet_ddp.pth", "--dry-run"], 0),
    ("training.pth.verify.json", ["verify", "data/training.pth", "--all"], 0),
]
# (command line, expected command, error kind, file the error names[, the whole message]); {tmp} is
# a scratch folder.
ERROR_CASES = [
    (["verify", "{tmp}/truncated.pth"], "verify", "corrupt", "{tmp}/truncated.pth",
     "{tmp}/truncated.pth: truncated or still being written: 1000 bytes, and the end of the zip archive "
     "(the directory a torch.save file ends with) is missing"),
    (["inspect", "data/training.pth", "--state-dict-key", "modle"], "inspect", "usage", "data/training.pth",
     "data/training.pth: --state-dict-key 'modle': no such key (the top level has: model, optimizer, lr_scheduler, epoch, args)"),
    (["inspect", "data/resnet_ddp.pth", "--state-dict-key", "model"], "inspect", "usage", "data/resnet_ddp.pth",
     "data/resnet_ddp.pth: --state-dict-key 'model': no such key (the top level is the state dict itself: leave --state-dict-key out)"),
    (["inspect", "{tmp}"], "inspect", "format", "{tmp}",
     "{tmp}: is a directory holding no checkpoint this tool reads: no *.index.json (Hugging Face shards), no DeepSpeed folder "
     "(latest, global_step*/), no torch.distributed.checkpoint folder (.metadata); name a file in it"),
    (["inspect", "/nonexistent/x.pth"], "inspect", "io", "/nonexistent/x.pth"),
    (["diff-keys", "/nonexistent/a.pth", "data/training.pth"], "diff-keys", "io", "/nonexistent/a.pth"),
    (["strip-prefix", "/nonexistent/a.pth", "-o", "{tmp}/out.pth"], "strip-prefix", "io", "/nonexistent/a.pth"),
    (["convert", "/nonexistent/a.pth", "-o", "{tmp}/out.safetensors"], "convert", "io", "/nonexistent/a.pth"),
    (["merge", "/nonexistent/run", "-o", "{tmp}/out.pth"], "merge", "io", "/nonexistent/run"),
    (["verify", "data/training.pth", "--rtlo", "1e-3"], "verify", "usage", None),
    (["inspct", "data/training.pth"], None, "usage", None),
]
TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "boolean": bool,
         "null": type(None)}


def check_schema(value, schema, defs, where, problems):
    if "$ref" in schema:
        schema = defs[schema["$ref"].split("/")[-1]]
    if "const" in schema and value != schema["const"]:
        problems.append("%s: %r is not %r" % (where, value, schema["const"]))
    if "enum" in schema and value not in schema["enum"]:
        problems.append("%s: %r not in %s" % (where, value, schema["enum"]))
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(isinstance(value, TYPES[t]) and not (t == "integer" and isinstance(value, bool)) for t in types)
        if not ok:
            problems.append("%s: %r is not %s" % (where, value, types))
            return
    if isinstance(value, dict):
        for k in schema.get("required", []):
            if k not in value:
                problems.append("%s: missing %s" % (where, k))
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                check_schema(value[k], sub, defs, where + "." + k, problems)
    if isinstance(value, list) and "items" in schema:
        for i, x in enumerate(value):
            check_schema(x, schema["items"], defs, "%s[%d]" % (where, i), problems)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    passed = failed = 0
    for golden_name, argv, want_rc in CASES:
        run = subprocess.run([args.tool] + argv + ["--json"], cwd=ROOT, capture_output=True, text=True)
        problems = []
        sample = " ".join(argv)
        if run.returncode != want_rc:
            problems.append("exit %d (expected %d): %s" % (run.returncode, want_rc, run.stderr))
        else:
            got = json.loads(run.stdout)
            with open(os.path.join(ROOT, "docs", "schema", argv[0] + ".schema.json")) as f:
                schema = json.load(f)
            check_schema(got, schema, schema.get("$defs", {}), "$", problems)
            got["tool"]["version"] = "*"
            golden = os.path.join(ROOT, "tests", "golden", golden_name)
            if args.update:
                with open(golden, "w") as f:
                    json.dump(got, f, indent=2, ensure_ascii=False)
                    f.write("\n")
            with open(golden) as f:
                want = json.load(f)
            if got != want:
                for k in sorted(set(got) | set(want)):
                    if got.get(k) != want.get(k):
                        problems.append("field %s differs from %s" % (k, os.path.relpath(golden, ROOT)))
        for p in problems:
            print("FAIL %s: %s" % (sample, p))
        passed += not problems
        failed += bool(problems)
    with open(os.path.join(ROOT, "docs", "schema", "error.schema.json")) as f:
        error_schema = json.load(f)
    tmp = tempfile.mkdtemp(prefix="ckpt-json-errors-")
    try:
        with open(os.path.join(ROOT, "data", "training.pth"), "rb") as f:
            head = f.read(1000)
        with open(os.path.join(tmp, "truncated.pth"), "wb") as f:
            f.write(head)  # torch.save's file cut short: its zip directory is missing
        for argv, command, kind, file, *message in ERROR_CASES:
            argv = [a.replace("{tmp}", tmp) for a in argv] + ["--json"]
            file = file.replace("{tmp}", tmp) if file else None
            message = message[0].replace("{tmp}", tmp) if message else None
            run = subprocess.run([args.tool] + argv, cwd=ROOT, capture_output=True, text=True)
            problems = []
            if run.returncode != 2:
                problems.append("exit %d (expected 2)" % run.returncode)
            try:
                got = json.loads(run.stdout)  # one object, nothing else
            except ValueError as e:
                got = None
                problems.append("stdout is not one JSON object (%s): %r" % (e, run.stdout[:200]))
            if got is not None:
                check_schema(got, error_schema, error_schema.get("$defs", {}), "$", problems)
                err = got.get("error", {})
                if got.get("command") != command:
                    problems.append("command %r, expected %r" % (got.get("command"), command))
                if err.get("kind") != kind or err.get("file") != file:
                    problems.append("error kind %r file %r, expected %r %r" % (err.get("kind"), err.get("file"), kind, file))
                if message is not None and err.get("message") != message:
                    problems.append("message %r, expected %r" % (err.get("message"), message))
                if run.stderr != "ckpt-tool: error: %s\n" % err.get("message"):
                    problems.append("stderr %r is not the report's message %r" % (run.stderr, err.get("message")))
            for p in problems:
                print("FAIL %s: %s" % (" ".join(argv), p))
            passed += not problems
            failed += bool(problems)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
