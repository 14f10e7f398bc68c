#!/usr/bin/python3
"""`--format github` of diff-keys, verify and scan, on checkpoints written here by real torch.save.

Every line the binary writes to stdout is parsed back: a workflow command must match GitHub's syntax
(`::error|warning|notice file=…,title=…::…`, with nothing in a value but what actions/toolkit's
escaping leaves: `%25 %0D %0A`, in properties `%3A %2C` too), and the one line after the
annotations is the plain summary. Values are un-escaped as GitHub's runner does and checked against
the command's own --json report of the same run: one annotation per finding, in order, its file the
path as given, its title naming the kind, its message the finding's. Also: a state-dict key and a
file name holding `,` `:` `%` and a newline come back unchanged; more than 50 findings give 50
annotations, then one warning saying how many more, then the summary; exit codes are those of the
other formats (0 clean, 1 findings, 2 error, where stdout also gets a `ckpt-tool error`
annotation); `--json` is `--format json`; `--json --format github` is a usage error.

Usage: test_github_format.py --tool PATH --work DIR
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from test_repair import suite_main  # noqa: E402

CAP = 50
PROP = r"(?:[^%:,\r\n]|%25|%0D|%0A|%3A|%2C)*"
DATA = r"(?:[^%\r\n]|%25|%0D|%0A)*"
COMMAND = re.compile(r"^::(error|warning|notice)(?: ((?:file|title)=%s(?:,(?:file|title)=%s)*))?::(%s)$" % (PROP, PROP, DATA))
SUMMARY = re.compile(r"^ckpt-tool (diff-keys|verify|scan): (no findings|\d+ errors?, \d+ warnings?)"
                     r"(, (\d+) not annotated \(--json lists all\))?$")
NASTY_KEY = "head,1:50%\nproj.weight"


class Custom:
    """A class of this script: __main__.Custom is on no allow-list (unknown)."""

    def __init__(self, n):
        self.n = n


class Shell:
    """Pickles as a call of os.system (posix.system): dangerous. Never unpickled here."""

    def __reduce__(self):
        return (os.system, ("true",))


def escape(s, prop=False):
    # actions/toolkit's escapeData / escapeProperty, written again here to check the raw bytes.
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return s.replace(":", "%3A").replace(",", "%2C") if prop else s


def unescape(s):
    # GitHub's runner: each escape back to its character, %25 last (so "%250A" stays "%0A").
    for a, b in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        s = s.replace(a, b)
    return s


class Output:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err
        self.annotations = []  # dicts: level, file, title, message (un-escaped); None for a bad line
        self.summary = None
        self.other = []        # plain lines besides the summary
        self.bad = []          # lines that look like workflow commands but do not parse
        for line in out.split("\n")[:-1] if out.endswith("\n") else out.split("\n"):
            if line.startswith("::"):
                m = COMMAND.match(line)
                if not m:
                    self.bad.append(line)
                    continue
                a = {"level": m.group(1), "message": unescape(m.group(3))}
                for prop in (m.group(2) or "").split(",") if m.group(2) else []:
                    name, _, value = prop.partition("=")
                    if name in a:
                        self.bad.append(line)
                    a[name] = unescape(value)
                self.annotations.append(a)
            elif self.summary is None and SUMMARY.match(line):
                self.summary = line
            else:
                self.other.append(line)
        self.findings = [a for a in self.annotations if a["level"] != "notice"]


class Gh:
    def __init__(self, s):
        self.s = s

    def run(self, *args):
        # Bytes, split on "\n" only: a raw CR in the output must not be hidden by universal newlines.
        r = subprocess.run([self.s.tool] + [str(a) for a in args], capture_output=True)
        self.s.check(b"\r" not in r.stdout, "%s: a raw CR on stdout" % (args,))
        return Output(r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8", "replace"))

    def github(self, *args):
        o = self.run(*(args + ("--format", "github")))
        what = " ".join(str(a) for a in args[:2])
        self.s.check(not o.bad, "%s: lines not in workflow-command syntax: %s" % (what, o.bad[:3]))
        return o

    def report(self, *args):
        r = subprocess.run([self.s.tool] + [str(a) for a in args] + ["--json"], capture_output=True, text=True)
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}


def check_summary(s, o, command, errors, warnings, left_out=0):
    want = "ckpt-tool %s: " % command
    want += "no findings" if not errors and not warnings else "%d error%s, %d warning%s" % (
        errors, "" if errors == 1 else "s", warnings, "" if warnings == 1 else "s")
    if left_out:
        want += ", %d not annotated (--json lists all)" % left_out
    s.check(o.summary == want, "%s summary: %r, want %r" % (command, o.summary, want))
    lines = o.out.rstrip("\n").split("\n")
    s.check(lines[-1] == want or (command == "verify" and lines[-2] == want), "%s: the summary is the last line" % command)


# --- fixtures -------------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 10)


def fixtures(s):
    torch.manual_seed(0)
    sd = Net().state_dict()
    f = {}
    f["plain"] = s.path("plain.pth")
    torch.save(sd, f["plain"])
    f["ddp"] = s.path("ddp.pth")
    torch.save(nn.DataParallel(Net()).state_dict(), f["ddp"])
    # Shapes, a dtype, a key that is not in the reference, with every character the escaping touches.
    odd = collections.OrderedDict(sd)
    odd["conv.weight"] = torch.zeros(8, 3, 5, 5)
    odd["head.bias"] = odd["head.bias"].half()
    odd[NASTY_KEY] = torch.ones(4, 4)
    odd[NASTY_KEY][1, 2] = float("nan")
    del odd["bn.running_var"]
    # ... in a file whose name has them too (a property value: ':' and ',' escaped as well).
    d = s.path("run,7:50%")
    os.makedirs(d)
    f["odd"] = os.path.join(d, "odd,name:%25\nx.pth")
    torch.save(odd, f["odd"])
    # Over the cap: 70 keys against 70 others, no prefix in common (140 findings).
    f["wide"] = s.path("wide.pth")
    torch.save({"enc_%d" % i: torch.zeros(2) for i in range(70)}, f["wide"])
    f["wide_ref"] = s.path("wide_ref.pth")
    torch.save({"dec_%d" % i: torch.zeros(2) for i in range(70)}, f["wide_ref"])
    f["nan60"] = s.path("nan60.pth")
    torch.save({"t%02d" % i: torch.tensor([float("nan"), 1.0]) for i in range(60)}, f["nan60"])
    # verify: NaN and Inf, a custom class (unsafe_global), drift against a fingerprint, a CRC.
    bad = collections.OrderedDict(sd)
    bad["conv.weight"] = bad["conv.weight"].clone()
    bad["conv.weight"][0, 0, 0, 0] = float("nan")
    bad["head.bias"] = bad["head.bias"].clone()
    bad["head.bias"][3] = float("inf")
    f["bad"] = s.path("bad.pth")
    torch.save({"model": bad, "config": Custom(3)}, f["bad"])
    f["fp"] = s.path("plain.fp.json")
    nudged = collections.OrderedDict(sd)
    nudged["head.weight"] = nudged["head.weight"] * 1.02
    f["nudged"] = s.path("nudged.pth")
    torch.save(nudged, f["nudged"])
    f["crc"] = s.path("crc.pth")
    with zipfile.ZipFile(f["plain"]) as z:
        info = z.getinfo("plain/data/0")
    data = bytearray(open(f["plain"], "rb").read())
    start = info.header_offset + 30 + len(info.filename.encode()) + int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    data[start + 3] ^= 0x10
    open(f["crc"], "wb").write(data)
    f["truncated"] = s.path("truncated.pth")
    open(f["truncated"], "wb").write(data[: len(data) // 2])
    # scan: a dangerous global, an unknown one, both, and a bare pickle naming a global with , : %.
    f["shell"] = s.path("shell.pth")
    torch.save({"model": sd, "hook": Shell()}, f["shell"])
    f["custom"] = s.path("custom.pth")
    torch.save({"model": sd, "config": Custom(1)}, f["custom"])
    f["weird_global"] = s.path("weird,global.pkl")
    open(f["weird_global"], "wb").write(b"\x80\x02cpkg,1:50%\nKlass\n.")
    f["many_globals"] = s.path("many_globals.pkl")
    body = b"".join(b"cmod%d\nC%d\n0" % (i, i) for i in range(55))
    open(f["many_globals"], "wb").write(b"\x80\x02" + body + b"N.")
    return f


# --- the commands ---------------------------------------------------------------------------------
def test_diff_keys(s, g, f):
    o = g.github("diff-keys", f["plain"], f["plain"])
    s.check(o.rc == 0 and not o.annotations and not o.other, "diff-keys clean: exit %d, %s" % (o.rc, o.out))
    check_summary(s, o, "diff-keys", 0, 0)

    # The wrapper prefix: one error naming the cause (the keys differ by a prefix, the keys in its
    # text) and the fix with its command; nothing per key (GitHub shows ten a step).
    o = g.github("diff-keys", f["ddp"], f["plain"])
    rc, j = g.report("diff-keys", f["ddp"], f["plain"])
    s.check(o.rc == rc == 1, "diff-keys ddp: exit %d (json %d)" % (o.rc, rc))
    fix = j.get("prefix_fix") or {}
    first = o.annotations[0] if o.annotations else {}
    s.check(len(o.annotations) == 1 and first["level"] == "error" and first["title"] == "diff-keys: keys differ by a prefix"
            and first["file"] == f["ddp"] and fix.get("command") and first["message"].endswith("; fix: " + fix["command"])
            and 'stripping "module."' in first["message"]
            and first["message"].startswith("%d keys differ only by a prefix (conv (2 keys: weight, bias), " % len(j["unexpected"])),
            "diff-keys ddp: the one error %s (json %s)" % (o.annotations[:2], fix))
    check_summary(s, o, "diff-keys", 1, 0)
    # The command in the notice repairs the file.
    cmd = fix.get("command", "").split()
    r = subprocess.run([s.tool] + cmd[1:], capture_output=True, text=True)
    o2 = g.github("diff-keys", s.path("ddp_stripped.pth"), f["plain"])
    s.check(r.returncode == 0 and o2.rc == 0 and not o2.annotations, "the notice's command: %d %s / %d" % (r.returncode, r.stderr, o2.rc))

    # Shapes, a dtype (a warning: it does not change the exit code), missing and unexpected keys, and
    # the key and file name with , : % and a newline.
    o = g.github("diff-keys", f["odd"], f["plain"])
    rc, j = g.report("diff-keys", f["odd"], f["plain"])
    s.check(o.rc == rc == 1, "diff-keys odd: exit %d (json %d)" % (o.rc, rc))
    by_title = collections.defaultdict(list)
    for a in o.annotations:
        by_title[a["title"]].append(a)
    s.check(all(a["file"] == f["odd"] for a in o.annotations), "diff-keys odd: file= round trip: %s" % [a.get("file") for a in o.annotations])
    s.check([a["message"] for a in by_title["diff-keys: unexpected key"]] == [NASTY_KEY + ": in %s, not in %s" % (f["odd"], f["plain"])],
            "diff-keys odd: the nasty key: %s" % by_title["diff-keys: unexpected key"])
    s.check([a["message"] for a in by_title["diff-keys: missing key"]] == ["bn.running_var: in %s, not in %s" % (f["plain"], f["odd"])],
            "diff-keys odd: missing %s" % by_title["diff-keys: missing key"])
    s.check([a["message"] for a in by_title["diff-keys: shape mismatch"]] == ["conv.weight: 8×3×5×5 vs 8×3×3×3 in the reference — " + str(j.get("shape_hint"))],
            "diff-keys odd: shape %s" % by_title["diff-keys: shape mismatch"])
    dt = by_title["diff-keys: dtype mismatch"]
    s.check([(a["level"], a["message"]) for a in dt] == [("warning", "head.bias: float16 vs float32 in the reference")],
            "diff-keys odd: dtype %s" % dt)
    s.check(len(o.findings) == len(j["missing"]) + len(j["unexpected"]) + len(j["shape_mismatch"]) + len(j["dtype_mismatch"]),
            "diff-keys odd: one annotation per row of the JSON")
    check_summary(s, o, "diff-keys", 3, 1)
    # The raw line: the key's escapes in the message, the path's (':' and ',' too) in file=.
    raw = [l for l in o.out.split("\n") if "unexpected" in l]
    s.check(len(raw) == 1 and raw[0].startswith("::error file=" + escape(f["odd"], True) + ",title=diff-keys%3A unexpected key::"
                                                 + escape(NASTY_KEY) + ": in "), "diff-keys odd: raw line %r" % raw)
    o = g.github("diff-keys", f["odd"], f["plain"], "--strict-dtype")
    s.check(o.rc == 1 and [a["level"] for a in o.annotations if a["title"] == "diff-keys: dtype mismatch"] == ["error"],
            "diff-keys --strict-dtype: the dtype is an error")
    # A dtype difference alone: a warning, exit 0.
    o = g.github("diff-keys", f["plain"], f["odd"], "--ignore", "conv.weight", "--ignore", "bn.running_var", "--ignore", "head,1*")
    s.check(o.rc == 0 and [a["level"] for a in o.annotations] == ["warning"], "dtype alone: exit %d %s" % (o.rc, o.annotations))
    check_summary(s, o, "diff-keys", 0, 1)

    # The cap: 140 findings → 50 annotations, one warning for the 90 left out, the summary.
    o = g.github("diff-keys", f["wide"], f["wide_ref"])
    rc, j = g.report("diff-keys", f["wide"], f["wide_ref"])
    s.check(o.rc == rc == 1 and len(j["missing"]) + len(j["unexpected"]) == 140, "wide: exit %d" % o.rc)
    s.check(len(o.annotations) == CAP + 1, "wide: %d annotations, want %d + 1" % (len(o.annotations), CAP))
    first = [a["message"].split(":")[0] for a in o.annotations[:CAP]]
    s.check(first == (j["missing"] + j["unexpected"])[:CAP], "wide: the first %d findings in order" % CAP)
    last = o.annotations[-1]
    s.check(last["level"] == "warning" and last["file"] == f["wide"] and last["title"] == "ckpt-tool: more findings"
            and last["message"].startswith("90 more findings not annotated") and "--json" in last["message"],
            "wide: the last warning %s" % last)
    check_summary(s, o, "diff-keys", 140, 0, 90)

    # Errors: exit 2, the one line on stderr, and an annotation naming the file that failed.
    o = g.github("diff-keys", f["plain"], s.path("nowhere.pth"))
    s.check(o.rc == 2 and len(o.err.strip().split("\n")) == 1 and "nowhere.pth: cannot open" in o.err,
            "diff-keys error: exit %d %r" % (o.rc, o.err))
    s.check([(a["level"], a["file"], a["title"]) for a in o.annotations] == [("error", s.path("nowhere.pth"), "ckpt-tool error")]
            and o.annotations[0]["message"].startswith("cannot open") and o.summary is None and not o.other,
            "diff-keys error annotation: %r" % o.out)


def test_verify(s, g, f):
    o = g.github("verify", f["plain"], "--write-fingerprint", f["fp"])
    s.check(o.rc == 0 and not o.annotations and o.other == ["fingerprint written to " + f["fp"]], "verify clean: %d %r" % (o.rc, o.out))
    check_summary(s, o, "verify", 0, 0)

    def same_as_json(name, *args, titles):
        o = g.github("verify", *args)
        rc, j = g.report("verify", *args)
        want = [("error", args[0], titles[x["kind"]], x["message"]) for x in j.get("findings", [])]
        got = [(a["level"], a.get("file"), a.get("title"), a["message"]) for a in o.annotations]
        s.check(o.rc == rc == 1 and got == want and want, "verify %s: exit %d/%d\n  %s\n  want %s" % (name, o.rc, rc, got, want))
        check_summary(s, o, "verify", len(want), 0)
        return o

    same_as_json("NaN, Inf, custom class", f["bad"],
                 titles={"nan": "verify: NaN", "inf": "verify: Inf", "unsafe_global": "verify: unsafe global"})
    o = same_as_json("drift", f["nudged"], f["fp"], titles={"drift": "verify: drift"})
    s.check(any(a["message"].startswith("head.weight: ") for a in o.annotations), "verify drift: names the tensor")
    same_as_json("CRC", f["crc"], titles={"crc_mismatch": "verify: CRC mismatch", "nan": "verify: NaN", "inf": "verify: Inf"})

    # The text report keeps no rows (it prints none): its findings and tensor count are the JSON
    # report's, taken as each tensor is read.
    for name in ("bad", "crc", "plain"):
        o = g.run("verify", f[name])
        rc, j = g.report("verify", f[name])
        lines = o.out.split("\n")
        want_count = " %d tensors, " % len(j.get("tensors", []))
        got = [re.sub(r"^  \S+  ", "", line) for line in lines[1:] if line.startswith("  ") and not line.startswith("  …")]
        want = [x["message"] for x in j.get("findings", [])][:len(got)]
        s.check(o.rc == rc and want_count in lines[0] and got == want and (rc == 0 or got),
                "verify %s as text: exit %d/%d, %r\n  got %s\n  want %s" % (name, o.rc, rc, lines[0], got, want))
    o = same_as_json("the nasty key", f["odd"], f["plain"],
                     titles={"nan": "verify: NaN", "changed": "verify: changed tensor", "extra": "verify: extra tensor",
                             "missing": "verify: missing tensor", "drift": "verify: drift"})
    s.check(any(a["message"].startswith(NASTY_KEY + " holds 1 NaN of 16 values, the first at [") for a in o.annotations)
            and NASTY_KEY + " is not in the reference" in [a["message"] for a in o.annotations],
            "verify: the nasty key round-trips: %s" % [a["message"] for a in o.annotations])
    o = g.github("verify", f["nan60"])
    s.check(o.rc == 1 and len(o.annotations) == CAP + 1 and o.annotations[-1]["message"].startswith("10 more findings")
            and o.annotations[-1]["file"] == f["nan60"], "verify cap: %d annotations, last %s" % (len(o.annotations), o.annotations[-1:]))
    check_summary(s, o, "verify", 60, 0, 10)
    o = g.github("verify", f["truncated"])
    s.check(o.rc == 2 and len(o.err.strip().split("\n")) == 1 and [(a["level"], a["file"], a["title"]) for a in o.annotations]
            == [("error", f["truncated"], "ckpt-tool error")] and o.summary is None, "verify truncated: %d %r %r" % (o.rc, o.out, o.err))


def test_scan(s, g, f):
    o = g.github("scan", f["plain"], os.path.join(ROOT, "data", "resnet_ddp.pth"), os.path.join(ROOT, "data", "training.pth"))
    s.check(o.rc == 0 and not o.annotations and not o.other, "scan clean: %d %r" % (o.rc, o.out))
    check_summary(s, o, "scan", 0, 0)

    files = [f["plain"], f["shell"], f["custom"], f["weird_global"]]
    # Default-deny: every finding, dangerous or unknown, is an ::error and exit 1; --strict is kept
    # for scripts and changes nothing.
    for strict in (False, True):
        extra = ("--strict",) if strict else ()
        o = g.github("scan", *(files + list(extra)))
        rc, j = g.report("scan", *(files + list(extra)))
        want = []
        for rep in j.get("files", []):
            for x in rep["findings"]:
                where = "%sat byte %d%s" % (x["opcode"] + " " if x["opcode"] else "", x["offset"], " of " + x["record"] if x["record"] else "")
                want.append(("error", rep["file"], "scan: %s %s" % (x["severity"], x["kind"].replace("_", " ")), "%s (%s)" % (x["message"], where)))
        got = [(a["level"], a.get("file"), a.get("title"), a["message"]) for a in o.annotations]
        s.check(o.rc == rc == 1 and got == want, "scan strict=%s: exit %d/%d\n  %s\n  want %s" % (strict, o.rc, rc, got, want))
        titles = {(a["file"], a["title"], a["level"]) for a in o.annotations}
        s.check((f["shell"], "scan: dangerous global", "error") in titles and (f["custom"], "scan: unknown global", "error") in titles,
                "scan strict=%s: %s" % (strict, titles))
        s.check(any(a["message"].startswith("pkg,1:50%.Klass: on no allow-list") and a["file"] == f["weird_global"] for a in o.annotations),
                "scan: the global with , : %% round-trips: %s" % [a["message"] for a in o.annotations])
        check_summary(s, o, "scan", len(want), 0)
    # Unknown only: errors too, exit 1; allowed, it is clean.
    o = g.github("scan", f["custom"])
    s.check(o.rc == 1 and o.annotations and all(a["level"] == "error" for a in o.annotations), "scan unknown only: %d %s" % (o.rc, o.annotations))
    o = g.github("scan", f["custom"], "--allow", "__main__.Custom")
    s.check(o.rc == 0 and not o.annotations, "scan unknown, allowed: %d %s" % (o.rc, o.annotations))
    # The cap across a run, and the warning's file when all the rest are in one file.
    o = g.github("scan", f["shell"], f["many_globals"])
    rc, j = g.report("scan", f["shell"], f["many_globals"])
    n = sum(len(x["findings"]) for x in j["files"])
    s.check(n > CAP and len(o.annotations) == CAP + 1 and o.annotations[-1]["file"] == f["many_globals"]
            and o.annotations[-1]["message"].startswith("%d more findings" % (n - CAP)), "scan cap: %d findings, %s" % (n, o.annotations[-1:]))
    # A file that cannot be scanned: exit 2, its line on stderr, an error annotation in its place.
    o = g.github("scan", f["shell"], f["truncated"], f["plain"])
    s.check(o.rc == 2 and f["truncated"] in o.err and any(a["title"] == "ckpt-tool error" and a["file"] == f["truncated"] for a in o.annotations)
            and any(a["title"] == "scan: dangerous global" for a in o.annotations), "scan with an unreadable file: %d %r" % (o.rc, o.out))


def test_options(s, g, f):
    for args in (("diff-keys", f["ddp"], f["plain"]), ("verify", f["bad"]), ("scan", f["shell"], f["custom"])):
        name = args[0]
        j1, j2 = g.run(*(args + ("--json",))), g.run(*(args + ("--format", "json")))
        s.check(j1.rc == j2.rc == 1 and j1.out == j2.out and json.loads(j1.out)["command"] == name, "%s: --json is --format json" % name)
        t1, t2 = g.run(*args), g.run(*(args + ("--format", "text")))
        s.check(t1.rc == t2.rc == 1 and t1.out == t2.out and not t1.out.startswith("::"), "%s: text is the default" % name)
        for bad in (("--json", "--format", "github"), ("--format", "github", "--json"), ("--json", "--format", "text")):
            o = g.run(*(args + bad))
            s.check(o.rc == 2 and o.out == "" and "contradict" in o.err and len(o.err.strip().split("\n")) == 1,
                    "%s %s: exit %d out %r err %r" % (name, bad, o.rc, o.out, o.err))
        o = g.run(*(args + ("--format", "gitlab")))
        s.check(o.rc == 2 and o.out == "" and "gitlab" in o.err, "%s --format gitlab: exit %d" % (name, o.rc))
        h = g.run(name, "--help")
        s.check(h.rc == 0 and "--format" in h.out and "github" in h.out, "%s --help lists --format" % name)


def main():
    def body(s, _args):
        g = Gh(s)
        f = fixtures(s)
        test_diff_keys(s, g, f)
        test_verify(s, g, f)
        test_scan(s, g, f)
        test_options(s, g, f)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
