#!/usr/bin/python3
"""`strip-prefix` and `convert` killed with SIGKILL at random moments: no half-written output, ever.

A DataParallel state dict (`module.` keys, 525 tensors, ~31 MB of float32, written by torch.save here)
is the input of six operations: `strip-prefix IN -o OUT`, `strip-prefix COPY --in-place`, `convert`
to safetensors, to pth with `--weights-only`, to pth as a whole checkpoint, and to sharded
safetensors (`--max-shard-size`: four shards and an index). Each is timed uninterrupted first, then
started again and again and SIGKILLed after a delay drawn from [0, that duration] with a fixed seed
(printed; CKPT_CRASH_SEED replays another), plus once at ~0 s and once after it has exited. Half the
-o runs write to an absent target, half `--force` over the output of another checkpoint (same shapes,
other values), so "the old file" and "the new file" can be told apart. After every kill:

- each target file is absent (not allowed over an existing one: --force must not lose it), the old
  file unchanged, or the complete new one: byte-identical to an uninterrupted run, else loaded by
  torch.load (keys in order, every tensor's dtype, shape, stride, offset and bits, `_metadata`) or
  parsed by test_convert's independent safetensors reader (header, data ending at the file's end,
  every tensor bit for bit against torch's). Anything else is a half-written file: a failure;
- for --in-place the input is the target: its old bytes, or the complete repaired file;
- sharded (each file absent, old or complete as above): when an index exists, every shard it names
  exists and is complete, a new index (it is renamed last) only over new shards, and never an index
  over a mix of old and new shards (a --force run removes the old index before the first shard is
  swapped: the old index equals the new one when the shapes agree, so a mixed set would pass for one
  checkpoint). Reported, not failed: shards without an index (a run killed between the renames);
- the input's bytes are unchanged; no file other than the targets and their temporaries appears.

Temporaries are `.<target basename>.<pid>.<8 hex>.tmp` beside the target. A SIGKILLed writer can leave
one; its name must carry the killed pid, and the next successful run writing that target must remove
it (the contract: stale temporaries of the target whose writer is dead). A temporary of a live writer
and one of another target must survive that run. Each kill then gets a clean directory again.

Usage: test_crash_safety.py --tool PATH --work DIR
"""
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_convert import read_safetensors, same_bits  # noqa: E402
from test_repair import expected_after_strip, sha, suite_main  # noqa: E402

SEED = int(os.environ.get("CKPT_CRASH_SEED", "1913"))
RANDOM_KILLS = 8        # per operation, plus one at ~0 s and one after exit
SHARDED_RANDOM_KILLS = 12
SHARD_SIZE = "8MB"      # four shards of the ~31 MB state dict


def state_dict(seed, width=320, blocks=75):
    torch.manual_seed(seed)
    layers = []
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.BatchNorm1d(width)]
    model = nn.DataParallel(nn.Sequential(*layers))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_()
                m.running_var.uniform_(0.5, 2)
                m.num_batches_tracked.fill_(seed)
    return model.state_dict()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def first_line(e):
    return (str(e).splitlines() or [type(e).__name__])[0][:160]


# ---------------------------------------------------------------------------------------------
# What a complete output is


def check_pth(path, want, with_metadata):
    """None if torch.load(path) is `want`: keys in order, tensors bit for bit, `_metadata`."""
    try:
        got = torch.load(path)
    except Exception as e:  # noqa: BLE001 - the message is the finding
        return "torch.load fails: " + first_line(e)
    if not isinstance(got, dict) or list(got.keys()) != list(want.keys()):
        return "keys differ: %s" % (list(got.keys())[:3] if isinstance(got, dict) else type(got).__name__)
    for k, v in want.items():
        g = got[k]
        if not (isinstance(g, torch.Tensor) and g.dtype == v.dtype and g.shape == v.shape and g.stride() == v.stride()
                and g.storage_offset() == v.storage_offset() and same_bits(g, v)):
            return "tensor %s differs" % k
    if with_metadata and dict(getattr(got, "_metadata", {})) != dict(getattr(want, "_metadata", {})):
        return "_metadata differs"
    return None


def check_safetensors(path, names, sd):
    """None if the file holds exactly `names`, each bit for bit sd[name], and nothing else."""
    try:
        header, tensors, data, n = read_safetensors(path)
    except Exception as e:  # noqa: BLE001
        return "does not parse: " + first_line(e)
    ends = [e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"]
    if 8 + n + max(ends, default=0) != len(data):
        return "data ends at %d, the file at %d" % (8 + n + max(ends, default=0), len(data))
    if (header.get("__metadata__") or {}).get("format") != "pt":
        return "__metadata__ %s" % header.get("__metadata__")
    if sorted(tensors) != sorted(names):
        return "tensors %s…, expected %s…" % (sorted(tensors)[:2], sorted(names)[:2])
    for k in names:
        if not same_bits(tensors[k], sd[k]):
            return "tensor %s differs" % k
    return None


class Op:
    """One operation: its arguments, its target files, how to check each of them."""

    def __init__(self, name, folder, target, args, kind, in_place=False, sharded=False):
        self.name, self.folder, self.target, self.args, self.kind = name, folder, target, args, kind
        self.in_place, self.sharded = in_place, sharded
        self.files = [target]     # sharded: the index and its shards, from the reference run
        self.layout = {}          # sharded: shard → its tensor names (the reference run's)
        self.duration = 0.0
        self.stats = collections.Counter()
        self.phases = collections.Counter()
        self.temps_after_kill = []
        self.temps_after_next = []
        self.pid_mismatch = []

    def command(self, src, out):
        return self.args(src, out)

    def check_file(self, path, f, sd):
        """None if `path` (the target file `f`) is complete and holds what `sd` converts to."""
        if self.kind == "strip":
            want = collections.OrderedDict((k[len("module."):], v) for k, v in sd.items())
            want._metadata = expected_after_strip(sd, ["module."])._metadata
            return check_pth(path, want, True)
        if self.kind == "whole":
            return check_pth(path, sd, True)
        if self.kind == "weights":
            return check_pth(path, sd, False)
        if self.kind == "safetensors":
            return check_safetensors(path, list(sd.keys()), sd)
        if f.endswith(".index.json"):
            try:
                with open(path) as fh:
                    j = json.load(fh, object_pairs_hook=collections.OrderedDict)
            except Exception as e:  # noqa: BLE001
                return "index does not parse: " + first_line(e)
            want = collections.OrderedDict((k, sh) for sh, names in self.layout.items() for k in names)
            total = sum(v.numel() * v.element_size() for v in sd.values())
            if dict(j.get("weight_map", {})) != dict(want) or j.get("metadata", {}).get("total_size") != total:
                return "index differs from the uninterrupted run's"
            return None
        return check_safetensors(path, self.layout[f], sd)


def operations():
    return [
        Op("strip-prefix -o", "strip", "out.pth", lambda i, o: ["strip-prefix", i, "-o", o], "strip"),
        Op("strip-prefix --in-place", "inplace", "model.pth", lambda i, o: ["strip-prefix", o, "--in-place"], "strip",
           in_place=True),
        Op("convert -> safetensors", "st", "out.safetensors", lambda i, o: ["convert", i, "-o", o], "safetensors"),
        Op("convert -> pth --weights-only", "pth_wo", "out.pth", lambda i, o: ["convert", i, "-o", o, "--weights-only"],
           "weights"),
        Op("convert -> pth (whole checkpoint)", "pth", "out.pth", lambda i, o: ["convert", i, "-o", o], "whole"),
        Op("convert -> sharded safetensors", "shards", "model.safetensors",
           lambda i, o: ["convert", i, "-o", o, "--max-shard-size", SHARD_SIZE], "shards", sharded=True),
    ]


# ---------------------------------------------------------------------------------------------
# Temporaries


def temp_pattern(f):
    """A temporary of target file f: .f.PID.8hex.tmp (group 1 the pid), or .f.8hex.tmp (no pid)."""
    return re.compile(r"^\." + re.escape(f) + r"\.(?:(\d+)\.)?[0-9a-f]{8}\.tmp$")


def temporaries(op, d):
    """{name: (target file, pid or None)} of the temporaries of op's targets in d."""
    out = {}
    for name in os.listdir(d):
        for f in op.files:
            m = temp_pattern(f).match(name)
            if m:
                out[name] = (f, int(m.group(1)) if m.group(1) else None)
    return out


def strangers(op, d):
    """Files in d that are neither a target nor a temporary of one."""
    temps = temporaries(op, d)
    return sorted(n for n in os.listdir(d) if n not in op.files and n not in temps)


# ---------------------------------------------------------------------------------------------
# Running and killing


def timed_run(s, args):
    t = time.monotonic()
    r = subprocess.run([s.tool] + args, capture_output=True, text=True)
    return r, time.monotonic() - t


def killed_run(s, args, delay):
    """Starts the tool, SIGKILLs it after `delay` seconds (None: after it has exited); its exit code.
    Under the sanitizers no leak check for it: a SIGKILL that lands while LeakSanitizer stops the
    threads at exit leaves a report ("Unable to get registers from thread"), and the leaks of a run
    killed on purpose say nothing (the uninterrupted runs are checked)."""
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    p = subprocess.Popen([s.tool] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if delay is None:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: the pid is still its own
    elif delay > 0:
        time.sleep(delay)
    os.kill(p.pid, signal.SIGKILL)
    return p.pid, p.wait()


def make_references(s, op, src_new, src_old, sd_new, sd_old):
    """Uninterrupted runs: the new output (twice: duration, determinism) and the old one, each checked."""
    refs = {}
    for gen, src, sd in (("new", src_new, sd_new), ("old", src_old, sd_old)):
        d = s.path(os.path.join("ref", op.folder, gen))
        os.makedirs(d)
        out = os.path.join(d, op.target)
        if op.in_place:
            shutil.copyfile(src_new, out)
            if gen == "old":  # the old in-place target is the input itself
                refs[gen] = d
                continue
        r, t = timed_run(s, op.command(src, out))
        if not s.check(r.returncode == 0, "%s: uninterrupted run exit %d: %s" % (op.name, r.returncode, r.stderr.strip())):
            return None
        if gen == "new":
            if op.sharded:
                with open(os.path.join(d, op.target + ".index.json")) as fh:
                    j = json.load(fh, object_pairs_hook=collections.OrderedDict)
                for k, sh in j["weight_map"].items():
                    op.layout.setdefault(sh, []).append(k)
                op.files = [op.target + ".index.json"] + list(op.layout)
            first = {f: read(os.path.join(d, f)) for f in op.files}
            times = [t]
            for _ in range(2):  # the first run reads a cold cache: the median of three is the duration
                if op.in_place:
                    shutil.copyfile(src_new, out)
                r2, t2 = timed_run(s, op.command(src, out) + ([] if op.in_place else ["--force"]))
                times.append(t2)
                s.check(r2.returncode == 0 and all(read(os.path.join(d, f)) == first[f] for f in op.files),
                        "%s: two uninterrupted runs differ (exit %d)" % (op.name, r2.returncode))
            op.duration = sorted(times)[1]
        s.check(sorted(os.listdir(d)) == sorted(op.files), "%s: %s run left %s" % (op.name, gen, sorted(os.listdir(d))))
        for f in op.files:
            problem = op.check_file(os.path.join(d, f), f, sd)
            s.check(problem is None, "%s: the uninterrupted %s run's %s: %s" % (op.name, gen, f, problem))
        refs[gen] = d
    return refs


def state_of(op, path, f, refs, sd_new, old_bytes):
    """'absent', 'old', 'new', 'same' (the old and the new file are equal: a sharded index over shards
    of the same shapes), or 'broken: why' for target file f at path."""
    if not os.path.exists(path):
        return "absent"
    data = read(path)
    if data == read(os.path.join(refs["new"], f)):
        return "same" if data == old_bytes else "new"
    if old_bytes is not None and data == old_bytes:
        return "old"
    problem = op.check_file(path, f, sd_new)
    return "new" if problem is None else "broken: %s (%d bytes)" % (problem, len(data))


def short(op, f):
    if not op.sharded:
        return "target"
    m = re.search(r"-(\d+)-of-", f)
    return "shard%d" % int(m.group(1)) if m else "index"


def kill_case(s, op, refs, src, src_bytes, sd_new, n, delay, label, over_old):
    """One kill of op, its checks, the next successful run and its checks."""
    d = s.path(op.folder)
    paths = {f: os.path.join(d, f) for f in op.files}
    out = os.path.join(d, op.target)  # sharded: OUT names the set, the index is OUT.index.json
    # The state before: the in-place copy as the input was; an -o target absent, or the old output.
    old = {}
    for f, p in paths.items():
        if op.in_place:
            old[f] = src_bytes
            if read(p) != src_bytes:
                shutil.copyfile(src, p)
        elif over_old:
            shutil.copyfile(os.path.join(refs["old"], f), p)
            old[f] = read(p)
        else:
            if os.path.exists(p):
                os.remove(p)
            old[f] = None
    args = op.command(src, out) + (["--force"] if over_old else [])
    pid, rc = killed_run(s, args, delay)
    op.stats["kills"] += 1
    op.stats["exited before the kill"] += rc == 0
    s.check(rc in (0, -signal.SIGKILL), "%s #%d: exit %d, neither killed nor done" % (op.name, n, rc))

    states = {f: state_of(op, paths[f], f, refs, sd_new, old[f]) for f in op.files}
    temps = temporaries(op, d)
    for f, st in states.items():
        op.stats["file " + st.split(":")[0]] += 1
        s.check(not st.startswith("broken"), "%s #%d (%s): %s is present but not complete: %s"
                % (op.name, n, label, f, st))
        # A replaced index is removed before the first shard is swapped (so that no index ever names
        # a mix of old and new shards): only it may go.
        s.check(not (old[f] is not None and st == "absent" and not (op.sharded and f == op.files[0])),
                "%s #%d (%s): %s, there before, is gone" % (op.name, n, label, f))
    note = ""
    if op.sharded:
        index, shards = op.files[0], op.files[1:]
        gens = [states[sh] for sh in shards]
        if states[index] != "absent":  # every shard it names exists (complete: checked above)
            s.check("absent" not in gens, "%s #%d (%s): the index exists, shards do not: %s" % (op.name, n, label, gens))
        if states[index] == "new":     # committed last: every shard of its generation is in place
            s.check(set(gens) == {"new"}, "%s #%d (%s): the new index names shards that are %s" % (op.name, n, label, gens))
        if states[index] != "absent" and {"old", "new"} <= set(gens):
            op.stats["an index over old and new shards"] += 1
            note = "  NOTE: the index names a mix of old and new shards"
        s.check(not (states[index] != "absent" and {"old", "new"} <= set(gens)),
                "%s #%d (%s): an index over a mix of old and new shards: %s" % (op.name, n, label, gens))
        if states[index] == "absent" and "new" in gens:
            op.stats["new shards without an index"] += 1
            note = "  NOTE: new shards, no index"
    s.check(read(src) == src_bytes, "%s #%d: the input changed" % (op.name, n))
    others = strangers(op, d)
    s.check(not others, "%s #%d (%s): other files left: %s" % (op.name, n, label, others))

    # Where the kill landed, as far as the files tell.
    committed = [f for f in op.files if states[f] in ("new", "same")]
    renamed = [f for f in op.files if states[f] == "new"]
    sizes = sum(os.path.getsize(os.path.join(d, t)) for t in temps)
    final = sum(os.path.getsize(os.path.join(refs["new"], f)) for f in op.files)
    if len(committed) == len(op.files):
        phase = "renamed"
    elif renamed:
        phase = "between renames"
    elif temps:
        phase = "writing" if sizes < final else "written, before rename"
    else:
        phase = "before any temporary"
    op.phases[phase] += 1
    if temps:
        op.temps_after_kill.append(len(temps))
        wrong = [t for t, (_, tpid) in temps.items() if tpid != pid]
        op.pid_mismatch += wrong
    print("  %-34s #%-2d %-6s %-7s rc %3d  %-22s %s%s%s" % (
        op.name, n, label, "--force" if over_old else "fresh", rc, phase,
        " ".join("%s=%s" % (short(op, f), states[f].split(":")[0]) for f in op.files),
        ("  temps: " + " ".join(sorted(temps))) if temps else "", note))

    # The next successful run writing the same target.
    if op.in_place:
        if read(out) != src_bytes:
            shutil.copyfile(src, out)
        nargs = op.command(src, out)
    else:
        nargs = op.command(src, out) + (["--force"] if any(os.path.exists(p) for p in paths.values()) else [])
    r = s.run(*nargs)
    s.check(r.returncode == 0, "%s #%d: the next run: exit %d: %s" % (op.name, n, r.returncode, r.stderr.strip()))
    for f, p in paths.items():
        st = state_of(op, p, f, refs, sd_new, None)
        s.check(st in ("new", "same"), "%s #%d: after the next run %s is %s" % (op.name, n, f, st))
    left = temporaries(op, d)
    if left:
        op.temps_after_next.append(sorted(left))
    others = strangers(op, d)
    s.check(not others, "%s #%d: other files after the next run: %s" % (op.name, n, others))
    for t in left:  # each kill starts clean
        os.remove(os.path.join(d, t))


def test_kills(s, rng):
    sd_new, sd_old = state_dict(1), state_dict(2)
    src, src_old = s.path("in.pth"), s.path("other.pth")
    torch.save(sd_new, src)
    torch.save(sd_old, src_old)
    src_bytes, src_sha, old_sha = read(src), sha(src), sha(src_old)
    sd_new, sd_old = torch.load(src), torch.load(src_old)  # what the files hold
    print("input %s: %d tensors, %.1f MB, sha256 %s" % (src, len(sd_new), len(src_bytes) / 1e6, src_sha[:16]))
    ops = operations()
    for op in ops:
        refs = make_references(s, op, src, src_old, sd_new, sd_old)
        if refs is None:
            continue
        os.makedirs(s.path(op.folder))
        if op.in_place:
            shutil.copyfile(src, s.path(os.path.join(op.folder, op.target)))
        count = SHARDED_RANDOM_KILLS if op.sharded else RANDOM_KILLS
        delays = [("~0 s", 0.0), ("exited", None)]
        for i in range(count):
            # Sharded: half the delays in the last 40 %, where the shards are fsynced and renamed.
            lo = 0.6 * op.duration if op.sharded and i % 2 else 0.0
            t = rng.uniform(lo, op.duration)
            delays.append(("%.0f ms" % (t * 1000), t))
        print("%s: an uninterrupted run takes %.0f ms; %d kills" % (op.name, op.duration * 1000, len(delays)))
        for n, (label, delay) in enumerate(delays):
            kill_case(s, op, refs, src, src_bytes, sd_new, n, delay, label, over_old=not op.in_place and n % 2 == 1)
        s.check(not op.pid_mismatch, "%s: temporaries left by a killed run do not carry its pid: %s"
                % (op.name, op.pid_mismatch[:3]))
        s.check(not op.temps_after_next, "%s: after %d of %d next runs temporaries of the target were left: %s"
                % (op.name, len(op.temps_after_next), op.stats["kills"], op.temps_after_next[:2]))
    s.check(sha(src) == src_sha and sha(src_old) == old_sha, "the inputs' sha256 changed")
    return ops


def test_stale_rule(s, ops):
    """The next commit removes the target's temporaries whose writer is dead, and no others."""
    op = ops[0]
    d = s.path(op.folder)
    p = subprocess.Popen(["true"])
    p.wait()
    dead = p.pid
    try:
        os.kill(dead, 0)
        s.check(False, "stale rule: pid %d is alive again" % dead)
        return
    except ProcessLookupError:
        pass
    names = {"dead": ".%s.%d.0badc0de.tmp" % (op.target, dead),
             "live": ".%s.%d.0badc0de.tmp" % (op.target, os.getpid()),
             "other target": ".other.pth.%d.0badc0de.tmp" % dead}
    for n in names.values():
        with open(os.path.join(d, n), "wb") as f:
            f.write(b"partial")
    r = s.run(*(op.command(s.path("in.pth"), os.path.join(d, op.target)) + ["--force"]))
    s.check(r.returncode == 0, "stale rule: exit %d %s" % (r.returncode, r.stderr.strip()))
    there = set(os.listdir(d))
    s.check(names["dead"] not in there, "stale rule: a dead writer's temporary %s was not removed" % names["dead"])
    s.check(names["live"] in there, "stale rule: a live writer's temporary %s was removed" % names["live"])
    s.check(names["other target"] in there, "stale rule: another target's temporary %s was removed" % names["other target"])
    for n in names.values():
        if n in there:
            os.remove(os.path.join(d, n))


def report(ops):
    print("\n%-34s %5s %6s %6s %6s %6s %6s %7s %7s  %s" % ("operation", "kills", "done", "absent", "old", "new", "same", "tmp/k", "tmp/nx",
                                                       "phases"))
    for op in ops:
        st = op.stats
        print("%-34s %5d %6d %6d %6d %6d %6d %7d %7d  %s" % (
            op.name, st["kills"], st["exited before the kill"], st["file absent"], st["file old"], st["file new"],
            st["file same"],
            len(op.temps_after_kill), len(op.temps_after_next),
            ", ".join("%s %d" % kv for kv in sorted(op.phases.items()))))
        if op.sharded:
            print("%-34s new shards without an index after %d kills; an index over old and new shards after %d"
                  % ("", st["new shards without an index"], st["an index over old and new shards"]))
    print("(absent/old/new/same count target files after the kills, same: the old file equals the new one;"
          " tmp/k: kills that left a temporary, tmp/nx: next runs after which one was left;"
          " broken files are failures above)")
    print("total kills: %d" % sum(op.stats["kills"] for op in ops))


def main():
    def body(s, _args):
        print("seed %d (CKPT_CRASH_SEED replays another)" % SEED)
        rng = random.Random(SEED)
        ops = test_kills(s, rng)
        test_stale_rule(s, ops)
        report(ops)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
