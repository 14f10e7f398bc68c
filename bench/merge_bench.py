#!/usr/bin/python3
"""merge against the Python route and the floor, side by side in one run, with peak memory.

Folders (generated once with torch 1.13 by tests/fixtures/make_dist.py, cached under
bench/out/merge/, git-ignored): a model of N float32 tensors of 4096x4096 (64 MiB each; --size 4g:
64 tensors, 4 GiB; 1g: 16) in four parameter groups, saved
  zero2  DeepSpeed ZeRO-2 over 2 ranks, fp16 module states, fp32 masters (no Adam moments: the
         merge reads the masters either way, and the folder stays small enough for this disk)
  zero3  DeepSpeed ZeRO-3 over 2 ranks
  dcp    torch.distributed.checkpoint over 2 ranks, every tensor row-sharded (Shard(0))
  mcore-torch, mcore-dist   a Megatron-Core GPT (16 layers, hidden 2048 at 4g / 1024 at 1g, vocabulary
         32000) saved with TP 2 × PP 2 by tests/fixtures/make_megatron.py: --ckpt-format torch (4 rank
         files) and torch_dist (DCP, layers stacked [L, …]); the Python route loads every rank file
         (or every DCP item) with torch and joins the tensor-parallel pieces by Megatron's rules

Rows, each run --runs times (median wall, peak RSS over the runs), page cache warm:
  ckpt-tool  merge DIR -o OUT.pth  and  -o OUT.safetensors (read back and compared, fsynced)
  python     the reference route in a child /usr/bin/python3: torch.load every rank file, torch.cat
             the partitions and cut them per parameter (zero_to_fp32's _zero2/_zero3 merges), or
             for DCP allocate each tensor and copy its chunks in (dcp_to_torch_save's loader), then
             torch.save (no fsync: flattering the route)
  floor      cat the files holding the tensors > OUT && sync OUT: their bytes read once, the output
             written once and fsynced
Before the timing, once: the tool's .pth is compared tensor by tensor with the Python route's.
Targets (issue 19): tool ≥ 5× the Python route, ≤ 1.5× the floor, peak RSS ≤ 256 MiB at 4 GiB.

Usage: bench/merge_bench.py --tool build/ckpt-tool [--size 4g|1g] [--runs 3] [--layouts zero2,zero3,dcp]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True  # no bench/__pycache__ from the import below
sys.path.insert(0, HERE)
from benchlib import Launcher, remove_output, warm_page_cache  # noqa: E402

PY = "/usr/bin/python3"
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

GENERATE = r"""
import sys, torch
sys.path.insert(0, %(fixtures)r)
import make_dist
n, layout, out = %(n)d, %(layout)r, %(out)r
per = n // 4
groups = [[("layers.%%d.weight" %% (g * per + i), (4096, 4096)) for i in range(per)] for g in range(4)]
if layout in ("zero2", "zero3"):
    make_dist.write_deepspeed(out, stage=int(layout[-1]), ws=2, groups=groups, module_dtype=torch.float16,
                              optimizer_state=False)
elif layout.startswith("mcore"):
    import make_megatron
    hidden = 2048 if n == 64 else 1024
    config = dict(tp=2, pp=2, layers=16, hidden=hidden, ffn=4 * hidden, heads=16, groups=16, vocab=32000)
    if layout == "mcore-torch":
        make_megatron.write(out, **config)
    else:
        make_megatron.write_dist(out, moments=False, **config)
else:
    g = torch.Generator().manual_seed(0)
    sd = {"model": {name: torch.randn(*shape, generator=g) for grp in groups for name, shape in grp}, "step": 1}
    shards = {"model." + k: [(0, [0, 0], [2048, 4096]), (1, [2048, 0], [2048, 4096])] for k in sd["model"]}
    make_dist.write_dcp(out, sd, shards, ws=2)
"""

PYTHON_ROUTE = r"""
import io, math, os, pickle, re, sys, torch
sys.path.insert(0, %(fixtures)r)
import make_dist
folder, out, layout = %(folder)r, %(out)r, %(layout)r


def dcp_load(folder):
    # dcp_to_torch_save's loader: each tensor allocated and its chunks copied in, each bytes item loaded.
    make_dist._dcp_classes("2.4")
    meta = pickle.load(open(os.path.join(folder, ".metadata"), "rb"))
    files = {}
    def item(info):
        f = files.setdefault(info.relative_path, open(os.path.join(folder, info.relative_path), "rb"))
        f.seek(info.offset)
        return torch.load(io.BytesIO(f.read(info.length)))
    where = {(k.fqn, tuple(k.offset) if k.offset is not None else None): v for k, v in meta.storage_data.items()}
    flat = {}
    for key, md in meta.state_dict_metadata.items():
        if not hasattr(md, "chunks"):
            flat[key] = item(where[(key, None)])
            continue
        t = torch.empty(tuple(md.size), dtype=md.properties.dtype)
        for ch in md.chunks:
            view = t
            for dim, (o, z) in enumerate(zip(ch.offsets, ch.sizes)):
                view = view.narrow(dim, o, z)
            view.copy_(item(where[(key, tuple(ch.offsets))]))
        flat[key] = t
    return meta, flat


if layout == "mcore-torch":
    # Load every rank file, renumber each stage's layers, cat the tensor-parallel pieces by Megatron's rules.
    it = os.path.join(folder, "iter_%%07d" %% int(open(os.path.join(folder, "latest_checkpointed_iteration.txt")).read()))
    ranks = {}
    for d in sorted(os.listdir(it)):
        t, p = (int(x) for x in d.split("_")[2:4])
        ranks[(p, t)] = torch.load(os.path.join(it, d, "model_optim_rng.pt"), map_location="cpu")
    tp = 1 + max(t for _, t in ranks)
    pp = 1 + max(p for p, _ in ranks)
    sd, offset = {}, 0
    for p in range(pp):
        models = [ranks[(p, t)]["model"] for t in range(tp)]
        layers = set()
        for name in models[0]:
            m = re.match(r"decoder\.layers\.(\d+)\.(.*)", name)
            if m:
                layers.add(int(m.group(1)))
            glob = "decoder.layers.%%d.%%s" %% (int(m.group(1)) + offset, m.group(2)) if m else name
            pieces = [mm[name] for mm in models]
            if pieces[0] is None or not torch.is_tensor(pieces[0]):
                sd[glob] = pieces[0]
            elif name.endswith(("word_embeddings.weight", "output_layer.weight", "linear_qkv.weight", "linear_qkv.bias",
                                "linear_fc1.weight", "linear_fc1.bias")):
                sd[glob] = torch.cat(pieces, 0)
            elif name.endswith(("linear_proj.weight", "linear_fc2.weight")):
                sd[glob] = torch.cat(pieces, 1)
            else:
                sd[glob] = pieces[0]
        offset += len(layers)
elif layout == "mcore-dist":
    # every item into memory, then the [L, ...] tensors cut per layer and named as the model names them
    _meta, flat = dcp_load(os.path.join(folder, "iter_0000007"))
    sd = {}
    for key, t in flat.items():
        if not torch.is_tensor(t):
            m = re.match(r"decoder\.layers\.(.*)/shard_(\d+)_\d+", key)
            if m and m.group(1).endswith("_extra_state"):
                sd["decoder.layers.%%s.%%s" %% (m.group(2), m.group(1))] = t[0]
            continue
        if key.startswith("decoder.layers."):
            rest = key[len("decoder.layers."):].replace("self_attention.linear_qkv.layer_norm_", "input_layernorm.")
            rest = rest.replace("mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm.")
            for l in range(t.shape[0]):
                sd["decoder.layers.%%d.%%s" %% (l, rest)] = t[l].clone()
        else:
            sd[key] = t
elif layout in ("zero2", "zero3"):
    tag = open(os.path.join(folder, "latest")).read().strip()
    d = os.path.join(folder, tag)
    files = sorted(f for f in os.listdir(d) if f.endswith("optim_states.pt"))
    model = [f for f in os.listdir(d) if f.endswith("model_states.pt")][0]
    ms = torch.load(os.path.join(d, model), map_location="cpu")
    osds = [torch.load(os.path.join(d, f), map_location="cpu")["optimizer_state_dict"] for f in files]
    ws, sd = len(osds), {}
    if layout == "zero2":
        for g, shapes in enumerate(ms["param_shapes"]):
            full = torch.cat([o["single_partition_of_fp32_groups"][g] for o in osds], 0)
            off = 0
            for name, shape in shapes.items():
                sd[name] = full.narrow(0, off, shape.numel()).view(shape)
                off += shape.numel()
    else:
        flat = [torch.cat(o["fp32_flat_groups"], 0) for o in osds]
        off = 0
        for shapes in ms["param_shapes"]:
            for name, shape in shapes.items():
                n = shape.numel(); p = math.ceil(n / ws)
                sd[name] = torch.cat([flat[r].narrow(0, off, p) for r in range(ws)], 0).narrow(0, 0, n).view(shape)
                off += p
else:
    meta, flat = dcp_load(folder)
    sd = {}
    for key, v in flat.items():
        path = meta.planner_data[key]
        cur = sd
        for p in path[:-1]:
            cur = cur.setdefault(p, {})
        cur[path[-1]] = v
torch.save(sd, out)
"""

CHECK_SAME_KEYS = r"""
import sys, torch
a = torch.load(%(tool)r); b = torch.load(%(python)r)
assert set(a) == set(b), sorted(set(a) ^ set(b))[:4]
for k in b:
    if torch.is_tensor(b[k]):
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]), k
    else:
        assert a[k] == b[k], k
print("equal: %%d entries" %% len(b))
"""

CHECK = r"""
import sys, torch
a = torch.load(%(tool)r); b = torch.load(%(python)r)
a = a.get("model", a); b = b.get("model", b)
assert list(a) == list(b), (list(a)[:3], list(b)[:3])
for k in b:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]), k
print("equal: %%d tensors" %% len(b))
"""


def folder_for(args, layout):
    n = 64 if args.size == "4g" else 16
    path = os.path.join(args.out_dir, "%s-%s" % (layout, args.size))
    if not os.path.exists(os.path.join(path, ".done")):
        print("generating %s (%d tensors of 4096x4096) ..." % (path, n), flush=True)
        subprocess.run(["rm", "-rf", path], check=True)
        subprocess.run([PY, "-c", GENERATE % {"fixtures": FIXTURES, "n": n, "layout": layout, "out": path}], check=True)
        open(os.path.join(path, ".done"), "w").close()
    return path


def data_files(folder, layout):
    if layout.startswith("mcore"):
        out = []
        for top, _dirs, names in os.walk(folder):
            out += [os.path.join(top, n) for n in names if n.endswith((".pt", ".distcp")) and n != "common.pt"]
        return sorted(out)
    if layout == "dcp":
        return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".distcp"))
    d = os.path.join(folder, open(os.path.join(folder, "latest")).read().strip())
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith("optim_states.pt"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "ckpt-tool"))
    ap.add_argument("--size", default="4g", choices=["4g", "1g"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layouts", default="zero2,zero3,dcp,mcore-torch,mcore-dist")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out", "merge"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    scratch = os.path.join(args.out_dir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    launcher = Launcher(scratch)
    tool = os.path.abspath(args.tool)
    out_pth, out_st, out_py, out_floor = (os.path.join(scratch, n) for n in ("o.pth", "o.safetensors", "py.pth", "floor.bin"))
    print("# merge, %s model, 2 ranks; %s\n" % (args.size, launcher.description))
    print("| layout | ckpt-tool → .pth | → .safetensors | python route | floor | python / tool | tool / floor | peak RSS tool / python |")
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for layout in args.layouts.split(","):
        folder = folder_for(args, layout)
        files = data_files(folder, layout)
        rows = {
            "pth": [tool, "-q", "merge", folder, "-o", out_pth],
            "st": [tool, "-q", "merge", folder, "-o", out_st],
            "python": [PY, "-c", PYTHON_ROUTE % {"fixtures": FIXTURES, "folder": folder, "out": out_py, "layout": layout}],
            "floor": ["sh", "-c", 'cat "$@" > %s && sync %s' % (out_floor, out_floor), "sh"] + files,
        }
        # once, untimed: the tool's output equals the Python route's
        for p in (out_pth, out_py):
            remove_output(p, sync=False)
        for k in ("pth", "python"):
            r = launcher.run(rows[k])
            if r["rc"] != 0:
                sys.exit("%s %s failed: %s" % (layout, k, r["stderr"]))
        check = CHECK_SAME_KEYS if layout.startswith("mcore") else CHECK
        chk = subprocess.run([PY, "-c", check % {"tool": out_pth, "python": out_py}], capture_output=True, text=True)
        if chk.returncode != 0:
            sys.exit("%s: the tool's merge differs from the Python route's: %s" % (layout, chk.stderr[-400:]))
        times = {k: [] for k in rows}
        rss = {k: 0 for k in rows}
        for _ in range(args.runs):
            for k, argv in rows.items():
                for p in (out_pth, out_st, out_py, out_floor, out_st + ".index.json"):
                    remove_output(p, sync=False)
                os.sync()
                for p in files:
                    warm_page_cache(p)
                r = launcher.run(argv)
                if r["rc"] != 0:
                    sys.exit("%s %s failed: %s" % (layout, k, r["stderr"]))
                times[k].append(r["wall_s"])
                rss[k] = max(rss[k], r["maxrss_kib"])
        med = {k: statistics.median(v) for k, v in times.items()}
        print("  %s runs: %s" % (layout, {k: ["%.2f" % x for x in v] for k, v in times.items()}), file=sys.stderr)
        mib = {k: v / 1024 for k, v in rss.items()}
        tool_best = max(med["pth"], med["st"])
        print("| %s | %.2f s, %.0f MiB | %.2f s, %.0f MiB | %.2f s, %.0f MiB | %.2f s | %.1f× | %.2f× | %.0f / %.0f MiB |" % (
            layout, med["pth"], mib["pth"], med["st"], mib["st"], med["python"], mib["python"], med["floor"],
            med["python"] / tool_best, tool_best / med["floor"], max(mib["pth"], mib["st"]), mib["python"]))
        verdicts.append((layout, med["python"] / tool_best >= 5, tool_best / med["floor"] <= 1.5,
                         max(mib["pth"], mib["st"]) <= 256 or args.size != "4g"))
    print()
    for layout, fast, floor, mem in verdicts:
        print("- %s: ≥ 5× python %s; ≤ 1.5× floor %s; RSS ≤ 256 MiB %s" % (
            layout, "PASS" if fast else "MISS", "PASS" if floor else "MISS", "PASS" if mem else "MISS"))
    print("\n(%s, %s)" % (time.strftime("%Y-%m-%d"), os.uname().release))


if __name__ == "__main__":
    main()
