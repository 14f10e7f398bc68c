#!/usr/bin/python3
"""`scan` on the shared corpora, when ../shared is there (CI has it; skipped, exit 77, when not).

- shared/corpus/hostile: the malicious and benign samples of public scanners (picklescan, modelscan),
  scored by the corpus's own check.py: every dangerous file flagged by default with a dangerous
  finding naming upstream's global, every safe one clean.
- shared/corpus/torch2: 48 files written by real torch 2.6: each scans clean, but those that pickle a
  class of their script (__main__), which are unknown and nothing else, and clean with --allow.

Usage: test_scan_corpus.py --tool PATH --work DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "corpus")
sys.path.insert(0, HERE)
from test_repair import schema_problems, suite_main  # noqa: E402


def test_hostile(s_):
    check = os.path.join(SHARED, "hostile", "check.py")
    if "ASAN_OPTIONS" not in os.environ:
        r = subprocess.run([sys.executable, check, s_.tool], capture_output=True, text=True, timeout=900)
        print(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr)
        s_.check(r.returncode == 0, "hostile corpus:\n%s%s" % (r.stdout, r.stderr))
        return
    # Under AddressSanitizer the tool reserves terabytes of shadow address space, which check.py's
    # 4 GiB RLIMIT_AS forbids: its own judge is applied to runs without that limit.
    sys.path.insert(0, os.path.dirname(check))
    import check as corpus  # noqa: E402
    exp = json.load(open(os.path.join(os.path.dirname(check), "expected.json")))
    bad = []
    for e in exp["files"]:
        path = os.path.join(os.path.dirname(check), "files", e["name"])
        r = subprocess.run([s_.tool, "scan", "--json", path], capture_output=True, text=True, timeout=300)
        try:
            report = json.loads(r.stdout)
        except ValueError:
            report = None
        ok, kind, said = corpus.judge(e, r.returncode, report, False, path)
        if not ok:
            bad.append("%s %s: %s" % (kind, e["name"], said))
    print("hostile corpus (check.py's judge, no address-space limit): %d/%d" % (len(exp["files"]) - len(bad), len(exp["files"])))
    s_.check(not bad, "hostile corpus:\n" + "\n".join(bad))


def test_torch2(s_):
    folder = os.path.join(SHARED, "torch2")
    names = sorted(n for n in os.listdir(folder) if n.endswith((".pt", ".pt2", ".pth")))
    r = subprocess.run([s_.tool, "scan", "--json"] + [os.path.join(folder, n) for n in names], capture_output=True, text=True)
    j = json.loads(r.stdout)
    s_.check(not schema_problems(j) and not j["errors"], "torch2: %s %s" % (schema_problems(j)[:3], j["errors"]))
    custom = []
    for f in j["files"]:
        found = [(x["severity"], x["global"]) for x in f["findings"]]
        if any(g and g.startswith("__main__.") for _, g in found):
            s_.check(all(sev == "unknown" and g.startswith("__main__.") for sev, g in found), "%s: %s" % (f["file"], found))
            custom.append(f["file"])
        else:
            s_.check(not found, "%s: findings in a torch 2.6 file: %s" % (f["file"], found))
    s_.check(len(custom) == 2, "torch2: files with classes of their script: %s" % custom)
    for path in custom:
        r = subprocess.run([s_.tool, "scan", path, "--allow", "__main__.*"], capture_output=True, text=True)
        s_.check(r.returncode == 0, "%s --allow __main__.*: exit %d %s" % (path, r.returncode, r.stdout))


def main():
    if not os.path.isdir(SHARED):
        print("skipped: %s is not here" % SHARED)
        return 77

    def body(s_, _args):
        test_hostile(s_)
        test_torch2(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
