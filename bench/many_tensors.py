#!/usr/bin/python3
"""What one tensor costs: every command on checkpoints of 10,000, 100,000 and 1,000,000 float32
tensors of 4x4 (mixture-of-experts models ship ~100,000 tensors), and on the same tensors published
the way such models are, as a sharded safetensors index, with wall time and peak RSS per run.

The files: the plain state dicts of bench/run (written once by torch.save in a child
/usr/bin/python3 and cached under --out-dir by bench/benchlib.py's Fixture; the 1,000,000-tensor
one takes torch about a minute and 2 GiB), and from each, with the tool's own writer, a sharded
safetensors index of --shards shards (`convert F -o DIR/model.safetensors --max-shard-size S`).

For each file, --runs runs of each command (round-robin, medians; no warm-up beyond the page cache
being warm):
  inspect F · inspect F --json · diff-keys F F · verify F · verify F F.fp.json · scan F
  strip-prefix F --prefix layers. -o OUT · convert F -o OUT.safetensors
and on the index: inspect, inspect --json, diff-keys, verify, convert to one .safetensors.

The report: one table a file (median wall, peak RSS), then the marginal cost of one tensor between
the two largest counts ((t_big - t_small) / (n_big - n_small), the same for RSS) beside the
average cost at the largest, which is what "linear" means here: the marginal cost no higher than
the average. Torch's side is bench/run's (same files).

Usage: bench/many_tensors.py [--tool build/ckpt-tool] [--counts 10000,100000,1000000] [--runs 3]
                            [--shards 50] [--markdown OUT.md] [--json OUT.json]
"""
import argparse
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import benchlib  # noqa: E402


VERBOSE = False


def progress(msg, verbose_only=False):
    if VERBOSE or not verbose_only:
        print(msg, file=sys.stderr, flush=True)


def spec_name(count):
    return f"n{count}"


def commands(tool, f, scratch, kind):
    out_pth = os.path.join(scratch, "out.pt")
    out_st = os.path.join(scratch, "out.safetensors")
    fp = os.path.join(scratch, os.path.basename(f) + ".fp.json")
    rows = [
        ("inspect", [tool, "inspect", f], None, (0,)),
        ("inspect --json", [tool, "inspect", f, "--json"], None, (0,)),
        ("diff-keys F F", [tool, "diff-keys", f, f], None, (0,)),
        ("verify", [tool, "verify", f], None, (0,)),
        ("verify vs fingerprint", [tool, "verify", f, fp], None, (0,)),
    ]
    if kind == "pth":
        rows += [
            ("scan", [tool, "scan", f], None, (0,)),
            ("strip-prefix", [tool, "strip-prefix", f, "--prefix", "layers.", "-o", out_pth, "--force"], out_pth, (0,)),
            ("convert → safetensors", [tool, "convert", f, "-o", out_st, "--force"], out_st, (0,)),
        ]
    else:
        rows += [("convert → one safetensors", [tool, "convert", f, "-o", out_st, "--force"], out_st, (0,))]
    return rows, fp


def run_file(args, launcher, label, count, f, kind, scratch, results):
    rows, fp = commands(args.tool, f, scratch, kind)
    r = launcher.run([args.tool, "verify", f, "--write-fingerprint", fp])
    if r["rc"] not in (0, 1):
        raise benchlib.CommandFailed(f"verify --write-fingerprint on {f}: exit {r['rc']}\n{r['stderr'][-1000:]}")
    samples = {name: [] for name, *_ in rows}
    for _ in range(args.runs):
        for name, argv, output, ok in rows:
            if output:
                benchlib.remove_output(output)
            s = launcher.run(argv, timeout=args.timeout)
            if output:
                benchlib.remove_output(output)
            if s["rc"] not in ok:
                raise benchlib.CommandFailed(f"{' '.join(argv)}: exit {s['rc']}\n{s['stderr'][-1000:]}")
            samples[name].append(s)
            progress(f"[{label}] {name}: {s['wall_s']:.3f} s, {s['maxrss_kib'] / 1024:.0f} MiB", verbose_only=True)
    for name in samples:
        wall = statistics.median(s["wall_s"] for s in samples[name])
        rss = max(s["maxrss_kib"] for s in samples[name]) / 1024
        results.setdefault(kind, {}).setdefault(name, {})[count] = {"wall_s": wall, "rss_mib": rss}
    os.remove(fp)


def make_index(args, launcher, f, count, out_dir):
    d = os.path.join(out_dir, f"sharded-{count}")
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        return index
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    size_kib = max(1, count * 64 // args.shards // 1024)
    r = launcher.run([args.tool, "convert", f, "-o", os.path.join(d, "model.safetensors"),
                      "--max-shard-size", f"{size_kib}KiB"])
    if r["rc"] != 0:
        raise benchlib.CommandFailed(f"convert --max-shard-size: exit {r['rc']}\n{r['stderr'][-1000:]}")
    return index


def table(results, kind, counts):
    lines = ["| command | " + " | ".join(f"{c:,} tensors" for c in counts) +
             " | per tensor at the largest (time, RSS) | marginal per tensor, last two counts |",
             "| --- |" + " --- |" * (len(counts) + 2)]
    for name, by in results.get(kind, {}).items():
        cells = [f"{by[c]['wall_s']:.3f} s, {by[c]['rss_mib']:.0f} MiB" if c in by else "–" for c in counts]
        have = [c for c in counts if c in by]
        avg = marg = "–"
        if have:
            n = have[-1]
            avg = f"{by[n]['wall_s'] / n * 1e6:.2f} µs, {by[n]['rss_mib'] * 1048576 / n:.0f} B"
        if len(have) >= 2:
            a, b = have[-2], have[-1]
            dt = (by[b]["wall_s"] - by[a]["wall_s"]) / (b - a) * 1e6
            dm = (by[b]["rss_mib"] - by[a]["rss_mib"]) * 1048576 / (b - a)
            marg = f"{dt:.2f} µs, {dm:.0f} B"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {avg} | {marg} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default=os.path.join(REPO, "build", "ckpt-tool"))
    ap.add_argument("--counts", default="10000,100000,1000000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shards", type=int, default=50, help="shards of the safetensors index (default 50)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--markdown", metavar="OUT.md")
    ap.add_argument("--json", metavar="OUT.json")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    counts = [int(c) for c in args.counts.split(",")]
    os.makedirs(args.out_dir, exist_ok=True)
    scratch = os.path.join(args.out_dir, ".many-scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    if not os.access(args.tool, os.X_OK):
        sys.exit(f"{args.tool}: no such executable (make build first)")
    for c in counts:
        benchlib.PLAIN_SPECS[spec_name(c)] = (c, (4, 4), f"{c:,} float32 tensors of 4x4")
    launcher = benchlib.Launcher(scratch_dir=scratch)
    tool_path = args.tool
    args.tool = benchlib.snapshot_tool(args.tool, scratch)  # a rebuild during the run changes nothing
    results = {}
    try:
        for c in counts:
            # bench/run's cache names the 100,000-tensor file "many"; the same file is used when there
            f = benchlib.PLAIN.path(args.out_dir, "many", 0) if c == 100_000 else None
            if not f or not os.path.exists(f):
                f, made, secs = benchlib.PLAIN.ensure(args.out_dir, spec_name(c), 0, args.python, False)
                if made:
                    progress(f"wrote {f} with torch.save in {secs:.1f} s")
            benchlib.warm_page_cache(f)
            progress(f"[{c:,}] {f}")
            run_file(args, launcher, f"{c:,}", c, f, "pth", scratch, results)
            index = make_index(args, launcher, f, c, args.out_dir)
            for name in os.listdir(os.path.dirname(index)):
                benchlib.warm_page_cache(os.path.join(os.path.dirname(index), name))
            progress(f"[{c:,} sharded] {index}")
            run_file(args, launcher, f"{c:,} sharded", c, index, "index", scratch, results)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = [f"# What one tensor costs ({tool_path}, median of {args.runs}, peak RSS the highest)", "",
              "## torch.save files (float32 4x4 tensors)", "", table(results, "pth", counts), "",
              f"## The same tensors as a sharded safetensors index ({args.shards} shards)", "",
              table(results, "index", counts), ""]
    text = "\n".join(report)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)
    if args.json:
        benchlib.write_json(args.json, results)


if __name__ == "__main__":
    main()
