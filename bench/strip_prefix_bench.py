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

Wall time and peak RSS are measured by bench/benchlib.py's Launcher, as in bench/inspect_bench.py:
wall from just before the spawn to the return of os.wait4, peak RSS as the command's own ru_maxrss
through GNU time (/usr/bin/time -f %M), with a clear note when GNU time is missing. The cost of the
launcher itself is printed once as "launcher floor: /bin/true". Nothing is subtracted from any row.

Exit status: 0 when every command ran, 1 when one failed (or a file could not be generated, or the
check of ckpt-tool's output failed), 2 on bad usage. Timings never change the exit status: this is
a benchmark, not a test.
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

sys.dont_write_bytecode = True  # no bench/__pycache__ from the import below
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402  (Launcher, Fixture, the table, the machine, ...)

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


CommandFailed = bl.CommandFailed  # what bl.Launcher raises, too

# The DataParallel files, cached beside benchlib's plain ones (bench/run times diff-keys on both).
DDP = bl.Fixture(SPECS, GENERATE_CODE, prefix="ddp-")


# ---------------------------------------------------------------------------------------------
# The check of ckpt-tool's output (once per file, untimed)


def verify_tool_output(args, path, scratch):
    """Returns (ok, one-line summary, details dict)."""
    out = os.path.join(scratch, "verify.pt")
    return bl.check_written([args.tool, "strip-prefix", path, "-o", out, "--force"], out,
                            "ckpt-tool strip-prefix", TOOL_OK_CODES, lambda o: check_output(args, path, o))


def check_output(args, path, out):
    """torch.load of ckpt-tool's output against the input, in a child torch interpreter."""
    out_bytes = os.path.getsize(out)
    d, failed = bl.run_check_child(args.python, VERIFY_CODE, path, out, PREFIX,
                                   who="torch.load of ckpt-tool's output")
    if failed:
        return failed
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


# ---------------------------------------------------------------------------------------------
# Benchmarking one file


def bench_file(launcher, args, name, path, scratch):
    out = os.path.join(scratch, "out.pt")
    cmds = bl.floor_commands(args, path, scratch) + [
        {"id": "strip_prefix", "label": "ckpt-tool strip-prefix FILE -o OUT --force", "kind": "tool",
         "argv": [args.tool, "strip-prefix", path, "-o", out, "--force"], "runs": args.runs,
         "ok": TOOL_OK_CODES, "output": out},
        {"id": "python", "label": "python: torch.load; strip keys; torch.save", "kind": "python",
         "argv": [args.python, "-c", STRIP_CODE, path, out, PREFIX], "runs": args.py_runs,
         "ok": (0,), "output": out},
    ]
    return bl.round_robin(cmds, lambda c: bl.run_once(launcher, c), args.warmup, args.verbose,
                          f"  [{name}]")


def ratios(cmds):
    by = {c["id"]: c for c in cmds}
    return {"tool_over_cp": bl.div(by, "strip_prefix", "cp"),
            "tool_over_cp_sync": bl.div(by, "strip_prefix", "cp_sync"),
            "python_over_tool": bl.div(by, "python", "strip_prefix"),
            "tool_peak_mib": bl.peak(by, "strip_prefix")}


def flag(value, limit):
    return bl.flag(None if value is None else value <= limit)


# ---------------------------------------------------------------------------------------------

def main():
    ap = bl.common_parser(__doc__, "Example: bench/strip_prefix_bench.py --sizes 1g --json bench/out/strip.json",
                          SPECS, "small,1g",
                          out_dir_help="where checkpoints are cached and outputs written (default: bench/out/)",
                          python_help="interpreter with torch, for generating, the Python row and the check "
                                      "(default: /usr/bin/python3)",
                          runs_help="timed runs of cp and ckpt-tool (default 5)",
                          py_runs_help="timed runs of the Python command (default 3)")
    args = ap.parse_args()

    sizes = bl.check_common_args(ap, args, SPECS, tools=("cp",))
    if sizes is None:
        return 1
    args.out_dir = os.path.abspath(args.out_dir)

    errors = []
    machine = bl.machine_info(args)
    bl.add_copy_machine_info(args, machine)

    scratch = tempfile.mkdtemp(prefix=".strip-scratch-", dir=args.out_dir)
    try:
        launcher = bl.Launcher(scratch, use_time=not args.no_time_wrapper)
        floor_s, floor_mib = bl.launcher_floor(launcher, args.runs, args.warmup)

        bl.print_header("ckpt-tool strip-prefix benchmark", args, machine)
        bl.print_copy_method(args, machine, launcher)
        bl.print_launcher_floor(floor_s, floor_mib)

        results = {"machine": machine, "method": launcher.description,
                   "settings": {"runs": args.runs, "py_runs": args.py_runs, "warmup": args.warmup,
                                "seed": args.seed, "out_dir": args.out_dir, "prefix": PREFIX},
                   "launcher_floor": {"median_s": floor_s, "peak_mib": floor_mib}, "files": []}

        for name in sizes:
            count, shape, desc = SPECS[name]
            prepared = bl.prepare_size(args, name, SPECS[name], DDP, errors,
                                       detail=f", keys {PREFIX}layers.N.weight", scratch=scratch)
            if prepared is None:
                continue
            path, size, generated, warm_s = prepared
            try:
                ok, summary, vdetail = verify_tool_output(args, path, scratch)
            except OSError as e:
                ok, summary, vdetail = False, f"check could not run: {e}", {}
            bl.print_check(summary)
            if not ok:
                errors.append(f"{name}: check of ckpt-tool output: {summary}")
            bl.warm_page_cache(path)  # the check read and wrote other files; FILE stays hot
            cmds = bench_file(launcher, args, name, path, scratch)
            bl.print_table(cmds)
            rat = ratios(cmds)
            print(f"   ckpt-tool / (cp + sync) (time): {bl.ratio(rat['tool_over_cp_sync'])}"
                  f"{flag(rat['tool_over_cp_sync'], 1.2)}  target <= 1.2x (same durability)")
            print(f"   ckpt-tool / cp (time):          {bl.ratio(rat['tool_over_cp'])}"
                  f"  (cp leaves its data in the page cache; strip-prefix fsyncs)")
            print(f"   python / ckpt-tool (speed-up): {bl.ratio(rat['python_over_tool'])}")
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
                "commands": bl.rows_json(cmds, extra=("out_bytes",)),
            })
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    return bl.finish(results, errors, args.json)


if __name__ == "__main__":
    sys.exit(main())
