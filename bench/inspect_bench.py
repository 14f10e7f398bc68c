#!/usr/bin/python3
"""Benchmark `ckpt-tool inspect` against `torch.load` on checkpoints written by real torch.save.

For each size (--sizes small,1g,many; default all three) the script

  1. generates the checkpoint once, in a child /usr/bin/python3 that imports torch, and caches it
     by name in --out-dir (default bench/out/, git-ignored); a cached file is reused as is;
  2. warms the page cache by reading the whole file once, so every command below reads from RAM;
  3. runs, round-robin, one untimed warm-up each and then
       ckpt-tool inspect FILE --json > /dev/null              (--runs, default 5)
       ckpt-tool inspect FILE        > /dev/null              (--runs)
       python3 -c "import torch; torch.load('FILE')"          (--py-runs, default 3)
       python3 -c "import torch"                              (--py-runs)
       zipfile: open FILE, read its data.pkl, in this process (--runs)
     and prints median / min / max wall seconds, median CPU seconds and peak RSS.

Wall time is measured here, from just before the spawn to the return of os.wait4. Peak RSS is
ru_maxrss of the command itself, taken through GNU time (/usr/bin/time -f %M), which forks the
command from its own ~1 MiB image. Measuring with os.wait4 straight from this Python process would
not do: Linux folds the pre-exec memory of the forked child (a copy of this interpreter, ~8 MiB;
with vfork, the parent's lifetime peak) into the child's ru_maxrss. The cost of the launcher itself
is printed once as "launcher floor: /bin/true". Nothing is subtracted from any row.

Exit status: 0 when every command ran, 1 when one failed (or a file could not be generated),
2 on bad usage. Timings never change the exit status: this is a benchmark, not a test.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

sys.dont_write_bytecode = True  # no bench/__pycache__ from the import below
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402  (Launcher, the plain files, the table, the machine, ...)

# name -> (tensor count, shape of each float32 tensor, description): benchlib's plain files
SPECS = bl.PLAIN_SPECS

TOOL_OK_CODES = (0, 1)  # ckpt-tool: 0 clean, 1 findings, 2 error

CommandFailed = bl.CommandFailed  # what bl.Launcher raises, too


# ---------------------------------------------------------------------------------------------
# Benchmarking one file


def bench_file(launcher, args, name, path):
    label_file = "FILE"
    cmds = [
        {"id": "inspect_json", "label": f"ckpt-tool inspect {label_file} --json", "kind": "tool",
         "argv": [args.tool, "inspect", path, "--json"], "runs": args.runs, "ok": TOOL_OK_CODES},
        {"id": "inspect_text", "label": f"ckpt-tool inspect {label_file}", "kind": "tool",
         "argv": [args.tool, "inspect", path], "runs": args.runs, "ok": TOOL_OK_CODES},
        {"id": "torch_load", "label": f"python: import torch; torch.load({label_file})",
         "kind": "python", "argv": [args.python, "-c", f"import torch; torch.load({path!r})"],
         "runs": args.py_runs, "ok": (0,)},
        {"id": "import_torch", "label": "python: import torch", "kind": "python",
         "argv": [args.python, "-c", "import torch"], "runs": args.py_runs, "ok": (0,)},
        {"id": "zip_floor", "label": "floor: zipfile open + read data.pkl (in-process)",
         "kind": "in-process", "argv": None, "runs": args.runs, "ok": None},
    ]
    zip_floor = cmds[-1]
    zip_floor["fn"] = lambda: zip_floor.update(zip(("pickle_bytes", "records"), bl.read_data_pkl(path)))
    return bl.round_robin(cmds, lambda c: bl.run_once(launcher, c), args.warmup, args.verbose,
                          f"  [{name}]")


# ---------------------------------------------------------------------------------------------
# Reporting


def ratios(cmds):
    by = {c["id"]: c for c in cmds}
    out = {}
    load = by["torch_load"]
    for tool_id in ("inspect_json", "inspect_text"):
        t = by[tool_id]
        if load["error"] or t["error"]:
            continue
        out[tool_id] = {
            "time": load["median_s"] / t["median_s"] if t["median_s"] else None,
            "peak_rss": load["peak_mib"] / t["peak_mib"] if t["peak_mib"] else None,
        }
    return out


def main():
    ap = bl.common_parser(__doc__, "Example: bench/inspect_bench.py --sizes 1g,many --json bench/out/results.json",
                          SPECS, "small,1g,many",
                          out_dir_help="where checkpoints are cached (default: bench/out/)",
                          python_help="interpreter with torch, for generating and torch.load (default: /usr/bin/python3)",
                          runs_help="timed runs of each ckpt-tool command (default 5)",
                          py_runs_help="timed runs of each Python command (default 3)")
    args = ap.parse_args()

    sizes = bl.check_common_args(ap, args, SPECS)
    if sizes is None:
        return 1

    errors = []
    machine = bl.machine_info(args)
    launcher = bl.Launcher(args.out_dir, use_time=not args.no_time_wrapper)
    floor_s, floor_mib = bl.launcher_floor(launcher, args.runs, args.warmup)

    bl.print_header("ckpt-tool inspect benchmark", args, machine)
    print(f"  method   {launcher.description}")
    print(f"           runs: {args.runs} per ckpt-tool command and the zipfile floor, {args.py_runs} per "
          f"Python command, after {args.warmup} untimed warm-up each, round-robin; medians reported, "
          f"peak MiB is the highest over the runs")
    bl.print_launcher_floor(floor_s, floor_mib)

    results = {"machine": machine, "method": launcher.description,
               "settings": {"runs": args.runs, "py_runs": args.py_runs, "warmup": args.warmup,
                            "seed": args.seed, "out_dir": args.out_dir},
               "launcher_floor": {"median_s": floor_s, "peak_mib": floor_mib}, "files": []}

    for name in sizes:
        count, shape, desc = SPECS[name]
        prepared = bl.prepare_size(args, name, SPECS[name], bl.PLAIN, errors)
        if prepared is None:
            continue
        path, size, generated, warm_s = prepared
        cmds = bench_file(launcher, args, name, path)
        bl.print_table(cmds)
        rat = ratios(cmds)
        parts = []
        for tool_id, what in (("inspect_json", "--json"), ("inspect_text", "text")):
            if tool_id in rat:
                r = rat[tool_id]
                parts.append(f"vs {what}: time {bl.ratio(r['time'])}, peak RSS {bl.ratio(r['peak_rss'])}")
        if parts:
            print(f"   torch.load / ckpt-tool inspect: {'; '.join(parts)}")
        floor_c = next(c for c in cmds if c["id"] == "zip_floor")
        if not floor_c["error"]:
            print(f"   (zip has {floor_c['records']} records; data.pkl is {floor_c['pickle_bytes']} bytes)")
        for c in cmds:
            if c["error"]:
                errors.append(f"{name}: {c['label']}: {c['error']}")
            if c.get("last_rc") == 1:
                print(f"   note: {c['label']} exited 1 (findings), counted as a successful run")
        results["files"].append({
            "size": name, "description": desc, "path": path, "bytes": size, "tensors": count,
            "tensor_shape": list(shape), "generated_now": generated,
            "page_cache_warm_read_s": warm_s, "ratios_torch_load_over_inspect": rat,
            "commands": bl.rows_json(cmds),
        })

    return bl.finish(results, errors, args.json)


if __name__ == "__main__":
    sys.exit(main())
