#!/usr/bin/python3
"""`strip-prefix` and `diff-keys` with real torch on both ends.

Checkpoints are written here by torch.save from real wrappers (nn.DataParallel for `module.`, a
module holding `_orig_mod` the way torch.compile's OptimizedModule does, both nested either way, a
LightningModule-like `model.` holder, a full training checkpoint). Each is repaired by the binary;
the output is loaded by torch.load and must equal the input with only the renamed keys different:
every tensor bit for bit (dtype, shape, stride, offset), shared storages still shared, optimizer /
scheduler / epoch / argparse.Namespace unchanged, `_metadata` as torch's own
consume_prefix_in_state_dict_if_present makes it, load_state_dict(strict=True) into the unwrapped
model, weights_only=True whenever the input allowed it, a zip with the same records, STORED,
64-byte aligned, CRC-32 correct. diff-keys is checked on each pair, and the command it prints is run
and must make the keys match. Failure cases must exit 2 with one line on stderr, leave no file
behind and leave the input as it was.

Usage: test_repair.py --tool PATH --work DIR
"""
import argparse
import collections
import copy
import glob
import hashlib
import json
import os
import pickle
import shlex
import shutil
import struct
import subprocess
import sys
import zipfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_json_golden import check_schema  # noqa: E402  (one schema checker for every command)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMAS = {}


def schema_problems(report):
    name = report.get("command")
    if name not in SCHEMAS:
        with open(os.path.join(ROOT, "docs", "schema", name + ".schema.json")) as f:
            SCHEMAS[name] = json.load(f)
    schema = SCHEMAS[name]
    problems = []
    check_schema(report, schema, schema.get("$defs", {}), name, problems)
    return problems
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present


class Net(nn.Module):
    def __init__(self, width=16, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.blocks = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, width))
        self.head = nn.Linear(width, classes)


class Tied(nn.Module):
    """A language-model head tied to its embedding: two keys, one storage."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 12)
        self.proj = nn.Linear(12, 12)
        self.lm_head = nn.Linear(12, 50, bias=False)
        self.lm_head.weight = self.embed.weight


class Compiled(nn.Module):
    """What torch.compile returns (torch >= 2.0's OptimizedModule): the model as `_orig_mod`."""

    def __init__(self, m):
        super().__init__()
        self._orig_mod = m


class Lit(nn.Module):
    """A LightningModule keeps the network as an attribute: keys gain `model.`."""

    def __init__(self, m):
        super().__init__()
        self.model = m


def net(seed=0, **kw):
    torch.manual_seed(seed)
    m = Net(**kw)
    with torch.no_grad():  # non-trivial buffers
        m.bn.running_mean.uniform_()
        m.bn.running_var.uniform_(0.5, 2)
        m.bn.num_batches_tracked.fill_(7)
    return m


class Suite:
    def __init__(self, tool, work):
        self.tool = tool
        self.work = work
        self.passed = 0
        self.failures = []

    def path(self, name):
        return os.path.join(self.work, name)

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
            print("FAIL:", what)
        return cond

    def run(self, *args):
        return subprocess.run([self.tool] + [str(a) for a in args], capture_output=True, text=True)


# ---------------------------------------------------------------------------------------------
# Comparing what torch.load returns


def storage_key(t):
    return (t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr())


def same_tensor(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset() and a.requires_grad == b.requires_grad
            and type(a) is type(b) and torch.equal(a.view(-1) if a.is_contiguous() else a.contiguous(),
                                                   b.view(-1) if b.is_contiguous() else b.contiguous()))


def equal(a, b, where, out):
    """Deep equality of loaded values; appends what differs to `out`."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_tensor(a, b)):
            out.append(where)
        return
    if type(a) is not type(b):
        out.append("%s: %s vs %s" % (where, type(a).__name__, type(b).__name__))
        return
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            out.append("%s: keys %s vs %s" % (where, list(a.keys())[:5], list(b.keys())[:5]))
            return
        for k in a:
            equal(a[k], b[k], "%s.%s" % (where, k), out)
        if hasattr(a, "_metadata") or hasattr(b, "_metadata"):
            equal(getattr(a, "_metadata", None), getattr(b, "_metadata", None), where + "._metadata", out)
        return
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            out.append("%s: length %d vs %d" % (where, len(a), len(b)))
            return
        for i, (x, y) in enumerate(zip(a, b)):
            equal(x, y, "%s[%d]" % (where, i), out)
        return
    if hasattr(a, "__dict__") and not isinstance(a, type):
        equal(vars(a), vars(b), where + ".__dict__", out)
        return
    if a != b and not (a != a and b != b):  # NaN == NaN here
        out.append("%s: %r vs %r" % (where, a, b))


def sharing(sd):
    """Which keys share a storage, as a set of frozensets."""
    groups = collections.defaultdict(set)
    for k, v in sd.items():
        if isinstance(v, torch.Tensor):
            groups[storage_key(v)].add(k)
    return {frozenset(g) for g in groups.values()}


def expected_after_strip(sd, prefixes):
    """torch's own repair, consume_prefix_in_state_dict_if_present, for each prefix in order.

    For `_metadata` this applies the rule of torch >= 2.0 ("" stays, "module" becomes "",
    "module.x" becomes "x"): torch 1.13's version tests `"_metadata" in state_dict` (a key, never
    there) instead of the attribute, so it leaves `_metadata` untouched (and would strip every
    entry unconditionally if it got there)."""
    out = copy.copy(sd)
    for p in prefixes:
        consume_prefix_in_state_dict_if_present(out, p)
    metadata = copy.deepcopy(getattr(sd, "_metadata", collections.OrderedDict()))
    for p in prefixes:
        for key in list(metadata.keys()):
            if key and (key == p.replace(".", "") or key.startswith(p)):
                metadata[key[len(p):]] = metadata.pop(key)
    out._metadata = metadata
    return out


def zip_layout(path):
    """(names, problems) of the zip as Python's zipfile sees it."""
    problems = []
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad:
            problems.append("CRC-32 of %s is wrong" % bad)
        names = [i.filename for i in z.infolist()]
        with open(path, "rb") as f:
            for i in z.infolist():
                if i.compress_type != zipfile.ZIP_STORED:
                    problems.append("%s is compressed" % i.filename)
                f.seek(i.header_offset)
                head = f.read(30)
                name_len, extra_len = struct.unpack("<HH", head[26:30])
                data_at = i.header_offset + 30 + name_len + extra_len
                if data_at % 64:
                    problems.append("%s data at %d, not 64-byte aligned" % (i.filename, data_at))
    return names, problems


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def leftovers(directory):
    return [p for p in os.listdir(directory) if p.endswith(".tmp")]


# ---------------------------------------------------------------------------------------------
# The repairs


def stripped_dict(sd, prefixes):
    """`sd` with every key stripped as strip-prefix strips it, in the file's order, its _metadata as
    torch's own repair makes it."""
    out = collections.OrderedDict((expected_name(k, prefixes), v) for k, v in sd.items())
    if hasattr(sd, "_metadata"):
        out._metadata = expected_after_strip(sd, prefixes)._metadata
    return out


def repair_case(s, name, obj, prefixes, args, unwrapped, sd_path=None, weights_only_ok=True, also=()):
    """Saves `obj`, repairs it with `args`, and checks the output against torch's view. `also`: the
    other top-level state dicts that carry the prefix (renamed in the same run)."""
    src, dst = s.path(name + ".pth"), s.path(name + ".fixed.pth")
    torch.save(obj, src)
    before = sha(src)
    if os.path.exists(dst):
        os.remove(dst)
    r = s.run("strip-prefix", src, "-o", dst, "--json", *args)
    if not s.check(r.returncode == 0, "%s: strip-prefix exit %d: %s" % (name, r.returncode, r.stderr.strip())):
        return None
    report = json.loads(r.stdout)
    s.check(not schema_problems(report), "%s: strip-prefix JSON vs schema: %s" % (name, schema_problems(report)))
    s.check(sha(src) == before, "%s: the input changed" % name)
    s.check(report["output"] == dst and report["bytes_written"] == os.path.getsize(dst),
            "%s: report output/bytes_written %s/%s" % (name, report["output"], report["bytes_written"]))

    a = torch.load(src)
    b = torch.load(dst)
    sd_a = a if sd_path is None else a[sd_path]
    sd_b = b if sd_path is None else b[sd_path]
    want = expected_after_strip(sd_a, prefixes)
    s.check(sorted(sd_b.keys()) == sorted(want.keys()), "%s: keys %s, torch's repair gives %s"
            % (name, list(sd_b.keys())[:4], list(want.keys())[:4]))
    # Same order as the input (torch's repair reorders; ours keeps the file's order).
    stripped_in_order = []
    for k in sd_a.keys():
        for p in prefixes:
            if k.startswith(p):
                k = k[len(p):]
        stripped_in_order.append(k)
    s.check(list(sd_b.keys()) == stripped_in_order, "%s: key order changed" % name)
    diffs = []
    for k in want:
        if k in sd_b:
            equal(want[k], sd_b[k], k, diffs)
    s.check(not diffs, "%s: tensors differ: %s" % (name, diffs[:5]))
    s.check(dict(getattr(sd_b, "_metadata", {})) == dict(getattr(want, "_metadata", {})),
            "%s: _metadata %s, torch's repair gives %s"
            % (name, getattr(sd_b, "_metadata", None), getattr(want, "_metadata", None)))
    s.check(sharing(sd_b) == {frozenset(expected_name(k, prefixes) for k in g) for g in sharing(sd_a)},
            "%s: storage sharing changed" % name)
    # Everything outside the state dict: exactly equal.
    if sd_path is not None:
        rest = []
        for k in a:
            if k in also:
                equal(stripped_dict(a[k], prefixes), b[k], k, rest)
            elif k != sd_path:
                equal(a[k], b[k], k, rest)
        s.check(list(a.keys()) == list(b.keys()) and not rest, "%s: rest of the checkpoint differs: %s" % (name, rest[:5]))
    # load_state_dict(strict=True) into the model it belongs to.
    try:
        unwrapped.load_state_dict(sd_b, strict=True)
        s.check(True, "")
    except Exception as e:  # noqa: BLE001 - the message is the finding
        s.check(False, "%s: load_state_dict(strict=True) failed: %s" % (name, str(e).splitlines()[0]))
    # weights_only: works after iff it worked before.
    def wo(p):
        try:
            torch.load(p, weights_only=True)
            return True
        except Exception:  # noqa: BLE001
            return False
    s.check(wo(src) == weights_only_ok, "%s: input weights_only=%s, expected %s" % (name, wo(src), weights_only_ok))
    s.check(wo(dst) == wo(src), "%s: output weights_only=%s, input %s" % (name, wo(dst), wo(src)))
    # The zip: same records, same order, STORED, aligned, CRC right.
    names_out, problems = zip_layout(dst)
    with zipfile.ZipFile(src) as z:
        names_in = [i.filename for i in z.infolist()]
    s.check(names_out == names_in, "%s: records %s, input %s" % (name, names_out, names_in))
    s.check(not problems, "%s: zip: %s" % (name, problems))
    # diff-keys of the output against the unwrapped model's own state dict: clean.
    ref = s.path(name + ".reference.pth")
    torch.save(unwrapped.state_dict(), ref)
    extra = ["--state-dict-key", sd_path] if sd_path else []
    d = s.run("diff-keys", dst, ref, *extra)
    s.check(d.returncode == 0, "%s: diff-keys of the repaired file: exit %d\n%s" % (name, d.returncode, d.stdout))
    return report


def expected_name(k, prefixes):
    for p in prefixes:
        if k.startswith(p):
            k = k[len(p):]
    return k


def test_repairs(s):
    m = net(1)
    repair_case(s, "ddp", nn.DataParallel(m).state_dict(), ["module."], [], net(2))
    repair_case(s, "compiled", Compiled(net(3)).state_dict(), ["_orig_mod."], [], net(4))
    repair_case(s, "ddp_compiled", nn.DataParallel(Compiled(net(5))).state_dict(),
                ["module.", "_orig_mod."], [], net(6))
    repair_case(s, "compiled_ddp", Compiled(nn.DataParallel(net(7))).state_dict(),
                ["_orig_mod.", "module."], [], net(8))
    t = Tied()
    rep = repair_case(s, "tied", nn.DataParallel(t).state_dict(), ["module."], [], Tied())
    if rep is not None:
        b = torch.load(s.path("tied.fixed.pth"))
        s.check(storage_key(b["embed.weight"]) == storage_key(b["lm_head.weight"]),
                "tied: embed.weight and lm_head.weight no longer share storage")

    # Protocol 4: FRAME, MEMOIZE, SHORT_BINUNICODE.
    sd = nn.DataParallel(net(9)).state_dict()
    src = s.path("proto4.pth")
    torch.save(sd, src, pickle_protocol=4)
    r = s.run("strip-prefix", src, "-o", s.path("proto4.fixed.pth"))
    if s.check(r.returncode == 0, "proto4: exit %d %s" % (r.returncode, r.stderr.strip())):
        out = torch.load(s.path("proto4.fixed.pth"))
        want = collections.OrderedDict((k[len("module."):], v) for k, v in sd.items())
        want._metadata = expected_after_strip(sd, ["module."])._metadata
        diffs = []
        equal(want, out, "proto4", diffs)
        s.check(not diffs, "proto4: %s" % diffs[:5])

    # A full training checkpoint: the state dict under "model", the rest must not move.
    model = nn.DataParallel(net(10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(3):
        opt.zero_grad()
        loss = sum(p.sum() for p in model.parameters())
        loss.backward()
        opt.step()
        sched.step()
    ckpt = {"epoch": 3, "global_step": 1200, "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "args": argparse.Namespace(lr=1e-3, arch="net", layers=[1, 2]),
            "best_acc": 0.875, "note": "ddp run", "rng": torch.get_rng_state()}
    # EMA weights whose key strings are the very same str objects: the pickle fetches them from the
    # memo (BINGET). "ema" is a state dict carrying the prefix: renamed in the same run; a list of
    # the same strings is no state dict and keeps its `module.` names.
    ckpt["ema"] = collections.OrderedDict((k, v.clone()) for k, v in ckpt["model"].items())
    ckpt["ema_keys"] = list(ckpt["model"].keys())
    rep = repair_case(s, "training", ckpt, ["module."], ["--state-dict-key", "model"], net(11),
                      sd_path="model", weights_only_ok=False, also=("ema",))
    if rep is not None:
        b = torch.load(s.path("training.fixed.pth"))
        s.check(b["ema_keys"] == ckpt["ema_keys"], "training: strings shared with the state dict were renamed outside it")
        s.check([(o["state_dict_key"], o["renamed_count"]) for o in rep["others"]] == [("ema", len(ckpt["ema"]))],
                "training: the report's others: %s" % rep["others"])
        try:
            net(12).load_state_dict(b["ema"], strict=True)
            s.check(True, "")
        except Exception as e:  # noqa: BLE001
            s.check(False, "training: ema does not load strict=True: %s" % str(e).splitlines()[0])
    # --state-dict-only leaves it; inspect then points at it, and its command repairs it.
    only = s.path("training.model_only.pth")
    r = s.run("strip-prefix", s.path("training.pth"), "-o", only, "--state-dict-only")
    b = torch.load(only) if r.returncode == 0 else {}
    s.check(r.returncode == 0 and all(k.startswith("module.") for k in b.get("ema", [""])) and "ema" not in r.stdout,
            "--state-dict-only: %d %s" % (r.returncode, r.stderr))
    r = s.run("inspect", only, "--json")
    hints = [h for h in json.loads(r.stdout or "{}").get("hints", []) if h["kind"] == "wrapper_prefix"]
    s.check(len(hints) == 1 and hints[0]["message"].startswith('the keys of "ema" (') and "--state-dict-key ema" in (hints[0]["command"] or ""),
            "inspect points at ema: %s" % hints)
    if hints and hints[0]["command"]:
        r = subprocess.run([s.tool] + shlex.split(hints[0]["command"])[1:], capture_output=True, text=True)
        out = shlex.split(hints[0]["command"])[-1]
        s.check(r.returncode == 0 and not any(k.startswith("module.") for k in torch.load(out)["ema"]), "the ema hint's command: %s" % r.stderr)
    r = s.run("inspect", s.path("training.pth"))
    s.check('"ema" carries it too, and the command renames both' in r.stdout, "inspect says ema carries the prefix: %r" % r.stdout[-300:])
    # One EMA dict at two keys (the pickle writes it once, the second a memo fetch): renamed once.
    e = collections.OrderedDict(("module." + k, v) for k, v in net(44).state_dict().items())
    torch.save({"model": nn.DataParallel(net(45)).state_dict(), "ema": e, "ema_copy": e}, s.path("twice.pth"))
    r = s.run("strip-prefix", s.path("twice.pth"), "-o", s.path("twice.fixed.pth"))
    b = torch.load(s.path("twice.fixed.pth")) if r.returncode == 0 else {}
    s.check(r.returncode == 0 and b["ema"] is b["ema_copy"] and list(b["ema"]) == [k[len("module."):] for k in e],
            "one dict at two keys: %d %s" % (r.returncode, r.stderr))
    # The text shows the rule by a few renames; -v lists every one.
    r = s.run("strip-prefix", s.path("training.pth"), "-o", s.path("training.text.pth"))
    lines = r.stdout.splitlines()
    s.check(r.returncode == 0 and len(lines) == 5 and lines[-1].startswith("  … %d more, the same way (-v lists every rename" % (len(ckpt["model"]) - 3)),
            "renames summarised: %s" % lines)
    r = subprocess.run([s.tool, "-v", "strip-prefix", s.path("training.pth"), "-o", s.path("training.text.pth"), "--force"],
                       capture_output=True, text=True)
    s.check(r.returncode == 0 and len(r.stdout.splitlines()) == 1 + len(ckpt["model"]), "-v lists every rename: %d lines" % len(r.stdout.splitlines()))

    # Long containers first: a loss history of 3,000 floats and a tuple of 300 milestones are the
    # first lists the unpickler builds, larger than the value arena's first slot block (256 items),
    # which they once overran (a heap overflow; scan crashed with SIGSEGV). Every command reads it.
    history = {"losses": [i / 7 for i in range(3000)], "milestones": tuple(range(300)),
               "model": nn.DataParallel(net(15)).state_dict()}
    rep = repair_case(s, "history", history, ["module."], ["--state-dict-key", "model"], net(16),
                      sd_path="model", weights_only_ok=False)
    if rep is not None:
        b = torch.load(s.path("history.fixed.pth"))
        s.check(b["losses"] == history["losses"] and b["milestones"] == history["milestones"],
                "history: the long lists changed")
    for cmd in (["inspect"], ["verify"], ["scan"], ["diff-keys", s.path("history.fixed.pth"),
                                                     "--state-dict-key", "model", "--reference-state-dict-key", "model"]):
        args = [cmd[0], s.path("history.pth")] + cmd[1:]
        r = s.run(*args)
        want = 1 if cmd[0] == "diff-keys" else 0  # the keys differ by their module. prefix
        s.check(r.returncode == want, "history: %s exit %d (want %d): %s" % (" ".join(cmd[:1]), r.returncode, want,
                                                                             r.stderr.strip()[-300:]))
    # The same as a plain pickle: the tuple of 300 is the very first list (scan once died on it).
    with open(s.path("long.pkl"), "wb") as f:
        pickle.dump((tuple(range(300)), list(range(3000)), {i: i for i in range(300)}), f, protocol=2)
    r = s.run("scan", s.path("long.pkl"), "--json")
    scanned = json.loads(r.stdout) if r.returncode == 0 else {}
    s.check(r.returncode == 0 and scanned.get("dangerous") == 0 and scanned.get("unknown") == 0,
            "long.pkl: scan exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))

    # Lightning: {"state_dict": {"model.…"}, …} with --prefix model.
    lit = Lit(net(12))
    opt = torch.optim.SGD(lit.parameters(), lr=0.1, momentum=0.9)
    lit_ckpt = {"epoch": 4, "global_step": 50, "pytorch-lightning_version": "1.9.5",
                "state_dict": lit.state_dict(), "optimizer_states": [opt.state_dict()],
                "lr_schedulers": [], "hyper_parameters": {"lr": 0.1, "width": 16}}
    # (torch 1.13's weights_only unpickler has no BINFLOAT: the lr floats keep it out)
    repair_case(s, "lightning", lit_ckpt, ["model."], ["--prefix", "model."], net(13),
                sd_path="state_dict", weights_only_ok=False)

    # --add-prefix: a plain checkpoint for a still-wrapped model.
    plain = net(14).state_dict()
    torch.save(plain, s.path("plain.pth"))
    r = s.run("strip-prefix", s.path("plain.pth"), "--add-prefix", "module.", "-o", s.path("wrapped.pth"))
    if s.check(r.returncode == 0, "add-prefix: exit %d %s" % (r.returncode, r.stderr.strip())):
        wrapped = nn.DataParallel(net(15))
        try:
            wrapped.load_state_dict(torch.load(s.path("wrapped.pth"), weights_only=True), strict=True)
            s.check(True, "")
        except Exception as e:  # noqa: BLE001
            s.check(False, "add-prefix: load_state_dict into DataParallel: %s" % str(e).splitlines()[0])
        md = torch.load(s.path("wrapped.pth"))._metadata
        s.check(list(md.keys())[:2] == ["module", "module.conv"], "add-prefix: _metadata %s" % list(md.keys()))

    # --dry-run lists the mapping and writes nothing.
    r = s.run("strip-prefix", s.path("ddp.pth"), "--dry-run", "--json")
    if s.check(r.returncode == 0, "dry-run exit %d" % r.returncode):
        rep = json.loads(r.stdout)
        s.check(not schema_problems(rep), "dry-run JSON vs schema: %s" % schema_problems(rep))
        s.check(rep["dry_run"] and rep["output"] is None and rep["renamed"][0] == {"from": "module.conv.weight", "to": "conv.weight"}
                and rep["renamed_count"] == len(torch.load(s.path("ddp.pth"))), "dry-run report: %s" % r.stdout[:300])

    # --in-place replaces the input atomically; through a symlink, the file it names.
    shutil.copy(s.path("ddp.pth"), s.path("inplace-target.pth"))
    os.symlink(s.path("inplace-target.pth"), s.path("inplace-link.pth"))
    r = s.run("strip-prefix", s.path("inplace-link.pth"), "--in-place")
    s.check(r.returncode == 0 and os.path.islink(s.path("inplace-link.pth"))
            and list(torch.load(s.path("inplace-target.pth")).keys())[0] == "conv.weight",
            "in-place through a symlink: exit %d %s" % (r.returncode, r.stderr.strip()))
    shutil.copy(s.path("ddp.pth"), s.path("inplace.pth"))
    r = s.run("strip-prefix", s.path("inplace.pth"), "--in-place")
    if s.check(r.returncode == 0, "in-place: exit %d %s" % (r.returncode, r.stderr.strip())):
        got = torch.load(s.path("inplace.pth"))
        s.check(list(got.keys())[0] == "conv.weight", "in-place: keys %s" % list(got.keys())[:3])
        s.check(not leftovers(s.work), "in-place: temporaries left: %s" % leftovers(s.work))


# ---------------------------------------------------------------------------------------------
# Failures: exit 2, one line, nothing written, the input untouched


def expect_failure(s, what, args, inputs, output=None, contains=""):
    before = {p: sha(p) for p in inputs}
    existed = output is not None and os.path.exists(output)
    out_before = sha(output) if existed else None
    dirs = {os.path.dirname(p) for p in inputs}
    tmp_before = {d: set(leftovers(d)) for d in dirs}
    r = s.run(*args)
    lines = r.stderr.strip().splitlines()
    s.check(r.returncode == 2, "%s: exit %d, expected 2 (stderr %s)" % (what, r.returncode, r.stderr.strip()))
    s.check(len(lines) == 1 and r.stdout == "", "%s: stderr should be one line and stdout empty: %r %r"
            % (what, r.stderr, r.stdout[:200]))
    s.check(contains in r.stderr, "%s: message %r lacks %r" % (what, r.stderr.strip(), contains))
    for p, h in before.items():
        s.check(sha(p) == h, "%s: input %s changed" % (what, p))
    if output is not None:
        if existed:
            s.check(os.path.exists(output) and sha(output) == out_before, "%s: existing output changed" % what)
        else:
            s.check(not os.path.exists(output), "%s: output %s was written" % (what, output))
    for d in dirs:
        s.check(set(leftovers(d)) == tmp_before[d], "%s: temporaries left in %s" % (what, d))


def test_failures(s):
    ddp = s.path("ddp.pth")
    # two keys that would get one name
    sd = nn.DataParallel(net(20)).state_dict()
    sd["conv.weight"] = torch.zeros(1)
    torch.save(sd, s.path("clash.pth"))
    expect_failure(s, "collision", ["strip-prefix", s.path("clash.pth"), "--prefix", "module.", "-o", s.path("clash.out.pth")],
                   [s.path("clash.pth")], s.path("clash.out.pth"), "would both become \"conv.weight\"")
    expect_failure(s, "default strip, not every key wrapped", ["strip-prefix", s.path("clash.pth"), "-o", s.path("clash.out.pth")],
                   [s.path("clash.pth")], s.path("clash.out.pth"), "start with \"module.\"")
    expect_failure(s, "prefix matching nothing", ["strip-prefix", ddp, "--prefix", "encoder.", "-o", s.path("none.pth")],
                   [ddp], s.path("none.pth"), "matches no key")
    shutil.copy(s.path("plain.pth"), s.path("exists.pth"))
    expect_failure(s, "output exists", ["strip-prefix", ddp, "-o", s.path("exists.pth")], [ddp], s.path("exists.pth"),
                   "exists (use --force")
    r = s.run("strip-prefix", ddp, "-o", s.path("exists.pth"), "--force")
    s.check(r.returncode == 0 and "conv.weight" in torch.load(s.path("exists.pth")), "--force: exit %d" % r.returncode)
    expect_failure(s, "output is the input", ["strip-prefix", ddp, "-o", ddp, "--force"], [ddp], ddp, "--in-place")
    os.symlink(ddp, s.path("ddp-link.pth"))
    expect_failure(s, "output is the input through a symlink", ["strip-prefix", ddp, "-o", s.path("ddp-link.pth"), "--force"],
                   [ddp], None, "--in-place")
    expect_failure(s, "missing output directory", ["strip-prefix", ddp, "-o", s.path("no/such/dir/out.pth")], [ddp],
                   s.path("no/such/dir/out.pth"), "cannot create a file")
    expect_failure(s, "a file as the directory", ["strip-prefix", ddp, "-o", s.path("plain.pth") + "/out.pth"], [ddp],
                   None, "cannot create a file")
    expect_failure(s, "unwritable directory", ["strip-prefix", ddp, "-o", "/proc/ckpt-tool-test.pth"], [ddp], None,
                   "/proc/ckpt-tool-test.pth")
    expect_failure(s, "no output given", ["strip-prefix", ddp], [ddp], None, "-o OUT")
    # a truncated input
    with open(ddp, "rb") as f:
        data = f.read()
    with open(s.path("truncated.pth"), "wb") as f:
        f.write(data[: len(data) // 2])
    expect_failure(s, "truncated input", ["strip-prefix", s.path("truncated.pth"), "-o", s.path("t.out.pth")],
                   [s.path("truncated.pth")], s.path("t.out.pth"), "truncated.pth")
    # a pickled nn.Module has no keys to rename
    torch.save(nn.DataParallel(net(21)), s.path("module.pth"))
    expect_failure(s, "pickled nn.Module", ["strip-prefix", s.path("module.pth"), "-o", s.path("m.out.pth")],
                   [s.path("module.pth")], s.path("m.out.pth"), "nn.Module")
    # diff-keys errors
    with open(s.path("bad.json"), "w") as f:
        f.write('[{"key": "a", "shape": [2, -1]}]')
    r = s.run("diff-keys", ddp, s.path("bad.json"))
    s.check(r.returncode == 2 and "bad.json" in r.stderr and "shape" in r.stderr, "bad manifest: %d %s" % (r.returncode, r.stderr))
    with open(s.path("broken.json"), "w") as f:
        f.write('[{"key": "a", ')
    r = s.run("diff-keys", ddp, s.path("broken.json"))
    s.check(r.returncode == 2 and "does not parse" in r.stderr, "broken JSON: %d %s" % (r.returncode, r.stderr))
    r = s.run("diff-keys", ddp, s.path("nonexistent.pth"))
    s.check(r.returncode == 2 and "nonexistent.pth" in r.stderr, "missing reference: %d %s" % (r.returncode, r.stderr))


# ---------------------------------------------------------------------------------------------
# diff-keys


def diff(s, a, b, *extra):
    r = s.run("diff-keys", a, b, "--json", *extra)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return r.returncode, {"error": r.stderr}
    s.check(not schema_problems(j), "diff-keys JSON vs schema: %s" % schema_problems(j))
    return r.returncode, j


def test_diff_keys(s):
    ref = s.path("ref.pth")
    plain_model = net(30)
    torch.save(plain_model.state_dict(), ref)
    names = list(plain_model.state_dict().keys())

    cases = [
        # name, checkpoint object, expected strip, expected add, key transform (file key from ref key)
        ("d_ddp", nn.DataParallel(net(31)).state_dict(), "module.", "", lambda k: "module." + k),
        ("d_compiled", Compiled(net(32)).state_dict(), "_orig_mod.", "", lambda k: "_orig_mod." + k),
        ("d_both", Compiled(nn.DataParallel(net(33))).state_dict(), "_orig_mod.module.", "", lambda k: "_orig_mod.module." + k),
        ("d_lit", {"state_dict": Lit(net(34)).state_dict(), "epoch": 1}, "model.", "", lambda k: "model." + k),
    ]
    for name, obj, strip, add, fk in cases:
        torch.save(obj, s.path(name + ".pth"))
        rc, j = diff(s, s.path(name + ".pth"), ref)
        s.check(rc == 1 and j.get("match") is False, "%s: exit %d match %s" % (name, rc, j.get("match")))
        if "missing" not in j:
            s.check(False, "%s: no report: %s" % (name, j))
            continue
        s.check(sorted(j["missing"]) == sorted(names), "%s: missing %s" % (name, j["missing"][:3]))
        s.check(sorted(j["unexpected"]) == sorted(fk(k) for k in names), "%s: unexpected %s" % (name, j["unexpected"][:3]))
        fix = j["prefix_fix"]
        s.check(fix is not None and fix["strip"] == strip and fix["add"] == add and fix["complete"],
                "%s: prefix_fix %s, expected strip %r add %r" % (name, fix, strip, add))
        if fix and fix["command"]:
            # The printed command, run as printed, repairs the file.
            out = shlex.split(fix["command"])[-1]
            if os.path.exists(out):
                os.remove(out)
            r = subprocess.run([s.tool] + shlex.split(fix["command"])[1:], capture_output=True, text=True)
            s.check(r.returncode == 0, "%s: the printed command failed: %s" % (name, r.stderr.strip()))
            rc2, j2 = diff(s, out, ref, *(["--state-dict-key", "state_dict"] if name == "d_lit" else []))
            s.check(rc2 == 0 and j2.get("match"), "%s: after the printed command: exit %d %s" % (name, rc2, j2.get("counts")))

    # The other way: a plain checkpoint for a DDP-wrapped reference → add "module.".
    rc, j = diff(s, ref, s.path("d_ddp.pth"))
    fix = j.get("prefix_fix") or {}
    s.check(rc == 1 and fix.get("strip") == "" and fix.get("add") == "module." and "--add-prefix module." in (fix.get("command") or ""),
            "plain vs ddp: %s" % fix)
    # Lightning checkpoint against a DDP reference: strip model., add module.
    rc, j = diff(s, s.path("d_lit.pth"), s.path("d_ddp.pth"))
    fix = j.get("prefix_fix") or {}
    s.check(fix.get("strip") == "model." and fix.get("add") == "module." and fix.get("complete"), "lit vs ddp: %s" % fix)

    # A changed layer size: same keys, two shapes differ, no prefix fix.
    torch.save(net(35, classes=12).state_dict(), s.path("d_wide.pth"))
    rc, j = diff(s, s.path("d_wide.pth"), ref)
    shapes = {m["key"]: (m["shape"], m["reference_shape"]) for m in j.get("shape_mismatch", [])}
    s.check(rc == 1 and shapes == {"head.weight": ([12, 16], [10, 16]), "head.bias": ([12], [10])}
            and j["missing"] == [] and j["unexpected"] == [] and j["prefix_fix"] is None,
            "changed layer: exit %d %s" % (rc, j))
    # … and wrapped too: the fix is found, with the shape mismatches it leaves.
    torch.save(nn.DataParallel(net(36, classes=12)).state_dict(), s.path("d_wide_ddp.pth"))
    rc, j = diff(s, s.path("d_wide_ddp.pth"), ref)
    fix = j.get("prefix_fix") or {}
    s.check(rc == 1 and fix.get("strip") == "module." and fix.get("shape_mismatch") == 2 and not fix.get("complete"),
            "changed + wrapped: %s" % fix)
    # What the fix leaves is the real problem: the two head shapes, by their names after the fix,
    # and the hint; the hint's own code loads the rest into the model.
    residue = fix.get("residue") or {}
    s.check([m["key"] for m in residue.get("shape_mismatch", [])] == ["head.weight", "head.bias"]
            and residue.get("missing") == [] and residue.get("unexpected") == [], "changed + wrapped: residue %s" % residue)
    hint = j.get("shape_hint") or ""
    s.check(hint.startswith("head has 12 outputs, the reference's 10: the last layer of another number of classes?"), "hint: %r" % hint)
    code = hint.split("to load the rest: ")[-1]
    model = net(40)
    sd = collections.OrderedDict((k[len("module."):], v) for k, v in torch.load(s.path("d_wide_ddp.pth")).items())
    try:
        result = eval(code, {"model": model, "sd": sd})  # noqa: S307 (the tool's own advice, run as given)
        s.check(list(result.missing_keys) == ["head.weight", "head.bias"] and not result.unexpected_keys,
                "the hint's code loads the rest: %s" % (result,))
    except Exception as e:  # noqa: BLE001
        s.check(False, "the hint's code fails: %r: %s" % (code, e))
    r = s.run("diff-keys", s.path("d_wide.pth"), ref)
    s.check("hint: head has 12 outputs" in r.stdout, "hint in text: %r" % r.stdout)

    # A fix applied to some keys only: the prefix is found from the keys that do not match, and its
    # command finishes the repair.
    part = collections.OrderedDict((("module." + k) if k.startswith("blocks.") else k, v) for k, v in net(41).state_dict().items())
    torch.save(part, s.path("d_partial.pth"))
    rc, j = diff(s, s.path("d_partial.pth"), ref)
    fix = j.get("prefix_fix") or {}
    s.check(rc == 1 and fix.get("strip") == "module." and fix.get("complete"), "partial fix: %s" % fix)
    if fix.get("command"):
        out = shlex.split(fix["command"])[-1]
        r = subprocess.run([s.tool] + shlex.split(fix["command"])[1:], capture_output=True, text=True)
        fixed = torch.load(out) if r.returncode == 0 else {}
        s.check(r.returncode == 0 and not net(42).load_state_dict(fixed, strict=True).missing_keys, "partial fix: its command: %s" % r.stderr)
    # A wrapped model of fewer blocks: the residue names the keys the fix leaves, and the text shows
    # them by module, not the raw keys the prefix explains.
    small = collections.OrderedDict((k, v) for k, v in net(43).state_dict().items() if not k.startswith("bn."))
    torch.save(collections.OrderedDict(("module." + k, v) for k, v in small.items()), s.path("d_nobn.pth"))
    rc, j = diff(s, s.path("d_nobn.pth"), ref)
    bn = [k for k in names if k.startswith("bn.")]
    s.check(rc == 1 and (j.get("prefix_fix") or {}).get("residue", {}).get("missing") == bn, "residue: %s" % j.get("prefix_fix"))
    r = s.run("diff-keys", s.path("d_nobn.pth"), ref)
    lines = r.stdout.splitlines()
    s.check("after the fix, missing: in %s, not in %s (5):" % (ref, s.path("d_nobn.pth")) in lines
            and "  bn (5 keys: weight, bias, running_mean, running_var, num_batches_tracked)" in lines
            and not any(l.startswith("  module.") for l in lines), "residue text: %s" % lines)
    # A few keys off: one missing, one unexpected, the rest matching.
    few = net(37).state_dict()
    del few["blocks.2.bias"]
    few["extra.weight"] = torch.zeros(3)
    torch.save(few, s.path("d_few.pth"))
    rc, j = diff(s, s.path("d_few.pth"), ref)
    s.check(rc == 1 and j["missing"] == ["blocks.2.bias"] and j["unexpected"] == ["extra.weight"]
            and j["counts"]["matched"] == len(names) - 1 and j["prefix_fix"] is None, "a few keys off: %s" % j.get("counts"))
    # dtype only: reported, exit 0; --strict-dtype makes it 1.
    torch.save(net(38).half().state_dict(), s.path("d_half.pth"))
    rc, j = diff(s, s.path("d_half.pth"), ref)
    n_float = sum(1 for v in plain_model.state_dict().values() if v.is_floating_point())
    s.check(rc == 0 and j["match"] and len(j["dtype_mismatch"]) == n_float
            and j["dtype_mismatch"][0] == {"key": "conv.weight", "dtype": "float16", "reference_dtype": "float32"},
            "dtype only: exit %d %s" % (rc, j.get("dtype_mismatch", [])[:1]))
    rc, j = diff(s, s.path("d_half.pth"), ref, "--strict-dtype")
    s.check(rc == 1 and not j["match"], "--strict-dtype: exit %d" % rc)
    # --ignore leaves keys out on both sides.
    rc, j = diff(s, s.path("d_few.pth"), ref, "--ignore", "blocks.2.*", "--ignore", "extra.*")
    s.check(rc == 0 and j["counts"]["ignored"] == 2 and j["counts"]["reference_ignored"] == 2, "--ignore: exit %d %s" % (rc, j.get("counts")))

    # Manifests: inspect --json output, and the minimal list.
    r = s.run("inspect", ref, "--json")
    with open(s.path("ref.inspect.json"), "w") as f:
        f.write(r.stdout)
    rc, j = diff(s, s.path("d_ddp.pth"), s.path("ref.inspect.json"))
    s.check(rc == 1 and (j.get("prefix_fix") or {}).get("strip") == "module.", "inspect manifest: %s" % j.get("prefix_fix"))
    rc, j = diff(s, ref, s.path("ref.inspect.json"))
    s.check(rc == 0 and j["match"], "self vs its inspect manifest: exit %d" % rc)
    manifest = [{"key": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in plain_model.state_dict().items()]
    manifest[-1]["shape"] = [99]
    with open(s.path("ref.manifest.json"), "w") as f:
        json.dump(manifest, f)
    rc, j = diff(s, ref, s.path("ref.manifest.json"))
    s.check(rc == 1 and [m["key"] for m in j["shape_mismatch"]] == ["head.bias"], "minimal manifest: exit %d %s" % (rc, j.get("shape_mismatch")))
    with open(s.path("ref.keys.json"), "w") as f:
        json.dump(names, f)
    rc, j = diff(s, ref, s.path("ref.keys.json"))
    s.check(rc == 0, "keys-only manifest: exit %d" % rc)

    # A TorchScript model as the reference (its parameters and buffers by attribute path).
    scripted = torch.jit.script(net(39))
    torch.jit.save(scripted, s.path("ref.ts.pt"))
    rc, j = diff(s, s.path("d_ddp.pth"), s.path("ref.ts.pt"))
    fix = j.get("prefix_fix") or {}
    s.check(rc == 1 and sorted(j.get("missing", [])) == sorted(names) and fix.get("strip") == "module." and fix.get("complete"),
            "TorchScript reference: exit %d %s" % (rc, fix))
    rc, j = diff(s, ref, s.path("ref.ts.pt"))
    s.check(rc == 0, "plain vs its TorchScript model: exit %d %s" % (rc, j.get("counts")))

    # Text output: the summary first, then the fix.
    r = s.run("diff-keys", s.path("d_ddp.pth"), ref)
    lines = r.stdout.splitlines()
    s.check(r.returncode == 1 and "keys differ" in lines[0] and lines[1].startswith("fix: stripping \"module.\"")
            and lines[2].strip().startswith("ckpt-tool strip-prefix"), "text output:\n" + r.stdout[:500])


def suite_main(body, options=()):
    """The main of every integration test: --tool, --work (emptied first) and `options`; runs
    body(suite, args); prints "N passed, M failed"; returns the exit code."""
    ap = argparse.ArgumentParser()
    for name in ("--tool", "--work") + tuple(options):
        ap.add_argument(name, required=True)
    args = ap.parse_args()
    if os.path.exists(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    s = Suite(os.path.abspath(args.tool), os.path.abspath(args.work))
    body(s, args)
    print("%d passed, %d failed" % (s.passed, len(s.failures)))
    return 1 if s.failures else 0


def main():
    def body(s, _args):
        test_repairs(s)
        test_failures(s)
        test_diff_keys(s)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
