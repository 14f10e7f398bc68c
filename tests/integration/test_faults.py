#!/usr/bin/python3
"""The promises under faults (issue 38's first step), each tried as an unlucky user would meet it:

- nothing lost: `verify --write-fingerprint` never over the checkpoint, the reference or a file an
  input folder holds, and never over an existing file without --force; `merge` and `convert` never
  over a rank file they read, even with --force; no output replaces a device or a FIFO;
- nothing that hangs: a FIFO as the input, the reference, an allow file or a rank file is refused at
  once (a timeout here would be the hang);
- bounded: a pickle whose memo makes a few values reachable by 2^40 paths is exit 2 under a 2 GB
  address-space limit; a killed writer's temporary is removed by the next write, and said;
- one line, exit 2, nothing left behind: a write past `ulimit -f` (SIGXFSZ ignored, EFBIG named), an
  input cut short by another process while it is mapped (SIGBUS caught), a report that cannot reach
  standard output (/dev/full), an error whose text holds a newline;
and in every case the input is byte-identical afterwards and no temporary is left.

Usage: test_faults.py --tool PATH --work DIR
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from test_repair import suite_main  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "dist")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def temporaries(folder):
    return [n for n in os.listdir(folder) if n.endswith(".tmp")]


def run(s_, *args, timeout=60, **kw):
    return subprocess.run([s_.tool] + list(args), capture_output=True, text=True, timeout=timeout, **kw)


def refused(s_, what, r, needle):
    """Exit 2, one line on stderr naming what was wrong."""
    lines = r.stderr.strip().splitlines()
    s_.check(r.returncode == 2 and len(lines) == 1 and needle in lines[0],
             "%s: exit %d, stderr %r (want one line with %r)" % (what, r.returncode, r.stderr, needle))


def test_nothing_lost(s_):
    w = s_.path("lost")
    os.makedirs(w)
    ck = os.path.join(w, "model.pth")
    torch.save({"w": torch.arange(6.0), "b": torch.ones(2)}, ck)
    before = digest(ck)
    fp = os.path.join(w, "model.fp.json")
    refused(s_, "fingerprint over the checkpoint", run(s_, "verify", ck, "--write-fingerprint", ck), "never written over what it reads")
    s_.check(digest(ck) == before, "the checkpoint changed")
    s_.check(run(s_, "verify", ck, "--write-fingerprint", fp).returncode == 0, "first fingerprint")
    refused(s_, "fingerprint over an existing file", run(s_, "verify", ck, "--write-fingerprint", fp), "--force")
    s_.check(run(s_, "verify", ck, "--write-fingerprint", fp, "--force").returncode == 0, "fingerprint --force")
    fp_before = digest(fp)
    refused(s_, "fingerprint over the reference", run(s_, "verify", ck, fp, "--write-fingerprint", fp, "--force"),
            "never written over what it reads")
    s_.check(digest(fp) == fp_before, "the reference fingerprint changed")
    # A folder's rank file, with --force: merge and convert refuse; verify's fingerprint too.
    if os.path.isdir(SHARED):
        ds = os.path.join(w, "ds")
        shutil.copytree(os.path.join(SHARED, "real", "ds_zero2_r2", "ckpt"), ds)
        rank = os.path.join(ds, "global_step3", "mp_rank_00_model_states.pt")
        rank_before = digest(rank)
        refused(s_, "merge over a rank file", run(s_, "merge", ds, "-o", rank, "--force"), "never written over what it reads")
        refused(s_, "convert over a rank file", run(s_, "convert", ds, "-o", rank, "--force"), "never written over what it reads")
        refused(s_, "fingerprint over a rank file", run(s_, "verify", ds, "--write-fingerprint", rank, "--force"),
                "never written over what it reads")
        s_.check(digest(rank) == rank_before, "a rank file changed")
        s_.check(not temporaries(os.path.dirname(rank)), "temporaries left: %s" % temporaries(os.path.dirname(rank)))
    # A device or a FIFO is no output, --force or not.
    refused(s_, "convert to a device", run(s_, "convert", ck, "-o", "/dev/null", "--to", "pth", "--force"), "a device")
    fifo = os.path.join(w, "out.fifo")
    os.mkfifo(fifo)
    refused(s_, "convert to a FIFO", run(s_, "convert", ck, "-o", fifo, "--to", "safetensors", "--force", timeout=20), "a FIFO")
    refused(s_, "strip-prefix to a FIFO", run(s_, "strip-prefix", ck, "--prefix", "w", "-o", fifo, "--force", timeout=20), "a FIFO")
    s_.check(os.path.exists(fifo) and not os.path.isfile(fifo), "the FIFO was replaced")
    s_.check(digest(ck) == before and not temporaries(w), "input changed or temporaries left: %s" % temporaries(w))


def test_no_placeholders_as_weights(s_):
    """ZeRO-3's module states hold 0-element placeholders; without the optimizer files that hold the
    weights, a merge must fail naming what is missing, never write empty tensors."""
    w = s_.path("placeholders")
    os.makedirs(w)
    if os.path.isdir(SHARED):
        z3 = os.path.join(w, "z3")
        shutil.copytree(os.path.join(SHARED, "real", "ds_zero3_r2", "ckpt"), z3)
        for n in os.listdir(os.path.join(z3, "global_step3")):
            if n.endswith("optim_states.pt"):
                os.remove(os.path.join(z3, "global_step3", n))
        out = os.path.join(w, "z3.pth")
        for cmd in (["merge", z3, "-o", out], ["verify", z3], ["inspect", z3]):
            refused(s_, "ZeRO-3 without optimizer files: " + cmd[0], run(s_, *cmd), "optimizer files")
        s_.check(not os.path.exists(out), "a merge of placeholders was written")
    # The module states of ZeRO-1/2's name but with placeholders (a universal checkpoint's copy of a
    # ZeRO-3 save): param_shapes says what the parameters are.
    tag = os.path.join(w, "copy", "global_step1")
    os.makedirs(tag)
    with open(os.path.join(w, "copy", "latest"), "w") as f:
        f.write("global_step1")
    import collections
    torch.save({"module": collections.OrderedDict([("l1.weight", torch.empty(0)), ("l1.bias", torch.empty(0))]),
                "param_shapes": [collections.OrderedDict([("l1.weight", torch.Size([5, 6])), ("l1.bias", torch.Size([5]))])],
                "buffer_names": [], "ds_version": "0.16.5", "dp_world_size": 1},
               os.path.join(tag, "mp_rank_00_model_states.pt"))
    out = os.path.join(w, "copy.pth")
    refused(s_, "module states of placeholders", run(s_, "merge", os.path.join(w, "copy"), "-o", out), "placeholder for l1.weight")
    s_.check(not os.path.exists(out), "a merge of placeholders was written")
    # ZeRO-3 optimizer files whose optimizer_state_dict names no zero_stage (found by fuzz_dist: the
    # reader printed the absent field and died, SIGSEGV): one line naming the file.
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    import make_dist
    nozs = os.path.join(w, "nozs")
    make_dist.write_deepspeed(nozs, stage=3, ws=2, groups=[[("a", (3, 2))]])
    for n in os.listdir(os.path.join(nozs, "global_step1")):
        if n.endswith("optim_states.pt"):
            f = os.path.join(nozs, "global_step1", n)
            d = torch.load(f)
            d["optimizer_state_dict"]["zero_stagf"] = d["optimizer_state_dict"].pop("zero_stage")
            torch.save(d, f)
    for cmd in (["inspect", nozs], ["verify", nozs], ["merge", nozs, "-o", os.path.join(w, "nozs.pth")]):
        refused(s_, "ZeRO-3 optimizer states without zero_stage: " + cmd[0], run(s_, *cmd), "names no zero_stage")


def test_nothing_hangs(s_):
    w = s_.path("hang")
    os.makedirs(w)
    ck = os.path.join(w, "model.pth")
    torch.save({"w": torch.arange(6.0)}, ck)
    fifo = os.path.join(w, "in.fifo")
    os.mkfifo(fifo)
    # No writer ever opens the FIFO: a tool that opened it blocking would hang until the timeout.
    for what, args in (("inspect", ["inspect", fifo]), ("scan", ["scan", fifo]), ("verify", ["verify", fifo]),
                       ("a reference", ["verify", ck, fifo]), ("diff-keys reference", ["diff-keys", ck, fifo]),
                       ("an allow file", ["scan", ck, "--allow-file", fifo])):
        try:
            r = run(s_, *args, timeout=20)
        except subprocess.TimeoutExpired:
            s_.check(False, "%s: a FIFO hangs the tool" % what)
            continue
        refused(s_, what + " as a FIFO", r, "FIFO")


def test_one_line_and_nothing_left(s_):
    w = s_.path("faults")
    os.makedirs(w)
    ck = os.path.join(w, "model.pth")
    torch.save({"w%d" % i: torch.randn(1 << 16) for i in range(16)}, ck)
    before = digest(ck)
    # ulimit -f: SIGXFSZ would kill the writer with no word; the write fails with EFBIG instead.
    for what, args in (("convert", ["convert", ck, "-o", os.path.join(w, "big.safetensors")]),
                       ("strip-prefix", ["strip-prefix", ck, "--prefix", "w", "-o", os.path.join(w, "s.pth")]),
                       ("convert pth", ["convert", ck, "-o", os.path.join(w, "c.pth"), "--dtype", "float16"])):
        r = subprocess.run(["/bin/bash", "-c", 'ulimit -f 64; exec "$0" "$@"', s_.tool] + args, capture_output=True, text=True, timeout=60)
        refused(s_, what + " past ulimit -f", r, "File too large")
    s_.check(digest(ck) == before and not temporaries(w), "after ulimit -f: input changed or temporaries left %s" % temporaries(w))
    # An input cut short while it is mapped: SIGBUS becomes one line naming the file, exit 2, and no
    # temporary stays; at other moments the cut is met as a short file (exit 2 too).
    # (Not under AddressSanitizer, whose own SIGBUS handling is not the tool's.)
    big = os.path.join(w, "big.pt")
    torch.save({"w%d" % i: torch.randn(1 << 20) for i in range(48)}, big)
    seen_bus = False
    for delay in () if "ASAN_OPTIONS" in os.environ else (0.02, 0.05, 0.1, 0.2):
        for cmd in (["verify"], ["strip-prefix", "--prefix", "w", "-o", os.path.join(w, "cut.pth"), "--force"]):
            victim = os.path.join(w, "victim.pt")
            shutil.copy(big, victim)
            p = subprocess.Popen([s_.tool, cmd[0], victim] + cmd[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            os.truncate(victim, 1 << 20)
            out, err = p.communicate(timeout=60)
            s_.check(p.returncode in (0, 2) and len(err.strip().splitlines()) <= 1,
                     "%s cut at %.2f s: exit %d (a signal is negative), stderr %r" % (cmd[0], delay, p.returncode, err))
            seen_bus |= "changed while it was read" in err
            s_.check(not temporaries(w), "%s cut: temporaries left %s" % (cmd[0], temporaries(w)))
    print("SIGBUS met and reported: %s" % seen_bus)
    # A report that cannot reach standard output.
    with open("/dev/full", "w") as full:
        r = subprocess.run([s_.tool, "inspect", "--json", ck], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    refused(s_, "inspect --json > /dev/full", r, "standard output")
    # An error whose text holds a newline (a tensor name of a safetensors header): still one line.
    header = json.dumps({"a\nb\x1b[31m": {"dtype": "F32", "shape": [4], "data_offsets": [0, 99]}}).encode()
    bad = os.path.join(w, "bad.safetensors")
    with open(bad, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    r = run(s_, "inspect", bad)
    s_.check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "\x1b" not in r.stderr,
             "an error with a newline: exit %d, stderr %r" % (r.returncode, r.stderr))


def test_bounded(s_):
    """A pickle whose memo makes 80 values reachable by 2^40 paths: exit 2 at bounded memory, naming the
    file (was: gigabytes, then std::bad_alloc). A killed writer's temporary is removed by the next
    write of the same output, and said."""
    w = s_.path("bounded")
    os.makedirs(w)
    pk = b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s"
    for i in range(1, 41):  # dict i = {'x': dict i-1, 'y': dict i-1}
        pk += b"}q" + bytes([i]) + b"(X\x01\x00\x00\x00xh" + bytes([i - 1]) + b"X\x01\x00\x00\x00yh" + bytes([i - 1]) + b"u"
    path = os.path.join(w, "paths.pt")
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("paths/data.pkl", pk + b".")
        z.writestr("paths/version", "3\n")
    for cmd in ("inspect", "verify"):
        # (AddressSanitizer reserves terabytes of address space: no limit under it.)
        limit = "" if "ASAN_OPTIONS" in os.environ else "ulimit -v 2000000; "
        r = subprocess.run(["/bin/bash", "-c", limit + 'exec "$0" "$@"', s_.tool, cmd, path],
                           capture_output=True, text=True, timeout=120)
        refused(s_, cmd + " of 2^40 paths", r, "paths")
        s_.check(path in r.stderr, "%s: the error names the file: %s" % (cmd, r.stderr))
    # A temporary of a writer killed outright (its PID gone) beside the output: removed, and said.
    src = os.path.join(w, "m.pth")
    torch.save({"w": torch.ones(3)}, src)
    stale = os.path.join(w, ".out.pth.99999999.0000abcd.tmp")
    with open(stale, "wb") as f:
        f.write(b"half a file")
    r = run(s_, "convert", src, "-o", os.path.join(w, "out.pth"))
    s_.check(r.returncode == 0 and not os.path.exists(stale) and "killed run" in r.stderr,
             "stale temporary: exit %d, still there %s, stderr %r" % (r.returncode, os.path.exists(stale), r.stderr))


def rezip(src, dst, replace):
    """`src`, a zip, written to `dst` with the members named in `replace` (by their suffix) swapped."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as o:
        for n in z.namelist():
            data = z.read(n)
            for suffix, new in replace.items():
                if n.endswith(suffix):
                    data = new
            o.writestr(n, data)


def test_torchscript_reference(s_):
    """A TorchScript reference whose constants.pkl crashes LibTorch's unpickler (measured with torch
    1.13's own torch.jit.load: TUPLE2 over one item is `free(): invalid size`, SIGABRT; BUILD on an
    empty stack SIGSEGV) is refused by the tool's reader before LibTorch sees it; and whatever does
    crash LibTorch takes down only the helper process: exit 2, one line naming the file."""
    w = s_.path("torchscript")
    os.makedirs(w)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(3, 4)

        def forward(self, x):
            return self.l(x) + torch.tensor([1.0, 2.0, 3.0, 4.0])

    good = os.path.join(w, "good.ts.pt")
    torch.jit.save(torch.jit.trace(Net(), torch.ones(2, 3)), good)
    ck = os.path.join(w, "ck.pth")
    torch.save(Net().state_dict(), ck)
    r = run(s_, "diff-keys", ck, good)
    s_.check(r.returncode == 0, "diff-keys against a sound TorchScript model: exit %d %r" % (r.returncode, r.stderr))
    for name, pkl in (("tuple2", b"\x80\x02K\x01\x86."), ("build", b"\x80\x02b."), ("newobj", b"\x80\x02\x81."),
                      ("tuple3", b"\x80\x02\x87.")):
        bad = os.path.join(w, "bad_%s.ts.pt" % name)
        rezip(good, bad, {"/constants.pkl": pkl})
        before = digest(bad)
        # (torch itself crashes on these: proven once here, in a child of its own.)
        if name == "tuple2":
            p = subprocess.run(["/usr/bin/python3", "-c", "import torch,sys; torch.jit.load(sys.argv[1])", bad],
                               capture_output=True, timeout=120)
            s_.check(p.returncode < 0, "torch.jit.load itself dies on %s: returncode %d" % (name, p.returncode))
        for cmd in (["diff-keys", ck, bad], ["verify", ck, bad]):
            r = run(s_, *cmd)
            refused(s_, "%s against %s" % (cmd[0], name), r, "constants.pkl")
            s_.check(bad in r.stderr, "%s: the error names the reference: %r" % (cmd[0], r.stderr))
        s_.check(digest(bad) == before, "%s: the reference is unchanged" % name)

    # A backend that crashes in torch::jit::load (as LibTorch would on what the reader passes): the
    # helper dies, the tool says so. The fake backend is built here, the real helper beside it.
    helper = os.path.join(os.path.dirname(s_.tool), "ckpt-torch-load")
    if not os.path.exists(helper):
        s_.check(False, "ckpt-torch-load is built beside the tool")
        return
    fake = os.path.join(w, "fake")
    os.makedirs(fake)
    shutil.copy(helper, os.path.join(fake, "ckpt-torch-load"))
    src = os.path.join(fake, "crash.c")
    with open(src, "w") as f:
        f.write(r"""
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
typedef struct { int version; const char* torch_version; void* load; void* stats; void* cast; } api_t;
static int load(const char* path, int v, void* ctx, void* fn, char* err, size_t n) { raise(SIGSEGV); return 1; }
static const api_t api = {%d, "crash", (void*)load, 0, 0};
const api_t* ckpt_torch_backend(void) { return &api; }
""" % api_version())
    so = os.path.join(fake, "libckpt-torch.so")
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-o", so, src], capture_output=True, text=True)
    s_.check(cc.returncode == 0, "the crashing backend builds: %s" % cc.stderr)
    env = dict(os.environ, CKPT_TORCH_BACKEND=so)
    r = run(s_, "diff-keys", ck, good, env=env)
    refused(s_, "diff-keys with a backend that crashes", r, "SIGSEGV")
    s_.check(good in r.stderr and "crashed" in r.stderr, "the crash is named with the file: %r" % r.stderr)


def api_version():
    with open(os.path.join(ROOT, "lib", "src", "stats", "torch_backend_api.h")) as f:
        for line in f:
            if line.startswith("#define CKPT_TORCH_API_VERSION"):
                return int(line.split()[2])
    raise RuntimeError("no CKPT_TORCH_API_VERSION")


def test_expanded_views(s_):
    """torch's expand (stride 0) makes 10^12 elements of 4 stored bytes: verify's statistics are the
    stored elements' scaled (the same numbers torch gives, in milliseconds), NaN found where torch
    has it, and a writer refuses an output a thousand times its input unless --allow-expansion."""
    w = s_.path("expanded")
    os.makedirs(w)
    huge = os.path.join(w, "huge.pth")
    torch.save({"big": torch.ones(1).expand(10**6, 10**6), "w": torch.randn(3)}, huge)
    # Within torch's reach to check: 3 × 10^7 elements from 3 stored (past the read-in-full bound).
    mid = torch.tensor([[0.5], [-2.0], [3.25]]).expand(3, 10**7)
    rows = torch.tensor([1.0, float("nan"), 2.0]).reshape(3, 1).expand(3, 10**7)
    src = os.path.join(w, "mid.pth")
    torch.save({"mid": mid, "rows": rows}, src)
    before = digest(huge)
    for cmd in (["verify", huge], ["verify", huge, "--write-fingerprint", os.path.join(w, "fp.json")]):
        r = run(s_, *cmd, timeout=60)
        s_.check(r.returncode == 0, "%s: exit %d %r" % (" ".join(cmd[:1]), r.returncode, r.stderr))
    with open(os.path.join(w, "fp.json")) as f:
        big = [t for t in json.load(f)["tensors"] if t["key"] == "big"][0]
    s_.check(big["count"] == 10**12 and big["mean"] == 1.0 and abs(big["l2"] - 1e6) < 1e-6 and big["std"] == 0.0,
             "the expanded tensor's statistics: %r" % big)
    r = run(s_, "verify", src, "--json", "--write-fingerprint", os.path.join(w, "mid.json"))
    with open(os.path.join(w, "mid.json")) as f:
        got = {t["key"]: t for t in json.load(f)["tensors"]}
    m = mid.double()
    want = {"mean": m.mean().item(), "std": m.std().item(), "l2": m.norm().item(), "abs_mean": m.abs().mean().item()}
    for k, v in want.items():
        s_.check(abs(got["mid"][k] - v) <= 1e-9 * max(1.0, abs(v)), "mid %s: %r, torch %r" % (k, got["mid"][k], v))
    s_.check(got["rows"]["nan"] == 10**7, "rows: NaN counted once per repeat: %r" % got["rows"]["nan"])
    report = json.loads(r.stdout)
    nan = [f for f in report["findings"] if f["kind"] == "nan"]
    s_.check(r.returncode == 1 and nan and "[1, 0]" in nan[0]["message"],
             "the first NaN is where torch has it, [1, 0]: %r" % nan)
    # Writers: refused (one line naming the tensor), nothing written; asked, mid.pth's 360 MB is written.
    for out in ("o.safetensors", "o.pth"):
        target = os.path.join(w, out)
        args = ["convert", huge, "-o", target] + (["--weights-only"] if out.endswith(".pth") else [])
        r = run(s_, *args, timeout=60)
        refused(s_, "convert to " + out, r, "--allow-expansion")
        s_.check("big" in r.stderr and not os.path.exists(target) and not temporaries(w),
                 "%s: names the tensor, writes nothing: %r" % (out, r.stderr))
    r = run(s_, "convert", huge, "-o", os.path.join(w, "whole.pth"))
    s_.check(r.returncode == 0 and os.path.getsize(os.path.join(w, "whole.pth")) < 4096,
             "pth → pth keeps the view a view: exit %d %r" % (r.returncode, r.stderr))
    s_.check(digest(huge) == before, "the input is unchanged")


def test_control_characters(s_):
    """Key names holding ESC sequences (SGR, OSC), CR, LF, a C1 control and a bidi override reach the
    terminal escaped from every text report; --json keeps them exact."""
    w = s_.path("control")
    os.makedirs(w)
    evil = "module.a\x1b]0;pwned\x07\x1b[31mred\rX\nY\u009b\u202eZ"
    ck = os.path.join(w, "ck.pth")
    torch.save({evil: torch.ones(2), "module.ok": torch.zeros(1)}, ck)
    ref = os.path.join(w, "ref.pth")
    torch.save({"ok": torch.zeros(1), "other": torch.ones(1)}, ref)
    raw = ("\x1b", "\x07", "\r", "\u009b", "\u202e")
    for args in (["inspect", ck], ["inspect", ck, "--all"], ["diff-keys", ck, ref], ["diff-keys", ck, ref, "--all"],
                 ["strip-prefix", ck, "--dry-run"], ["verify", ck, ref], ["diff-keys", ck, ref, "--format", "github"],
                 ["convert", ck, "-o", os.path.join(w, "out.safetensors")], ["scan", ck, "-v"]):
        r = run(s_, *args)
        s_.check(r.returncode in (0, 1), "%s: exit %d %r" % (" ".join(args[:1]), r.returncode, r.stderr))
        text = r.stdout + r.stderr
        s_.check(not any(c in text for c in raw), "%s prints no control character raw: %r" % (args, text))
        if args[0] != "scan" and args[0] != "convert":
            s_.check("\\e]0;pwned" in text, "%s shows the name escaped: %r" % (args, text[:400]))
        s_.check(not any("Y" in line and "module.a" not in line and "\\n" not in line for line in text.splitlines()
                         if line.startswith("Y")), "%s: no line starts inside a key" % args)
    r = run(s_, "inspect", ck, "--json")
    def strings(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)
        elif isinstance(v, str):
            yield v
    s_.check(evil in set(strings(json.loads(r.stdout))), "--json keeps the name exact")


def main():
    def body(s_, _args):
        test_nothing_lost(s_)
        test_no_placeholders_as_weights(s_)
        test_nothing_hangs(s_)
        test_one_line_and_nothing_left(s_)
        test_bounded(s_)
        test_torchscript_reference(s_)
        test_expanded_views(s_)
        test_control_characters(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
