#!/usr/bin/python3
"""Benchmark `ckpt-tool strip-prefix` against `cp` and against the same repair done in torch.

For each size (--sizes small,1g; default both) the script

  1. generates the checkpoint once, in a child /usr/bin/python3 that imports torch, from the real
     state_dict() of a torch.nn.DataParallel-wrapped model, so every key starts with `module.` and
     the file carries DataParallel's `_metadata`; it is cached by name in --out-dir (default
     bench/out/, git-ignored) and a cached file is reused as is;
  2. warms the page cache by reading the whole file once, so every command below reads from RAM;
  3. checks once, outside the timing, that `ckpt-tool strip-prefix` gives a file that torch.load
     reads in a child /usr/bin/python3, with every key stripped and every tensor equal to the input;
  4. runs, round-robin, one untimed warm-up each and then
       cp FILE OUT                                             (--runs, default 5; the floor)
       cp FILE OUT && sync OUT                                 (--runs; the floor with the fsync
                                                                strip-prefix does before its rename)
       ckpt-tool strip-prefix FILE -o OUT --force              (--runs)
       python3: sd = torch.load(FILE); strip `module.` from the keys (and from _metadata, as
                ckpt-tool does); torch.save(sd2, OUT)          (--py-runs, default 3)
     and prints median / min / max wall seconds, median CPU seconds and peak RSS, then the ratios
     ckpt-tool / (cp + sync) (target <= 1.2x), ckpt-tool / cp, python / ckpt-tool (the speed-up;
     torch.save does not fsync) and ckpt-tool's peak RSS
     (target <= 64 MiB).

OUT is a fresh name in a scratch directory inside --out-dir, so on the same filesystem as FILE (as
copy_file_range and cp's own copy offload need); before every run it does not exist, and after
every run it is checked, deleted and the filesystem synced, all outside the timing. Nothing fsyncs
inside the timing unless the command itself does.

Wall time and peak RSS are measured as in bench/inspect_bench.py, whose Launcher this script uses:
wall from just before the spawn to the return of os.wait4, peak RSS as the command's own ru_maxrss
through GNU time (/usr/bin/time -f %M), with a clear note when GNU time is missing. The cost of the
launcher itself is printed once as "launcher floor: /bin/true". Nothing is subtracted from any row.

Exit status: 0 when every command ran, 1 when one failed (or a file could not be generated, or the
check of ckpt-tool's output failed), 2 on bad usage. Timings never change the exit status: this is
a benchmark, not a test.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

sys.dont_write_bytecode = True  # no bench/__pycache__ from the import below
sys.path.insert(0, HERE)
import inspect_bench as ib  # noqa: E402  (Launcher, machine_info, summarise, print_table, ...)

PREFIX = "module."

# name -> (tensor count, shape of each float32 tensor, description)
SPECS = {
    "small": (20, (256, 512), "20 float32 tensors of 256x512 (~10 MiB), DataParallel keys"),
    "1g": (2000, (256, 512), "2,000 float32 tensors of 256x512 (~1 GiB), DataParallel keys"),
    # Not in the default --sizes; bench/run's DataParallel form of inspect_bench's "many".
    "many": (100_000, (4, 4), "100,000 float32 tensors of 4x4 (many tiny records), DataParallel keys"),
}

# Runs in a child /usr/bin/python3: argv = path count dim0 dim1 seed.
# nn.Linear(d1, d0) has a d0 x d1 weight; skip_init leaves it unset, then it is filled from a
# seeded generator so the file is the same on every machine.
GENERATE_CODE = r"""
import sys, torch
path, count, d0, d1, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
g = torch.Generator().manual_seed(seed)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.utils.skip_init(torch.nn.Linear, d1, d0, bias=False) for _ in range(count))

model = Model()
with torch.no_grad():
    for layer in model.layers:
        layer.weight.copy_(torch.randn(d0, d1, generator=g))
sd = torch.nn.DataParallel(model).state_dict()
bad = [k for k in sd if not k.startswith("module.")]
assert not bad and len(sd) == count, (len(sd), bad[:5])
assert hasattr(sd, "_metadata") and "module" in sd._metadata
torch.save(sd, path)
"""

# The Python equivalent of the repair, timed: argv = in out prefix.
STRIP_CODE = r"""
import collections, sys, torch
src, dst, p = sys.argv[1], sys.argv[2], sys.argv[3]
sd = torch.load(src)
sd2 = collections.OrderedDict((k[len(p):] if k.startswith(p) else k, v) for k, v in sd.items())
meta = getattr(sd, "_metadata", None)
if meta is not None:
    sd2._metadata = collections.OrderedDict(
        (k[len(p):] if k.startswith(p) else ("" if k + "." == p else k), v)
        for k, v in meta.items() if k + "." != p)
torch.save(sd2, dst)
"""

# The check of ckpt-tool's output, untimed: argv = in out prefix. Prints one JSON line.
VERIFY_CODE = r"""
import json, sys, torch
src, dst, p = sys.argv[1], sys.argv[2], sys.argv[3]
a = torch.load(src)
b = torch.load(dst)
want = [k[len(p):] if k.startswith(p) else k for k in a]
res = {"keys": len(b), "keys_as_expected": list(b.keys()) == want,
       "left_with_prefix": sum(1 for k in b if k.startswith(p)),
       "tensors_equal": list(b.keys()) == want and all(
           torch.equal(a[k], b[n]) and a[k].dtype == b[n].dtype for k, n in zip(a, want))}
ma, mb = getattr(a, "_metadata", None), getattr(b, "_metadata", None)
res["metadata_in"] = None if ma is None else len(ma)
res["metadata_out"] = None if mb is None else len(mb)
res["metadata_left_with_prefix"] = None if mb is None else sum(
    1 for k in mb if k.startswith(p) or k + "." == p)
print(json.dumps(res))
"""

TOOL_OK_CODES = (0,)  # a repair that wrote its output; anything else is a failure here


CommandFailed = ib.CommandFailed  # what ib.Launcher raises, too


# ---------------------------------------------------------------------------------------------
# Checkpoints


def checkpoint_path(out_dir, name, seed):
    count, shape, _ = SPECS[name]
    return os.path.join(out_dir,
                        f"ddp-{name}-{count}x{'x'.join(map(str, shape))}-f32-seed{seed}.pt")


def ensure_checkpoint(out_dir, name, seed, python, regenerate):
    """Returns (path, generated_now, seconds). Like inspect_bench's, with DataParallel keys."""
    path = checkpoint_path(out_dir, name, seed)
    if os.path.exists(path) and not regenerate:
        return path, False, 0.0
    count, (d0, d1), _ = SPECS[name]
    tmp_dir = tempfile.mkdtemp(prefix=".gen-", dir=out_dir)
    try:
        # Written under its final file name (torch.save names the archive's top folder after it),
        # then moved into place, so an interrupted run never leaves a truncated cache entry.
        tmp_path = os.path.join(tmp_dir, os.path.basename(path))
        t0 = time.perf_counter()
        r = subprocess.run([python, "-c", GENERATE_CODE, tmp_path, str(count), str(d0), str(d1),
                            str(seed)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            raise CommandFailed(f"generating {name} with {python} failed (exit {r.returncode}):\n"
                                f"{r.stdout[-2000:]}")
        os.replace(tmp_path, path)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return path, True, seconds


def remove_output(out):
    try:
        os.unlink(out)
    except FileNotFoundError:
        pass
    os.sync()  # settle the filesystem (journal, freed blocks) before the next timed run


# ---------------------------------------------------------------------------------------------
# The check of ckpt-tool's output (once per file, untimed)


def verify_tool_output(args, path, scratch):
    """Returns (ok, one-line summary, details dict)."""
    out = os.path.join(scratch, "verify.pt")
    remove_output(out)
    try:
        r = subprocess.run([args.tool, "strip-prefix", path, "-o", out, "--force"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode not in TOOL_OK_CODES:
            return False, (f"ckpt-tool strip-prefix exited with {r.returncode}:\n"
                           f"{(r.stderr + r.stdout)[-2000:]}"), {"rc": r.returncode}
        if not os.path.exists(out):
            return False, "ckpt-tool strip-prefix exited 0 but wrote no output", {}
        out_bytes = os.path.getsize(out)
        v = subprocess.run([args.python, "-c", VERIFY_CODE, path, out, PREFIX],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if v.returncode != 0:
            return False, (f"torch.load of ckpt-tool's output failed (exit {v.returncode}):\n"
                           f"{v.stderr[-2000:]}"), {"rc": v.returncode}
        try:
            d = json.loads(v.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, f"verify child printed no result: {v.stdout[-500:]!r}", {}
        d["output_bytes"] = out_bytes
        d["input_bytes"] = os.path.getsize(path)
        ok = d["keys_as_expected"] and d["left_with_prefix"] == 0 and d["tensors_equal"]
        meta = ("no _metadata in output" if d["metadata_out"] is None else
                f"_metadata {d['metadata_out']} entries, "
                f"{d['metadata_left_with_prefix']} still with {PREFIX!r}")
        summary = (f"{'OK' if ok else 'FAILED'}: torch.load reads ckpt-tool's output; "
                   f"{d['keys']} keys, {'in order, all stripped' if d['keys_as_expected'] else 'NOT the expected stripped keys'}"
                   f" ({d['left_with_prefix']} still with {PREFIX!r}); "
                   f"tensors {'equal to input' if d['tensors_equal'] else 'DIFFER from input'}; "
                   f"{meta}; output {out_bytes:,} B vs input {d['input_bytes']:,} B")
        return ok, summary, d
    finally:
        remove_output(out)


# ---------------------------------------------------------------------------------------------
# Benchmarking one file


def bench_file(launcher, args, name, path, scratch):
    out = os.path.join(scratch, "out.pt")
    cmds = [
        {"id": "cp", "label": "cp FILE OUT", "kind": "floor",
         "argv": [args.cp, path, out], "runs": args.runs, "ok": (0,)},
        # strip-prefix fsyncs its output before renaming it into place (a repair must never leave a
        # half-written file after a crash); this is cp with the same durability.
        {"id": "cp_sync", "label": "cp FILE OUT && sync OUT", "kind": "floor",
         "argv": ["/bin/sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", path, out], "runs": args.runs,
         "ok": (0,)},
        {"id": "strip_prefix", "label": "ckpt-tool strip-prefix FILE -o OUT --force", "kind": "tool",
         "argv": [args.tool, "strip-prefix", path, "-o", out, "--force"], "runs": args.runs,
         "ok": TOOL_OK_CODES},
        {"id": "python", "label": "python: torch.load; strip keys; torch.save", "kind": "python",
         "argv": [args.python, "-c", STRIP_CODE, path, out, PREFIX], "runs": args.py_runs,
         "ok": (0,)},
    ]
    for c in cmds:
        c["samples"] = []
        c["error"] = None

    def one(c):
        remove_output(out)
        try:
            s = launcher.run(c["argv"])
            if s["rc"] not in c["ok"]:
                shown = c["label"] if c["kind"] == "python" else " ".join(c["argv"])
                raise CommandFailed(f"{shown} exited with {s['rc']}:\n{s['stderr'][-2000:]}")
            if not os.path.exists(out):
                raise CommandFailed(f"{c['label']}: exited {s['rc']} but wrote no {out}")
            c["out_bytes"] = os.path.getsize(out)
        finally:
            remove_output(out)
        del s["stderr"]
        return s

    rounds = max(c["runs"] for c in cmds)
    for r in range(-args.warmup, rounds):  # negative rounds are warm-ups, not recorded
        for c in cmds:
            if c["error"] or r >= c["runs"]:
                continue
            try:
                s = one(c)
            except (CommandFailed, OSError) as e:
                c["error"] = str(e)
                continue
            if r >= 0:
                c["samples"].append(s)
            if args.verbose:
                print(f"  [{name}] {'warm-up' if r < 0 else f'run {r + 1}'}: {c['label']}: "
                      f"{s['wall_s']:.4f} s", file=sys.stderr)
    for c in cmds:
        ib.summarise(c)
    return cmds


def ratios(cmds):
    by = {c["id"]: c for c in cmds}
    cp, cp_sync, tool, py = by["cp"], by["cp_sync"], by["strip_prefix"], by["python"]

    def div(a, b):
        if a["error"] or b["error"] or not a["median_s"] or not b["median_s"]:
            return None
        return a["median_s"] / b["median_s"]

    return {"tool_over_cp": div(tool, cp), "tool_over_cp_sync": div(tool, cp_sync),
            "python_over_tool": div(py, tool),
            "tool_peak_mib": None if tool["error"] else tool["peak_mib"]}


def flag(value, limit):
    if value is None:
        return ""
    return "  (target met)" if value <= limit else "  (ABOVE target)"


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example: bench/strip_prefix_bench.py --sizes 1g --json bench/out/strip.json")
    ap.add_argument("--sizes", default="small,1g",
                    help=f"comma-separated, from {','.join(SPECS)} (default: all)")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out"),
                    help="where checkpoints are cached and outputs written (default: bench/out/)")
    ap.add_argument("--tool", default=os.path.join(REPO, "build", "ckpt-tool"),
                    help="ckpt-tool binary (default: build/ckpt-tool)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="interpreter with torch, for generating, the Python row and the check "
                         "(default: /usr/bin/python3)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs of cp and ckpt-tool (default 5)")
    ap.add_argument("--py-runs", type=int, default=3, help="timed runs of the Python command (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each command first (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for the tensor data (default 0)")
    ap.add_argument("--regenerate", action="store_true", help="rewrite cached checkpoints")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    ap.add_argument("--no-time-wrapper", action="store_true",
                    help="take peak RSS from os.wait4 directly (inflated by the bench's own image)")
    ap.add_argument("-v", "--verbose", action="store_true", help="each run on stderr")
    args = ap.parse_args()

    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SPECS]
    if bad or not sizes:
        ap.error(f"unknown size(s) {','.join(bad) or '(none)'}; choose from {','.join(SPECS)}")
    if args.runs < 1 or args.py_runs < 1 or args.warmup < 0:
        ap.error("--runs and --py-runs must be >= 1, --warmup >= 0")
    args.tool = os.path.abspath(args.tool)
    if not os.access(args.tool, os.X_OK):
        print(f"error: {args.tool} is not an executable (build ckpt-tool first, or pass --tool)",
              file=sys.stderr)
        return 1
    args.cp = shutil.which("cp", path="/usr/bin:/bin")
    if not args.cp:
        print("error: no cp in /usr/bin or /bin", file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    args.out_dir = os.path.abspath(args.out_dir)

    errors = []
    machine = ib.machine_info(args)
    cp_version = subprocess.run([args.cp, "--version"], capture_output=True, text=True).stdout
    machine["cp"] = args.cp
    machine["cp_version"] = cp_version.splitlines()[0] if cp_version else None
    machine["out_dir_fs"] = None
    if shutil.which("findmnt"):
        fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", args.out_dir],
                            capture_output=True, text=True)
        machine["out_dir_fs"] = fs.stdout.strip() or None

    scratch = tempfile.mkdtemp(prefix=".strip-scratch-", dir=args.out_dir)
    try:
        launcher = ib.Launcher(scratch, use_time=not args.no_time_wrapper)
        floor = [launcher.run(["/bin/true"]) for _ in range(args.runs + args.warmup)][args.warmup:]
        floor_s = statistics.median(s["wall_s"] for s in floor)
        floor_mib = max(s["maxrss_kib"] for s in floor) / 1024

        print("ckpt-tool strip-prefix benchmark")
        print(f"  date     {machine['date_utc']}")
        print(f"  machine  {machine['nproc']} CPUs ({machine['cpu_model']}), "
              f"{machine['mem_total_gib']} GiB RAM, {machine['os']}, kernel {machine['kernel']}")
        print(f"  tool     {args.tool} ({machine['ckpt_tool_version'] or 'version unknown'}, "
              f"git {machine['git_head'] or '?'}{' + local changes' if machine['git_dirty'] else ''}, "
              f"built {machine['ckpt_tool_mtime']}, sha256 {machine['ckpt_tool_sha256']})")
        print(f"  python   {args.python} {machine['python_version']}, torch {machine['torch_version']}")
        print(f"  cp       {args.cp} ({machine['cp_version'] or 'version unknown'})")
        print(f"  disk     FILE and OUT both in {args.out_dir} ({machine['out_dir_fs'] or 'fs unknown'}); "
              f"OUT deleted and fs synced between runs, untimed")
        print(f"  method   {launcher.description}")
        print(f"           runs: {args.runs} per cp / ckpt-tool, {args.py_runs} for Python, after "
              f"{args.warmup} untimed warm-up each, round-robin; medians reported, peak MiB is the "
              f"highest over the runs")
        print(f"  launcher floor: /bin/true  median {floor_s:.4f} s, peak {floor_mib:.1f} MiB "
              f"(spawn overhead in every row; nothing subtracted)")

        results = {"machine": machine, "method": launcher.description,
                   "settings": {"runs": args.runs, "py_runs": args.py_runs, "warmup": args.warmup,
                                "seed": args.seed, "out_dir": args.out_dir, "prefix": PREFIX},
                   "launcher_floor": {"median_s": floor_s, "peak_mib": floor_mib}, "files": []}

        for name in sizes:
            count, shape, desc = SPECS[name]
            print()
            try:
                path, generated, gen_s = ensure_checkpoint(args.out_dir, name, args.seed,
                                                           args.python, args.regenerate)
            except (CommandFailed, OSError) as e:
                print(f"== {name}: FAILED to generate: {e}")
                errors.append(f"{name}: {e}")
                continue
            size = os.path.getsize(path)
            print(f"== {name}: {desc}")
            print(f"   {path}")
            print(f"   {size / (1 << 20):.1f} MiB, {count} tensors, keys {PREFIX}layers.N.weight"
                  + (f"; generated now by torch.save in {gen_s:.1f} s" if generated else "; cached"))
            if os.stat(path).st_dev != os.stat(scratch).st_dev:  # cannot happen: scratch is in out-dir
                print(f"   note: {scratch} is not on the filesystem of {path}")
            nbytes, warm_s = ib.warm_page_cache(path)
            print(f"   page cache warmed: read all {nbytes / (1 << 20):.1f} MiB once in "
                  f"{warm_s:.2f} s before timing")
            try:
                ok, summary, vdetail = verify_tool_output(args, path, scratch)
            except OSError as e:
                ok, summary, vdetail = False, f"check could not run: {e}", {}
            print(f"   check (once, untimed): {summary.splitlines()[0]}")
            for line in summary.splitlines()[1:]:
                print(f"     {line}")
            if not ok:
                errors.append(f"{name}: check of ckpt-tool output: {summary}")
            ib.warm_page_cache(path)  # the check read and wrote other files; FILE stays hot
            cmds = bench_file(launcher, args, name, path, scratch)
            ib.print_table(cmds)
            rat = ratios(cmds)
            print(f"   ckpt-tool / (cp + sync) (time): {ib.ratio(rat['tool_over_cp_sync'])}"
                  f"{flag(rat['tool_over_cp_sync'], 1.2)}  target <= 1.2x (same durability)")
            print(f"   ckpt-tool / cp (time):          {ib.ratio(rat['tool_over_cp'])}"
                  f"  (cp leaves its data in the page cache; strip-prefix fsyncs)")
            print(f"   python / ckpt-tool (speed-up): {ib.ratio(rat['python_over_tool'])}")
            peak = "-" if rat["tool_peak_mib"] is None else f"{rat['tool_peak_mib']:.1f} MiB"
            print(f"   ckpt-tool peak RSS:            {peak}"
                  f"{flag(rat['tool_peak_mib'], 64)}  target <= 64 MiB")
            outs = {c["id"]: c.get("out_bytes") for c in cmds}
            print(f"   output sizes: cp {outs['cp'] or '-'} B, ckpt-tool {outs['strip_prefix'] or '-'} B, "
                  f"python {outs['python'] or '-'} B")
            for c in cmds:
                if c["error"]:
                    errors.append(f"{name}: {c['label']}: {c['error']}")
            results["files"].append({
                "size": name, "description": desc, "path": path, "bytes": size, "tensors": count,
                "tensor_shape": list(shape), "generated_now": generated,
                "page_cache_warm_read_s": warm_s,
                "check": {"ok": ok, "summary": summary, **vdetail},
                "ratios": rat,
                "commands": [{k: c.get(k) for k in ("id", "label", "kind", "argv", "median_s",
                                                     "min_s", "max_s", "median_cpu_s", "peak_mib",
                                                     "out_bytes", "error")}
                             | {"samples": c["samples"]} for c in cmds],
            })
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    if args.json:
        results["errors"] = errors
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        print(f"\nresults written to {args.json}")
    if errors:
        print("\nerrors:", file=sys.stderr)
        for e in errors:
            print("  " + e.rstrip().replace("\n", "\n    "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
