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

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# name -> (tensor count, shape of each float32 tensor, description)
SPECS = {
    "small": (20, (256, 512), "20 float32 tensors of 256x512 (~10 MiB)"),
    "1g": (2000, (256, 512), "2,000 float32 tensors of 256x512 (~1 GiB)"),
    "many": (100_000, (4, 4), "100,000 float32 tensors of 4x4 (many tiny records)"),
}

# Runs in a child /usr/bin/python3: argv = path count dim0 dim1 seed.
GENERATE_CODE = r"""
import collections, sys, torch
path, count, d0, d1, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
g = torch.Generator().manual_seed(seed)
sd = collections.OrderedDict()
if d0 * d1 >= 4096:
    for i in range(count):
        sd[f"layers.{i}.weight"] = torch.randn(d0, d1, generator=g)
else:  # one draw, then a private storage per tensor (views would share one storage)
    block = torch.randn(count, d0, d1, generator=g)
    for i, t in enumerate(block.unbind(0)):
        sd[f"layers.{i}.weight"] = t.clone()
torch.save(sd, path)
"""

TOOL_OK_CODES = (0, 1)  # ckpt-tool: 0 clean, 1 findings, 2 error


class CommandFailed(Exception):
    pass


class CommandTimedOut(CommandFailed):
    """A run killed by Launcher.run's timeout; .seconds is the limit."""

    def __init__(self, message, seconds):
        super().__init__(message)
        self.seconds = seconds


# ---------------------------------------------------------------------------------------------
# Running one command


class Launcher:
    """Spawns a command with stdin/stdout on /dev/null and returns wall, CPU and peak RSS."""

    def __init__(self, scratch_dir, use_time=True):
        self.time_bin = shutil.which("time", path="/usr/bin:/bin") if use_time else None
        if self.time_bin and not self._time_works():
            self.time_bin = None
        self.scratch_dir = scratch_dir

    def _time_works(self):
        with tempfile.NamedTemporaryFile("r") as f:
            r = subprocess.run([self.time_bin, "-f", "%M %x", "-o", f.name, "--", "/bin/true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return r.returncode == 0 and _parse_time_file(f.name) is not None

    @property
    def description(self):
        if self.time_bin:
            return (f"peak RSS = the command's own ru_maxrss via {self.time_bin} -f %M; "
                    "wall = spawn to os.wait4 in the bench process")
        return ("peak RSS = ru_maxrss from os.wait4 (GNU time not found: values include the "
                "~8 MiB forked copy of the bench interpreter); wall = spawn to os.wait4")

    def run(self, argv, timeout=None):
        """timeout (seconds, optional): the command runs in its own session and, past it, that
        session's process group is killed and CommandTimedOut raised."""
        with tempfile.TemporaryFile(dir=self.scratch_dir) as err, \
                tempfile.NamedTemporaryFile("r", dir=self.scratch_dir, prefix="rss-") as rss:
            full = list(argv)
            if self.time_bin:
                full = [self.time_bin, "-f", "%M %x", "-o", rss.name, "--"] + full
            lock, state = threading.Lock(), {"exited": False, "killed": False}
            t0 = time.perf_counter()
            p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err, start_new_session=timeout is not None)
            if timeout is not None:
                def kill():
                    with lock:  # never after the child is reaped: its pid could be reused
                        if not state["exited"]:
                            state["killed"] = True
                            os.killpg(p.pid, signal.SIGKILL)  # the session started here
                timer = threading.Timer(timeout, kill)
                timer.start()
                os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
                with lock:
                    state["exited"] = True
                timer.cancel()
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t0
            if state["killed"]:
                p.returncode = os.waitstatus_to_exitcode(status)
                raise CommandTimedOut(f"{' '.join(argv)}: killed after {timeout:g} s", timeout)
            p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            rc = p.returncode
            maxrss_kib = ru.ru_maxrss
            if self.time_bin:
                parsed = _parse_time_file(rss.name)
                if parsed is None:
                    raise CommandFailed(f"{' '.join(argv)}: no result from {self.time_bin}")
                maxrss_kib, rc = parsed
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
        return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kib": maxrss_kib,
                "rc": rc, "stderr": stderr}


def _parse_time_file(path):
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
        m, x = lines[-1].split()
        return int(m), int(x)
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------
# Checkpoints


def checkpoint_path(out_dir, name, seed):
    count, shape, _ = SPECS[name]
    return os.path.join(out_dir, f"{name}-{count}x{'x'.join(map(str, shape))}-f32-seed{seed}.pt")


def ensure_checkpoint(out_dir, name, seed, python, regenerate):
    """Returns (path, generated_now, seconds)."""
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


def warm_page_cache(path):
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    total = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            total += n
    return total, time.perf_counter() - t0


def read_data_pkl(path):
    """The floor: open the zip and read the pickle record, as any reader of the file must."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if not names:
            raise CommandFailed(f"{path}: no data.pkl record")
        return len(z.read(names[0])), len(z.infolist())


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
    for c in cmds:
        c["samples"] = []
        c["error"] = None

    def one(c):
        if c["argv"] is None:
            t0 = time.perf_counter()
            c["pickle_bytes"], c["records"] = read_data_pkl(path)
            return {"wall_s": time.perf_counter() - t0, "cpu_s": None, "maxrss_kib": None, "rc": 0}
        s = launcher.run(c["argv"])
        if s["rc"] not in c["ok"]:
            raise CommandFailed(f"{' '.join(c['argv'])} exited with {s['rc']}:\n"
                                f"{s['stderr'][-2000:]}")
        c["last_rc"] = s["rc"]
        del s["stderr"]
        return s

    rounds = max(c["runs"] for c in cmds)
    for r in range(-args.warmup, rounds):  # negative rounds are warm-ups, not recorded
        for c in cmds:
            if c["error"] or r >= c["runs"]:
                continue
            try:
                s = one(c)
            except (CommandFailed, OSError, zipfile.BadZipFile) as e:
                c["error"] = str(e)
                continue
            if r >= 0:
                c["samples"].append(s)
            if args.verbose:
                print(f"  [{name}] {'warm-up' if r < 0 else f'run {r + 1}'}: {c['label']}: "
                      f"{s['wall_s']:.4f} s", file=sys.stderr)
    for c in cmds:
        summarise(c)
    return cmds


def summarise(c):
    walls = [s["wall_s"] for s in c["samples"]]
    cpus = [s["cpu_s"] for s in c["samples"] if s["cpu_s"] is not None]
    rss = [s["maxrss_kib"] for s in c["samples"] if s["maxrss_kib"] is not None]
    c["median_s"] = statistics.median(walls) if walls else None
    c["min_s"] = min(walls) if walls else None
    c["max_s"] = max(walls) if walls else None
    c["median_cpu_s"] = statistics.median(cpus) if cpus else None
    c["peak_mib"] = max(rss) / 1024 if rss else None  # the highest peak over the runs


# ---------------------------------------------------------------------------------------------
# Reporting


def machine_info(args):
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / (1 << 20)
    except OSError:
        pass

    def out(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            return None

    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "date_utc": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "os": _os_name(),
        "mem_total_gib": round(mem_gib, 1) if mem_gib else None,
        "ckpt_tool": args.tool,
        "ckpt_tool_version": out([args.tool, "--version"]),
        "git_head": out(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
        "git_dirty": bool(out(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])),
        "ckpt_tool_sha256": _sha256(args.tool)[:12],
        "ckpt_tool_mtime": datetime.datetime.fromtimestamp(
            os.path.getmtime(args.tool), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "python": args.python,
        "python_version": out([args.python, "-c", "import sys; print(sys.version.split()[0])"]),
        "torch_version": out([args.python, "-c", "import torch; print(torch.__version__)"]),
    }


def _sha256(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def fmt(v, spec, width):
    return f"{'-':>{width}}" if v is None else f"{v:{width}{spec}}"


def print_table(cmds):
    w = max(len(c["label"]) for c in cmds)
    print(f"  {'command':<{w}}  runs  median s     min s     max s    cpu s  peak MiB")
    for c in cmds:
        if c["error"]:
            print(f"  {c['label']:<{w}}  FAILED: {c['error'].splitlines()[0]}")
            continue
        print(f"  {c['label']:<{w}}  {len(c['samples']):>4}  {fmt(c['median_s'], '.4f', 8)}  "
              f"{fmt(c['min_s'], '.4f', 8)}  {fmt(c['max_s'], '.4f', 8)}  "
              f"{fmt(c['median_cpu_s'], '.3f', 7)}  {fmt(c['peak_mib'], '.1f', 8)}")


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


def ratio(x):
    if x is None:
        return "-"
    return f"{x:.0f}x" if x >= 10 else f"{x:.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example: bench/inspect_bench.py --sizes 1g,many --json bench/out/results.json")
    ap.add_argument("--sizes", default="small,1g,many",
                    help=f"comma-separated, from {','.join(SPECS)} (default: all)")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out"),
                    help="where checkpoints are cached (default: bench/out/)")
    ap.add_argument("--tool", default=os.path.join(REPO, "build", "ckpt-tool"),
                    help="ckpt-tool binary (default: build/ckpt-tool)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="interpreter with torch, for generating and torch.load (default: /usr/bin/python3)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each ckpt-tool command (default 5)")
    ap.add_argument("--py-runs", type=int, default=3, help="timed runs of each Python command (default 3)")
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
    os.makedirs(args.out_dir, exist_ok=True)

    errors = []
    machine = machine_info(args)
    launcher = Launcher(args.out_dir, use_time=not args.no_time_wrapper)
    floor = [launcher.run(["/bin/true"]) for _ in range(args.runs + args.warmup)][args.warmup:]
    floor_s = statistics.median(s["wall_s"] for s in floor)
    floor_mib = max(s["maxrss_kib"] for s in floor) / 1024

    print("ckpt-tool inspect benchmark")
    print(f"  date     {machine['date_utc']}")
    print(f"  machine  {machine['nproc']} CPUs ({machine['cpu_model']}), "
          f"{machine['mem_total_gib']} GiB RAM, {machine['os']}, kernel {machine['kernel']}")
    print(f"  tool     {args.tool} ({machine['ckpt_tool_version'] or 'version unknown'}, "
          f"git {machine['git_head'] or '?'}{' + local changes' if machine['git_dirty'] else ''}, "
          f"built {machine['ckpt_tool_mtime']}, sha256 {machine['ckpt_tool_sha256']})")
    print(f"  python   {args.python} {machine['python_version']}, torch {machine['torch_version']}")
    print(f"  method   {launcher.description}")
    print(f"           runs: {args.runs} per ckpt-tool command and the zipfile floor, {args.py_runs} per "
          f"Python command, after {args.warmup} untimed warm-up each, round-robin; medians reported, "
          f"peak MiB is the highest over the runs")
    print(f"  launcher floor: /bin/true  median {floor_s:.4f} s, peak {floor_mib:.1f} MiB "
          f"(spawn overhead in every row; nothing subtracted)")

    results = {"machine": machine, "method": launcher.description,
               "settings": {"runs": args.runs, "py_runs": args.py_runs, "warmup": args.warmup,
                            "seed": args.seed, "out_dir": args.out_dir},
               "launcher_floor": {"median_s": floor_s, "peak_mib": floor_mib}, "files": []}

    for name in sizes:
        count, shape, desc = SPECS[name]
        print()
        try:
            path, generated, gen_s = ensure_checkpoint(args.out_dir, name, args.seed, args.python,
                                                       args.regenerate)
        except (CommandFailed, OSError) as e:
            print(f"== {name}: FAILED to generate: {e}")
            errors.append(f"{name}: {e}")
            continue
        size = os.path.getsize(path)
        print(f"== {name}: {desc}")
        print(f"   {path}")
        print(f"   {size / (1 << 20):.1f} MiB, {count} tensors"
              + (f"; generated now by torch.save in {gen_s:.1f} s" if generated else "; cached"))
        nbytes, warm_s = warm_page_cache(path)
        print(f"   page cache warmed: read all {nbytes / (1 << 20):.1f} MiB once in {warm_s:.2f} s "
              f"before timing")
        cmds = bench_file(launcher, args, name, path)
        print_table(cmds)
        rat = ratios(cmds)
        parts = []
        for tool_id, what in (("inspect_json", "--json"), ("inspect_text", "text")):
            if tool_id in rat:
                r = rat[tool_id]
                parts.append(f"vs {what}: time {ratio(r['time'])}, peak RSS {ratio(r['peak_rss'])}")
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
            "commands": [{k: c.get(k) for k in ("id", "label", "kind", "argv", "median_s", "min_s",
                                                 "max_s", "median_cpu_s", "peak_mib", "error")}
                         | {"samples": c["samples"]} for c in cmds],
        })

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
