#!/usr/bin/python3
"""Locks the JSON contract: `inspect --json` of the shipped samples equals the committed golden
files (tool.version aside) and satisfies docs/schema/inspect.schema.json's required fields and
types. Usage: test_json_golden.py --tool PATH [--update]"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLES = ["resnet_ddp.pth", "training.pth"]
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
    with open(os.path.join(ROOT, "docs", "schema", "inspect.schema.json")) as f:
        schema = json.load(f)
    passed = failed = 0
    for sample in SAMPLES:
        run = subprocess.run([args.tool, "inspect", "data/" + sample, "--json"], cwd=ROOT,
                             capture_output=True, text=True)
        problems = []
        if run.returncode != 0:
            problems.append("exit %d: %s" % (run.returncode, run.stderr))
        else:
            got = json.loads(run.stdout)
            check_schema(got, schema, schema.get("$defs", {}), "$", problems)
            got["tool"]["version"] = "*"
            golden = os.path.join(ROOT, "tests", "golden", sample + ".inspect.json")
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
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
