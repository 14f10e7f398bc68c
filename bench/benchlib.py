"""What the bench scripts share: running and timing a command (wall time, CPU, peak RSS through GNU
time), the round-robin over a table's rows and their medians, the table and the header they print,
the cached checkpoints they generate with torch.save, the scratch outputs they delete between runs,
the machine they report, and the argument handling and the end of main() they have in common.

Not a script: the bench scripts put this folder on sys.path and import it.
"""

import argparse
import datetime
import hashlib
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
    """Spawns a command with stdin/stdout on /dev/null and returns wall, CPU and peak RSS.

    Wall time is measured from just before the spawn to the return of os.wait4. Peak RSS is the
    command's own ru_maxrss, taken through GNU time (/usr/bin/time -f %M), which forks the command
    from its own ~1 MiB image: os.wait4 straight from the bench process would fold the pre-exec
    memory of the forked child (a copy of the interpreter, ~8 MiB) into it. Without GNU time (or
    with use_time=False) it falls back to os.wait4's, and says so in .description."""

    def __init__(self, scratch_dir=None, use_time=True):
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


def launcher_floor(launcher, runs, warmup):
    """/bin/true through the launcher, runs times after warmup untimed ones: (median s, peak MiB)."""
    floor = [launcher.run(["/bin/true"]) for _ in range(runs + warmup)][warmup:]
    return statistics.median(s["wall_s"] for s in floor), max(s["maxrss_kib"] for s in floor) / 1024


def row_name(c):
    """A row's name in messages: its table heading (bench/run) or its label (the other scripts)."""
    return c["head"] if "head" in c else c["label"]


def run_once(launcher, c, timeout=None, leftovers_dir=None):
    """One run of row c: c["fn"] in this process (timed here, no CPU or RSS), else c["argv"]
    through the launcher, its exit code one of c["ok"]. A row with an "output" writes that file:
    it is deleted (and the filesystem synced) before and after the run, outside the timing, and
    its size kept as c["out_bytes"]; with leftovers_dir, whatever else the run left there is
    deleted too and its names added to c["leftovers"]. Returns the sample (without stderr)."""
    if "fn" in c:
        t0 = time.perf_counter()
        c["fn"]()
        return {"wall_s": time.perf_counter() - t0, "cpu_s": None, "maxrss_kib": None, "rc": 0}
    output = c.get("output")
    if output:
        remove_output(output)
    try:
        s = launcher.run(c["argv"], timeout=timeout)
        if s["rc"] not in c["ok"]:
            shown = row_name(c) if "head" in c or c["kind"] == "python" else " ".join(c["argv"])
            raise CommandFailed(f"{shown} exited with {s['rc']}:\n{s['stderr'][-2000:]}")
        if output:
            if not os.path.exists(output):
                raise CommandFailed(f"{row_name(c)}: exited {s['rc']} but wrote no {output}")
            c["out_bytes"] = os.path.getsize(output)
    finally:
        if output:
            remove_output(output)  # deleted, and the filesystem synced, untimed
            if leftovers_dir:
                c["leftovers"].extend(clear_leftovers(leftovers_dir))
    c["last_rc"] = s["rc"]
    del s["stderr"]
    return s


def snapshot_tool(tool, scratch):
    """Copies the binary (and the LibTorch backend it dlopens from beside itself) into scratch, so
    that a rebuild during the run changes nothing. Returns the copy's path."""
    bin_dir = os.path.join(scratch, "bin")
    os.makedirs(bin_dir)
    copy = os.path.join(bin_dir, os.path.basename(tool))
    shutil.copy2(tool, copy)  # keeps the mtime, which the header reports as "built"
    backend = os.path.join(os.path.dirname(tool), "libckpt-torch.so")
    if os.path.exists(backend):
        shutil.copy2(backend, bin_dir)
    return copy


def round_robin(rows, one, warmup, verbose=False, tag="", cell_budget=None):
    """Runs every row (one(row) gives a sample) round-robin: warmup untimed rounds, then up to
    row["runs"] timed ones, and summarises each. A row that fails is not run again (its "error"
    set), nor one killed at a timeout (its "timed_out" set to the limit). With cell_budget
    (seconds), a row gets the runs that fit the budget after its first run; one whose warm-up
    alone is over it is not run again and that warm-up is its only sample ("warmup_counted")."""
    for c in rows:
        c.update(samples=[], error=None, timed_out=None, leftovers=[])
    rounds = max((c["runs"] for c in rows), default=0)
    for r in range(-warmup, rounds):  # negative rounds are warm-ups, not recorded
        for c in rows:
            if c["error"] or c["timed_out"] or r >= c["runs"]:
                continue
            try:
                s = one(c)
            except CommandTimedOut as e:
                c["timed_out"] = e.seconds
                continue
            except (CommandFailed, OSError, zipfile.BadZipFile) as e:
                c["error"] = str(e)
                continue
            if cell_budget is not None and r == -warmup and s["wall_s"] > 0:
                c["runs"] = min(c["runs"], max(1, int(cell_budget // s["wall_s"])))
                if r < 0 and s["wall_s"] > cell_budget:
                    c["runs"] = 0
                    c["samples"].append(s)
                    c["warmup_counted"] = True
            if r >= 0:
                c["samples"].append(s)
            if verbose:
                print(f"{tag} {'warm-up' if r < 0 else f'run {r + 1}'}: {row_name(c)}: "
                      f"{s['wall_s']:.4f} s", file=sys.stderr, flush=True)
    for c in rows:
        summarise(c)
    return rows


def summarise(c):
    walls = [s["wall_s"] for s in c["samples"]]
    cpus = [s["cpu_s"] for s in c["samples"] if s["cpu_s"] is not None]
    rss = [s["maxrss_kib"] for s in c["samples"] if s["maxrss_kib"] is not None]
    c["median_s"] = statistics.median(walls) if walls else None
    c["min_s"] = min(walls) if walls else None
    c["max_s"] = max(walls) if walls else None
    c["median_cpu_s"] = statistics.median(cpus) if cpus else None
    c["peak_mib"] = max(rss) / 1024 if rss else None  # the highest peak over the runs


def floor_commands(args, path, scratch):
    """cp FILE OUT, with and without a sync: the floor of a command that writes a copy of FILE."""
    out = os.path.join(scratch, "out")
    return [
        {"id": "cp", "label": "cp FILE OUT", "short": "cp", "kind": "floor",
         "argv": [args.cp, path, out], "runs": args.runs, "ok": (0,), "output": out},
        # The tool fsyncs its output before renaming it into place (a repair must never leave a
        # half-written file after a crash); this is cp with the same durability.
        {"id": "cp_sync", "label": "cp FILE OUT && sync OUT", "short": "cp + sync", "kind": "floor",
         "argv": ["/bin/sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", path, out],
         "runs": args.runs, "ok": (0,), "output": out},
    ]


def read_data_pkl(path):
    """The floor: open the zip and read the pickle record, as any reader of the file must."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if not names:
            raise CommandFailed(f"{path}: no data.pkl record")
        return len(z.read(names[0])), len(z.infolist())


# ---------------------------------------------------------------------------------------------
# Checkpoints


# The plain float32 state dicts of bench/inspect_bench.py, which verify_bench, convert_bench and
# bench/run time as well. name -> (tensor count, shape of each float32 tensor, description)
PLAIN_SPECS = {
    "small": (20, (256, 512), "20 float32 tensors of 256x512 (~10 MiB)"),
    "1g": (2000, (256, 512), "2,000 float32 tensors of 256x512 (~1 GiB)"),
    "many": (100_000, (4, 4), "100,000 float32 tensors of 4x4 (many tiny records)"),
}

# Runs in a child /usr/bin/python3: argv = path count dim0 dim1 seed.
PLAIN_GENERATE_CODE = r"""
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


class Fixture:
    """Checkpoints of one kind, generated once by generate_code (argv = path count dim0 dim1 seed)
    in a child interpreter with torch and cached in the out dir by a name that holds the
    parameters; prefix starts the name."""

    def __init__(self, specs, generate_code, prefix=""):
        self.specs, self.generate_code, self.prefix = specs, generate_code, prefix

    def path(self, out_dir, name, seed):
        count, shape, _ = self.specs[name]
        return os.path.join(out_dir,
                            f"{self.prefix}{name}-{count}x{'x'.join(map(str, shape))}-f32-seed{seed}.pt")

    def ensure(self, out_dir, name, seed, python, regenerate):
        """Returns (path, generated_now, seconds)."""
        path = self.path(out_dir, name, seed)
        if os.path.exists(path) and not regenerate:
            return path, False, 0.0
        count, (d0, d1), _ = self.specs[name]
        tmp_dir = tempfile.mkdtemp(prefix=".gen-", dir=out_dir)
        try:
            # Written under its final file name (torch.save names the archive's top folder after
            # it), then moved into place, so an interrupted run never leaves a truncated cache entry.
            tmp_path = os.path.join(tmp_dir, os.path.basename(path))
            t0 = time.perf_counter()
            r = subprocess.run([python, "-c", self.generate_code, tmp_path, str(count), str(d0),
                                str(d1), str(seed)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            seconds = time.perf_counter() - t0
            if r.returncode != 0:
                raise CommandFailed(f"generating {name} with {python} failed (exit {r.returncode}):\n"
                                    f"{r.stdout[-2000:]}")
            os.replace(tmp_path, path)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        return path, True, seconds


PLAIN = Fixture(PLAIN_SPECS, PLAIN_GENERATE_CODE)


def warm_page_cache(path):
    """Reads the whole file once, so that what runs next reads it from RAM: (bytes, seconds)."""
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


def prepare_size(args, name, spec, fixture, errors, detail="", whose=None, scratch=None):
    """Generates (or finds in the cache) one size's file, prints its heading and warms the page
    cache. Returns (path, bytes, generated_now, warm-up read seconds), or None when it could not be
    generated (said, and added to errors)."""
    count, shape, desc = spec
    print()
    try:
        path, generated, gen_s = fixture.ensure(args.out_dir, name, args.seed, args.python,
                                                args.regenerate)
    except (CommandFailed, OSError) as e:
        print(f"== {name}: FAILED to generate: {e}")
        errors.append(f"{name}: {e}")
        return None
    size = os.path.getsize(path)
    print(f"== {name}: {desc}")
    print(f"   {path}")
    gen_note, cached_note = (f" ({whose}'s generator)", f" ({whose}'s file)") if whose else ("", "")
    print(f"   {size / (1 << 20):.1f} MiB, {count} tensors{detail}"
          + (f"; generated now by torch.save in {gen_s:.1f} s{gen_note}" if generated
             else f"; cached{cached_note}"))
    if scratch and os.stat(path).st_dev != os.stat(scratch).st_dev:  # cannot happen: scratch is in out-dir
        print(f"   note: {scratch} is not on the filesystem of {path}")
    nbytes, warm_s = warm_page_cache(path)
    print(f"   page cache warmed: read all {nbytes / (1 << 20):.1f} MiB once in {warm_s:.2f} s "
          f"before timing")
    return path, size, generated, warm_s


# ---------------------------------------------------------------------------------------------
# Scratch outputs


def remove_output(path, sync=True):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    if sync:
        os.sync()  # settle the filesystem (journal, freed blocks) before the next timed run


def clear_leftovers(scratch, keep=()):
    """Deletes whatever else is in scratch (a stray temporary, say). Returns the names deleted."""
    gone = []
    for n in sorted(os.listdir(scratch)):
        if n in keep:
            continue
        p = os.path.join(scratch, n)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
            gone.append(n)
        except FileNotFoundError:
            pass
    if gone:
        os.sync()
    return gone


# ---------------------------------------------------------------------------------------------
# The untimed checks


def check_written(argv, out, who, ok_codes, check):
    """Runs argv, which writes OUT, then check(OUT); OUT is deleted after. Returns check's
    (ok, one-line summary, details dict), or the failure of the run."""
    remove_output(out, sync=False)
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode not in ok_codes:
            return False, (f"{who} exited with {r.returncode}:\n"
                           f"{(r.stderr + r.stdout)[-2000:]}"), {"rc": r.returncode}
        if not os.path.exists(out):
            return False, f"{who} exited {r.returncode} but wrote no output", {}
        return check(out)
    finally:
        remove_output(out)


def run_check_child(python, code, *argv, who="the check child"):
    """Runs a check in a child torch interpreter that prints one JSON line last. Returns (its
    result, None), or (None, the failed check's (ok, summary, details)) when it gave none."""
    v = subprocess.run([python, "-c", code, *argv], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    if v.returncode != 0:
        return None, (False, (f"{who} failed (exit {v.returncode}):\n"
                              f"{v.stderr[-2000:]}"), {"rc": v.returncode})
    try:
        return json.loads(v.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, (False, f"{who} printed no result: {v.stdout[-500:]!r}", {})


# ---------------------------------------------------------------------------------------------
# The machine


def mem_total_kib():
    """MemTotal of /proc/meminfo in KiB, or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def first_line(argv):
    """The first line of what argv prints (a --version, say), or None."""
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else None


def fs_type(path):
    """The type of the filesystem path is on (findmnt), or None."""
    if not shutil.which("findmnt"):
        return None
    fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", path], capture_output=True, text=True)
    return fs.stdout.strip() or None


def torch_threads(python):
    """torch.get_num_threads() in python, as text, or None."""
    r = subprocess.run([python, "-c", "import torch; print(torch.get_num_threads())"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


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
    mem_kib = mem_total_kib()
    mem_gib = mem_kib / (1 << 20) if mem_kib else None

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
        "ckpt_tool_sha256": sha256(args.tool)[:12],
        "ckpt_tool_mtime": datetime.datetime.fromtimestamp(
            os.path.getmtime(args.tool), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "python": args.python,
        "python_version": out([args.python, "-c", "import sys; print(sys.version.split()[0])"]),
        "torch_version": out([args.python, "-c", "import torch; print(torch.__version__)"]),
    }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_at_end(path):
    """The first 12 hex digits of path's sha256 now, or None when it cannot be read."""
    try:
        return sha256(path)[:12]
    except OSError:
        return None


def note_tool_changed(tool, machine):
    """Says so if the binary changed under the benchmark (the tree is edited and ckpt-tool rebuilt
    by others while it runs), as rows would then mix two builds. Returns its sha256 at the end."""
    sha_end = sha256_at_end(tool)
    if sha_end != machine["ckpt_tool_sha256"]:
        print(f"\nnote: {tool} changed during the run (sha256 {machine['ckpt_tool_sha256']} at "
              f"start, {sha_end or 'unreadable'} at the end): rows may mix two builds")
    return sha_end


def _os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


# ---------------------------------------------------------------------------------------------
# Reporting


def print_header(title, args, machine, python_note=""):
    """The first lines of a per-command bench's report: what ran where."""
    print(title)
    print(f"  date     {machine['date_utc']}")
    print(f"  machine  {machine['nproc']} CPUs ({machine['cpu_model']}), "
          f"{machine['mem_total_gib']} GiB RAM, {machine['os']}, kernel {machine['kernel']}")
    print(f"  tool     {args.tool} ({machine['ckpt_tool_version'] or 'version unknown'}, "
          f"git {machine['git_head'] or '?'}{' + local changes' if machine['git_dirty'] else ''}, "
          f"built {machine['ckpt_tool_mtime']}, sha256 {machine['ckpt_tool_sha256']})")
    print(f"  python   {args.python} {machine['python_version']}, torch {machine['torch_version']}"
          f"{python_note}")


def add_copy_machine_info(args, machine):
    """What a bench that times cp beside the tool reports besides: cp and the out dir's filesystem."""
    machine["cp"] = args.cp
    machine["cp_version"] = first_line([args.cp, "--version"])
    machine["out_dir_fs"] = fs_type(args.out_dir)


def print_copy_method(args, machine, launcher):
    """The lines of print_header's that follow, in a bench that times cp beside the tool."""
    print(f"  cp       {args.cp} ({machine['cp_version'] or 'version unknown'})")
    print(f"  disk     FILE and OUT both in {args.out_dir} ({machine['out_dir_fs'] or 'fs unknown'}); "
          f"OUT deleted and fs synced between runs, untimed")
    print(f"  method   {launcher.description}")
    print(f"           runs: {args.runs} per cp / ckpt-tool, {args.py_runs} for Python, after "
          f"{args.warmup} untimed warm-up each, round-robin; medians reported, peak MiB is the "
          f"highest over the runs")


def print_launcher_floor(floor_s, floor_mib):
    print(f"  launcher floor: /bin/true  median {floor_s:.4f} s, peak {floor_mib:.1f} MiB "
          f"(spawn overhead in every row; nothing subtracted)")


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


def ratio(x):
    if x is None:
        return "-"
    return f"{x:.0f}x" if x >= 10 else f"{x:.2f}x"


def div(by, a, b):
    """Median of row a / median of row b (by: rows by id); None when either failed."""
    a, b = by[a], by[b]
    if a["error"] or b["error"] or not a["median_s"] or not b["median_s"]:
        return None
    return a["median_s"] / b["median_s"]


def peak(by, a):
    """Row a's peak MiB; None when it failed."""
    return None if by[a]["error"] else by[a]["peak_mib"]


def flag(ok, missed="ABOVE target"):
    if ok is None:
        return ""
    return "  (target met)" if ok else f"  ({missed})"


def gib_per_s(nbytes, seconds):
    if not seconds:
        return "-"
    rate = nbytes / seconds
    return f"{rate / (1 << 30):.2f} GiB/s" if rate >= (1 << 30) / 10 else f"{rate / (1 << 20):.1f} MiB/s"


def print_check(summary, what=None):
    """An untimed check's summary (of what): its first line, then the rest indented."""
    print(f"   check{' of ' + what if what else ''} (once, untimed): {summary.splitlines()[0]}")
    for line in summary.splitlines()[1:]:
        print(f"     {line}")


def rows_json(cmds, extra=()):
    """The rows of a table for --json: their settings and results (extra keys before "error"),
    then every sample."""
    keys = ("id", "label", "kind", "argv", "median_s", "min_s", "max_s", "median_cpu_s", "peak_mib",
            *extra, "error")
    return [{k: c.get(k) for k in keys} | {"samples": c["samples"]} for c in cmds]


# ---------------------------------------------------------------------------------------------
# Arguments and the end of main()


def common_parser(doc, epilog, specs, sizes_default, out_dir_help, python_help, runs_help,
                  py_runs_help, after_sizes=None):
    """The parser of a per-command bench (described by its docstring's first paragraph), with the
    options they all take; after_sizes(ap) adds its own after --sizes."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog)
    ap.add_argument("--sizes", default=sizes_default,
                    help=f"comma-separated, from {','.join(specs)} (default: all)")
    if after_sizes:
        after_sizes(ap)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out"), help=out_dir_help)
    ap.add_argument("--tool", default=os.path.join(REPO, "build", "ckpt-tool"),
                    help="ckpt-tool binary (default: build/ckpt-tool)")
    ap.add_argument("--python", default="/usr/bin/python3", help=python_help)
    ap.add_argument("--runs", type=int, default=5, help=runs_help)
    ap.add_argument("--py-runs", type=int, default=3, help=py_runs_help)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each command first (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for the tensor data (default 0)")
    ap.add_argument("--regenerate", action="store_true", help="rewrite cached checkpoints")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    ap.add_argument("--no-time-wrapper", action="store_true",
                    help="take peak RSS from os.wait4 directly (inflated by the bench's own image)")
    ap.add_argument("-v", "--verbose", action="store_true", help="each run on stderr")
    return ap


def check_common_args(ap, args, specs, tools=()):
    """Checks the options of common_parser (bad usage exits 2), makes --tool absolute, finds
    tools (cp, cat: args.cp, args.cat) and creates --out-dir. Returns the sizes, or None (said on
    stderr) when --tool is not an executable or one of tools is missing."""
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in specs]
    if bad or not sizes:
        ap.error(f"unknown size(s) {','.join(bad) or '(none)'}; choose from {','.join(specs)}")
    if args.runs < 1 or args.py_runs < 1 or args.warmup < 0:
        ap.error("--runs and --py-runs must be >= 1, --warmup >= 0")
    if not check_tool(args) or (tools and not find_system_tools(args, *tools)):
        return None
    os.makedirs(args.out_dir, exist_ok=True)
    return sizes


def check_tool(args):
    args.tool = os.path.abspath(args.tool)
    if not os.access(args.tool, os.X_OK):
        print(f"error: {args.tool} is not an executable (build ckpt-tool first, or pass --tool)",
              file=sys.stderr)
        return False
    return True


def find_system_tools(args, *names):
    """Sets args.<name> to each of names found in /usr/bin or /bin; False (said) when one is not."""
    for n in names:
        setattr(args, n, shutil.which(n, path="/usr/bin:/bin"))
    if not all(getattr(args, n) for n in names):
        print(f"error: no {' or '.join(names)} in /usr/bin or /bin", file=sys.stderr)
        return False
    return True


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def finish(results, errors, json_path):
    """Writes results (with the errors) to json_path if given and lists the errors on stderr.
    Returns the exit status: 1 when there were errors, else 0."""
    if json_path:
        results["errors"] = errors
        write_json(json_path, results)
        print(f"\nresults written to {json_path}")
    return print_errors(errors)


def print_errors(errors):
    if errors:
        print("\nerrors:", file=sys.stderr)
        for e in errors:
            print("  " + e.rstrip().replace("\n", "\n    "), file=sys.stderr)
        return 1
    return 0
