#!/usr/bin/python3
"""`scan` on one hostile file per class of miss that issue 18 names, each built here byte by byte.

Where it is safe to show, a payload is proven real first: a child /usr/bin/python3 (3.11, torch 1.13,
numpy 1.24) loads it the way a victim would (pickle.loads, pickle.load of a file or a BytesIO,
numpy.load, torch.load) in a scratch directory, and a marker file appears. Then `scan --json` must
exit 1 with the findings named (by global, or by kind for what has no global), and the marker must
not appear again. Classes: default-deny (gadgets of the standard library, torch and numpy that no
deny-list had, a user's class), dotted names and module aliases, every pickle (stacked, after junk,
protocol 0/1 without PROTO, FRAME lengths that lie, .npy/.npz object arrays, pickles carried as
base64/hex and decoded by the payload, zip quirks torch reads through), malformed streams (missing
MARK, a dict or set that contains itself, a second PROTO, names computed at load time, BUILD on a
module, EXT codes, INST/OBJ/NEWOBJ_EX, NEWOBJ of a function), expansion by reference; and the other
side: harmless names upstream calls safe, a file that is no pickle, SARIF output.

Usage: test_scan_classes.py --tool PATH --work DIR
"""
import base64
import binascii
import io
import json
import marshal
import os
import pickle
import struct
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_repair import schema_problems, suite_main  # noqa: E402

PY = "/usr/bin/python3"
MARK = "MARK"
TOUCH = "touch " + MARK


# --- opcodes by hand ------------------------------------------------------------------------------
def g(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def s(text):
    b = text.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def sb(text):  # SHORT_BINUNICODE (protocol 4)
    b = text.encode()
    return b"\x8c" + bytes([len(b)]) + b


def by(data):
    return b"B" + struct.pack("<I", len(data)) + data


def call(fn, *args):
    return fn + b"(" + b"".join(args) + b"tR"


def p(body, proto=2):
    return b"\x80" + bytes([proto]) + body + b"."


def os_system(cmd=TOUCH, proto=2):
    return p(call(g("os", "system"), s(cmd)), proto)


def zip_of(members, method=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def patch_zip(data, fn):
    """fn(bytearray, infolist) edits the archive's bytes in place."""
    b = bytearray(data)
    fn(b, zipfile.ZipFile(io.BytesIO(data)).infolist())
    return bytes(b)


def set_flag(b, infos, bit):
    for i in infos:
        b[i.header_offset + 6] |= bit
    cd = b.rfind(b"PK\x01\x02")
    while cd >= 0:
        b[cd + 8] |= bit
        cd = b.rfind(b"PK\x01\x02", 0, cd)


def rename_local(b, infos, new):
    i = infos[0]
    n = len(i.filename)
    b[i.header_offset + 30:i.header_offset + 30 + n] = new.encode()


def frame_lie():
    """A FRAME whose length ends inside a BINBYTES (CPython issue 154848): pickle.loads and pickletools
    read a long bytestring; the C unpickler reading a file (torch.load's BytesIO) drops the rest of
    the frame and runs the GLOBAL/REDUCE buried in it."""
    hidden = g("os", "system") + b"V" + TOUCH.encode() + b"\n\x85R"
    return (b"\x80\x05N" + b"V" + b"a" * (8192 * 16 - 17) + b"\n" + b"0(" + b"\x95" + struct.pack("<Q", 2)
            + b"B\x07\x01\x00\x00" + b"\x00\x00" + (hidden + b"(").ljust(261, b"N") + b"1.")


def npy_object(elements_pickle):
    """An .npy of dtype object whose data is `elements_pickle` (numpy.save writes a pickle there)."""
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + elements_pickle


def laughs(levels=10):
    """A list of 10 references to a list of 10 references … : 10**levels references, a few hundred bytes."""
    body = s("lol") + b"q\x00"
    for k in range(levels):
        body += b"(" + (b"h" + bytes([k])) * 10 + b"l" + b"q" + bytes([k + 1])
    return p(body)


def code_object():
    return marshal.dumps(compile("import os; os.system(%r)" % TOUCH, "x", "exec"))


# --- the cases ------------------------------------------------------------------------------------
LOAD_PICKLE = "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read())"
LOAD_BYTESIO = "import pickle, io, sys; pickle.load(io.BytesIO(open(sys.argv[1], 'rb').read()))"
LOAD_TWICE = "import pickle, sys\nf = open(sys.argv[1], 'rb')\npickle.load(f)\npickle.load(f)"
LOAD_NPY = "import numpy, sys; numpy.load(sys.argv[1], allow_pickle=True)"
LOAD_NPZ = "import numpy, sys\nz = numpy.load(sys.argv[1], allow_pickle=True)\nfor k in z.files: z[k]"


def cases():
    """(name, file name, bytes, must find: {(severity, global or kind)}, how to prove it ran or None)."""
    shell = os_system()
    b64 = base64.b64encode(shell).decode()
    hexed = binascii.hexlify(shell).decode()
    return [
        # Default-deny: the gadgets no deny-list kept up with, and a class of the user's.
        ("types.FunctionType(marshal.loads(code))", "code.pkl",
         p(call(call(g("types", "FunctionType"), call(g("marshal", "loads"), by(code_object())), b"}"))),
         {("dangerous", "types.FunctionType"), ("dangerous", "marshal.loads")}, LOAD_PICKLE),
        ("pkgutil.resolve_name", "resolve.pkl", p(call(call(g("pkgutil", "resolve_name"), s("os:system")), s(TOUCH))),
         {("dangerous", "pkgutil.resolve_name"), ("dangerous", "computed_call")}, LOAD_PICKLE),
        ("pydoc.locate", "locate.pkl", p(call(call(g("pydoc", "locate"), s("os.system")), s(TOUCH))),
         {("dangerous", "pydoc.locate")}, LOAD_PICKLE),
        ("cProfile.run", "cprofile.pkl", p(call(g("cProfile", "run"), s("import os; os.system(%r)" % TOUCH))),
         {("dangerous", "cProfile.run")}, LOAD_PICKLE),
        ("timeit.timeit", "timeit.pkl", p(call(g("timeit", "timeit"), s("pass"), s("__import__('os').system(%r)" % TOUCH))),
         {("dangerous", "timeit.timeit")}, LOAD_PICKLE),
        ("logging.FileHandler", "filehandler.pkl", p(call(g("logging", "FileHandler"), s(MARK))),
         {("dangerous", "logging.FileHandler")}, LOAD_PICKLE),
        ("_io.FileIO", "fileio.pkl", p(call(g("_io", "FileIO"), s(MARK), s("w"))), {("dangerous", "_io.FileIO")}, LOAD_PICKLE),
        ("torch.utils.collect_env.run", "collect_env.pkl", p(call(g("torch.utils.collect_env", "run"), s(TOUCH))),
         {("dangerous", "torch.utils.collect_env.run")}, LOAD_PICKLE),
        ("numpy.testing runstring", "runstring.pkl",
         p(call(g("numpy.testing._private.utils", "runstring"), s("import os; os.system(%r)" % TOUCH), b"}")),
         {("dangerous", "numpy.testing._private.utils.runstring")}, LOAD_PICKLE),
        ("a stdlib name on no list", "stdlib.pkl", p(call(g("string", "capwords"), s("x"))),
         {("dangerous", "string.capwords")}, None),
        ("a user's class", "user.pkl", p(call(g("mylib.models", "Net"))), {("unknown", "mylib.models.Net")}, None),
        ("a third-party network library", "requests.pkl", p(call(g("requests.api", "get"), s("http://x"))),
         {("dangerous", "requests.api.get")}, None),
        # Dotted names, resolved attribute by attribute (protocol 4).
        ("builtins.eval.__call__", "eval_call.pkl", p(call(g("builtins", "eval.__call__"), s("__import__('os').system(%r)" % TOUCH)), 4),
         {("dangerous", "builtins.eval.__call__")}, LOAD_PICKLE),
        ("pathlib.os.system", "pathlib_os.pkl", p(call(sb("pathlib") + sb("os.system") + b"\x93", s(TOUCH)), 4),
         {("dangerous", "pathlib.os.system")}, LOAD_PICKLE),
        ("numpy.__builtins__", "np_builtins.pkl", p(sb("numpy") + sb("__builtins__") + b"\x93", 4),
         {("dangerous", "numpy.__builtins__")}, None),
        ("_operator.attrgetter alias", "attrgetter.pkl",
         p(call(call(call(g("_operator", "attrgetter"), s("system")), call(g("builtins", "__import__"), s("os"))), s(TOUCH))),
         {("dangerous", "_operator.attrgetter"), ("dangerous", "builtins.__import__")}, LOAD_PICKLE),
        ("nt.system alias, a bare reference", "nt.pkl", p(g("nt", "system")), {("dangerous", "nt.system")}, None),
        # Every pickle.
        ("a second pickle after STOP", "stacked.pkl", pickle.dumps(["a", "b"], protocol=2) + shell,
         {("dangerous", "os.system")}, LOAD_TWICE),
        ("a pickle after a broken one", "after_broken.pkl", b"\x80\x02cbuiltins\nlen\nq\x00c\xff\n" + shell,
         {("dangerous", "os.system")}, None),
        ("a pickle after junk", "junk.pkl", pickle.dumps({"a": 1}, protocol=2) + b"\x00\x00junk" + shell, {("dangerous", "os.system")}, None),
        ("protocol 0, no PROTO", "p0.pkl", b"cos\nsystem\n(S'" + TOUCH.encode() + b"'\ntR.", {("dangerous", "os.system")}, LOAD_PICKLE),
        ("protocol 1 opcodes, no PROTO", "p1.pkl", b"cposix\nsystem\nq\x00(" + s(TOUCH) + b"tq\x01Rq\x02.",
         {("dangerous", "posix.system")}, LOAD_PICKLE),
        ("a FRAME whose length lies", "frame.pkl", frame_lie(), {("dangerous", "frame_violation"), ("dangerous", "os.system")}, LOAD_BYTESIO),
        ("BINBYTES that starts in a FRAME and ends past it", "frame_bytes.pkl",
         b"\x80\x05\x95" + struct.pack("<Q", 5) + b"B" + struct.pack("<I", 20) + b"A" * 20 + b".", {("dangerous", "frame_violation")}, None),
        ("a GLOBAL line cut by its FRAME", "frame_global.pkl", b"\x80\x05\x95" + struct.pack("<Q", 7) + g("os", "system") + b".",
         {("dangerous", "frame_violation"), ("dangerous", "os.system")}, None),
        (".npz member whose header length lies", "npz_header.npz",
         zip_of([("arr_0.npy", b"\x93NUMPY\x01\x009\x00{'descr': '<O8', 'fortran_order': False, 'shape': (1,), }      \n"
                              b"cos\nsystem\n(S'echo x'\ntR.")]), {("dangerous", "os.system")}, None),
        (".npy object array", "obj.npy", npy_object(p(call(g("os", "system"), s(TOUCH)), 3)), {("dangerous", "os.system")}, LOAD_NPY),
        (".npz member", "obj.npz", zip_of([("arr_0.npy", npy_object(p(call(g("os", "system"), s(TOUCH)), 3)))]),
         {("dangerous", "os.system")}, LOAD_NPZ),
        (".npz member, deflated", "objz.npz", zip_of([("arr_0.npy", npy_object(p(call(g("os", "system"), s(TOUCH)), 3)))], zipfile.ZIP_DEFLATED),
         {("dangerous", "os.system")}, LOAD_NPZ),
        ("base64 decoded by the payload", "b64.pkl", p(call(g("pickle", "loads"), call(g("base64", "b64decode"), s(b64)))),
         {("dangerous", "pickle.loads"), ("dangerous", "os.system")}, LOAD_PICKLE),
        ("hex decoded by codecs", "hex.pkl", p(call(g("pickle", "loads"), call(g("_codecs", "decode"), s(hexed), s("hex")))),
         {("dangerous", "pickle.loads"), ("dangerous", "os.system")}, LOAD_PICKLE),
        ("hex decoded by binascii", "unhex.pkl", p(call(g("_pickle", "loads"), call(g("binascii", "unhexlify"), s(hexed)))),
         {("dangerous", "_pickle.loads"), ("dangerous", "os.system")}, LOAD_PICKLE),
        ("protocol 0 pickle handed to pickle.loads", "nested_p0.pkl",
         p(call(g("pickle", "loads"), by(b"cos\nsystem\n(S'" + TOUCH.encode() + b"'\ntR."))),
         {("dangerous", "pickle.loads"), ("dangerous", "os.system")}, LOAD_PICKLE),
        ("zip: encryption bit on a plain member", "flag1.zip", patch_zip(zip_of([("model/data.pkl", shell)]), lambda b, i: set_flag(b, i, 1)),
         {("dangerous", "os.system")}, None),
        ("zip: local header name differs", "localname.zip", patch_zip(zip_of([("data.pkl", shell)]), lambda b, i: rename_local(b, i, "datap.kl")),
         {("dangerous", "os.system")}, None),
        ("zip: a pickle in a member with no .pkl name", "member.zip", zip_of([("archive/extra/config", shell)]), {("dangerous", "os.system")}, None),
        ("zip: protocol 0 in a text member", "text.zip", zip_of([("payload.txt", b"cos\nsystem\n(S\"echo x\"\ntR.")]), {("dangerous", "os.system")}, None),
        # Malformed streams: the unpickler runs what comes before the fault.
        ("a missing MARK after a call", "nomark.pkl", b"\x80\x02" + call(g("os", "system"), s(TOUCH)) + b"t.",
         {("dangerous", "os.system"), ("dangerous", "malformed_pickle")}, LOAD_PICKLE),
        ("TUPLE without MARK", "tuple.pkl", b"\x80\x04t.", {("dangerous", "malformed_pickle")}, None),
        ("a dict that is its own key", "selfdict.pkl", b"\x80\x04}\x94h\x00Vv\ns.", {("dangerous", "malformed_pickle")}, None),
        ("a set that contains itself", "selfset.pkl", b"\x80\x04\x8f\x94(h\x00\x90.", {("dangerous", "malformed_pickle")}, None),
        ("a second PROTO", "proto.pkl", pickle.dumps([1, 2, 3, 4], protocol=4)[:-1] + b"\x80\x01\x80\x02.", {("dangerous", "misplaced_proto")}, None),
        ("a name computed at load time", "computed.pkl",
         p(call(call(g("builtins", "str"), s("os")) + call(g("builtins", "str"), s("system")) + b"\x93", s(TOUCH)), 4),
         {("dangerous", "computed_global")}, LOAD_PICKLE),
        ("BUILD on a module", "build_module.pkl", p(sb("torch") + sb("_utils") + b"\x93" + b"N}" + sb("x") + b"K\x01s\x86b0N", 4),
         {("dangerous", "mutates_global"), ("dangerous", "torch._utils")}, None),
        ("EXT1 code", "ext.pkl", b"\x80\x02\x82\x01(" + s(TOUCH) + b"tR.", {("dangerous", "extension_code")}, None),
        ("INST", "inst.pkl", b"(S'" + TOUCH.encode() + b"'\nios\nsystem\n.", {("dangerous", "os.system")}, LOAD_PICKLE),
        ("OBJ", "obj.pkl", b"(cos\nsystem\nS'" + TOUCH.encode() + b"'\no.", {("dangerous", "os.system")}, LOAD_PICKLE),
        ("NEWOBJ_EX of os._wrap_close", "newobj_ex.pkl", b"\x80\x04cos\n_wrap_close\n)}\x92.", {("dangerous", "os._wrap_close")}, None),
        ("NEWOBJ of a function, SETITEM into it (CVE-2026-24747)", "cve.pkl",
         b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00)\x81q\x01X\x03\x00\x00\x00keyX\x05\x00\x00\x00values.",
         {("dangerous", "newobj_function"), ("dangerous", "mutates_result")}, None),
        ("expansion by reference", "laughs.pkl", laughs(), {("dangerous", "expansion")}, None),
    ]


def run_for_real(work, path, code):
    subprocess.run([PY, "-c", code, path], cwd=work, capture_output=True, timeout=120)


def scan_json(s_, *args):
    r = subprocess.run([s_.tool, "scan", "--json"] + list(args), capture_output=True, text=True)
    j = json.loads(r.stdout) if r.stdout.strip() else {"files": [], "errors": []}
    return r.returncode, j, r.stderr


def found(j):
    out = set()
    for f in j["files"]:
        for x in f["findings"]:
            out.add((x["severity"], x["kind"]))
            if x["global"]:
                out.add((x["severity"], x["global"]))
    return out


def test_classes(s_):
    work = s_.path("classes")
    os.makedirs(work)
    marker = os.path.join(work, MARK)
    for name, fname, data, want, prove in cases():
        path = os.path.join(work, fname)
        with open(path, "wb") as f:
            f.write(data)
        if prove:
            run_for_real(work, path, prove)
            s_.check(os.path.exists(marker), "%s: the payload is not real (the marker did not appear)" % name)
            if os.path.exists(marker):
                os.remove(marker)
        rc, j, err = scan_json(s_, path)
        got = found(j)
        s_.check(rc == 1 and want <= got, "%s: exit %d, want %s in %s %s" % (name, rc, sorted(want), sorted(got), err.strip()))
        s_.check(not schema_problems(j), "%s: JSON vs schema: %s" % (name, schema_problems(j)[:3]))
        text = subprocess.run([s_.tool, "scan", path], capture_output=True, text=True)
        s_.check(text.returncode == 1 and ("dangerous" in text.stdout or "unknown" in text.stdout), "%s: text: %s" % (name, text.stdout))
        s_.check(not os.path.exists(marker), "%s: the marker exists after the scan" % name)
    # The FRAME lie: the hidden GLOBAL is reported at its byte in the file, not in the re-read stream.
    rc, j, _ = scan_json(s_, os.path.join(work, "frame.pkl"))
    data = frame_lie()
    at = [x["offset"] for f in j["files"] for x in f["findings"] if x["global"] == "os.system"]
    s_.check(at == [data.index(b"cos\nsystem")], "frame lie: os.system at %s, in the file at %d" % (at, data.index(b"cos\nsystem")))


def test_clean(s_):
    """Names upstream scanners call safe, and files that hold no pickle an unpickler could run."""
    work = s_.path("clean")
    os.makedirs(work)
    clean = [
        ("builtins.len over a list", p(call(g("builtins", "len"), b"]"))),
        ("collections.abc.Iterable", p(sb("collections.abc") + sb("Iterable") + b"\x93", 4)),
        ("__future__.annotations", p(sb("__future__") + sb("annotations") + b"\x93", 4)),
        ("_codecs.encode", p(call(g("_codecs", "encode"), s("abc"), s("latin1")))),
        ("decimal.Decimal", p(call(g("decimal", "Decimal"), s("1.5")))),
        ("collections.deque", p(call(g("collections", "deque"), b"]"))),
        ("a GLOBAL whose name is no UTF-8 (not a pickle)", b"cmod\n\xf8\n"),
        ("a text member of a zip", zip_of([("notes.txt", b"c\nthis is plain text\nnot a pickle stream")])),
        ("a benign pickle handed to pickle.loads inside bytes data", p(b"}" + s("blob") + by(pickle.dumps([1, 2], protocol=2)) + b"s")),
        ("bytes that only look like a pickle", p(b"}" + s("blob") + by(b"\x80\x02 not a pickle at all") + b"s")),
    ]
    for k, (name, data) in enumerate(clean):
        path = os.path.join(work, "c%02d.bin" % k)
        with open(path, "wb") as f:
            f.write(data)
        rc, j, err = scan_json(s_, path)
        s_.check(rc == 0 and not found(j), "%s: exit %d %s %s" % (name, rc, sorted(found(j)), err.strip()))


def test_sarif(s_):
    work = s_.path("classes")
    files = [os.path.join(work, f) for f in ("stacked.pkl", "user.pkl", "cve.pkl")]
    rc, j, _ = scan_json(s_, *files)
    r = subprocess.run([s_.tool, "scan", "--format", "sarif"] + files, capture_output=True, text=True)
    s_.check(r.returncode == rc == 1, "sarif exit %d" % r.returncode)
    sarif = json.loads(r.stdout)
    run = sarif["runs"][0]
    rules = {x["id"]: x for x in run["tool"]["driver"]["rules"]}
    s_.check(sarif["version"] == "2.1.0" and "sarif-2.1.0" in sarif["$schema"] and run["tool"]["driver"]["name"] == "ckpt-tool"
             and len(rules) == len(run["tool"]["driver"]["rules"]), "sarif log: %s" % list(sarif))
    want = [(f["file"], x) for f in j["files"] for x in f["findings"]]
    s_.check(len(run["results"]) == len(want), "sarif results %d, findings %d" % (len(run["results"]), len(want)))
    for res, (file, x) in zip(run["results"], want):
        loc = res["locations"][0]["physicalLocation"]
        s_.check(res["ruleId"] in rules and res["level"] == ("error" if x["severity"] == "dangerous" else "warning")
                 and loc["artifactLocation"]["uri"] == file and loc["region"]["startLine"] == 1
                 and loc["region"]["byteOffset"] == x["offset"] and res["message"]["text"].startswith(x["message"])
                 and res["partialFingerprints"], "sarif result %s for %s" % (res, x))
    for rule in rules.values():
        s_.check(rule["shortDescription"]["text"] and rule["defaultConfiguration"]["level"] in ("error", "warning")
                 and "security-severity" in rule["properties"], "sarif rule %s" % rule)
    inv = run["invocations"][0]
    s_.check(inv["executionSuccessful"] is True and not inv["toolExecutionNotifications"], "sarif invocation %s" % inv)
    # A file that cannot be scanned: exit 2, and a notification naming it.
    missing = os.path.join(work, "missing.pth")
    r = subprocess.run([s_.tool, "scan", "--format", "sarif", files[0], missing], capture_output=True, text=True)
    inv = json.loads(r.stdout)["runs"][0]["invocations"][0]
    s_.check(r.returncode == 2 and inv["executionSuccessful"] is False
             and inv["toolExecutionNotifications"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == missing,
             "sarif with a missing file: %d %s" % (r.returncode, inv))


def main():
    def body(s_, _args):
        test_classes(s_)
        test_clean(s_)
        test_sarif(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
