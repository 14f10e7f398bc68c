#!/usr/bin/python3
"""merge, and inspect / verify / diff-keys / convert on the folders distributed training writes.

Fixtures: tests/fixtures/make_dist.py writes DeepSpeed ZeRO-1/2/3 and torch.distributed.checkpoint
folders with torch 1.13 in the real layouts, cut from tensors it keeps: the merge must give those
back bit for bit (torch.load of the output, tensor by tensor), in zero_to_fp32's order, tied names
sharing one storage. The reference tools' own output for the shared corpus (../shared/corpus/dist)
is compared the same way when ../shared is here. Bad folders must fail with exit 2, naming the file,
and write nothing.

Usage: test_merge.py --tool PATH --work DIR
"""
import collections
import json
import os
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from test_repair import schema_problems, suite_main  # noqa: E402
import make_dist  # noqa: E402

CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "dist", "emulated")


def run(s_, *args):
    return subprocess.run([s_.tool] + [str(a) for a in args], capture_output=True, text=True)


def same(a, b):
    """Equal trees: the same keys in the same order, tensors of the same dtype, shape and bytes."""
    if torch.is_tensor(b):
        def raw(t):
            return bytes(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy()) if t.numel() else b""
        return torch.is_tensor(a) and a.dtype == b.dtype and a.shape == b.shape and raw(a) == raw(b)
    if isinstance(b, dict):
        return isinstance(a, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return type(a) == type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def load(path, weights_only=True):
    return torch.load(path, weights_only=weights_only)


def truth_mismatches(got, want):
    """The keys of a truth.json `keys` table (dtype, shape, sha256 of the contiguous bytes) that `got`
    lacks or holds otherwise."""
    import hashlib
    return [k for k, v in want.items() if k not in got or list(got[k].shape) != v["shape"] or str(got[k].dtype) != "torch." + v["dtype"]
            or hashlib.sha256(got[k].contiguous().numpy().tobytes()).hexdigest() != v["sha256"]]


def merged_both(s_, folder, name):
    """`folder` merged to NAME.pth and to NAME.safetensors (converted back to .pth to load with torch
    1.13): [(".pth", state dict), (".safetensors", state dict)] for those that worked."""
    out = []
    for ext in (".pth", ".safetensors"):
        path = os.path.join(s_.work, name + ext)
        merged(s_, folder, path)
        if ext == ".safetensors":
            r = run(s_, "convert", path, "-o", path + ".pth")
            s_.check(r.returncode == 0, "%s: convert back: %s" % (name, r.stderr))
            path += ".pth"
        if os.path.exists(path):
            out.append((ext, load(path)))
    return out


def merged(s_, folder, out, *extra):
    if os.path.exists(out):
        os.remove(out)
    r = run(s_, "merge", folder, "-o", out, *extra)
    s_.check(r.returncode == 0, "merge %s %s: exit %d\n%s%s" % (folder, extra, r.returncode, r.stdout, r.stderr))
    return r


def check_merge(s_, name, folder, expected, tied=()):
    out = os.path.join(s_.work, name + ".pth")
    merged(s_, folder, out)
    if not os.path.exists(out):
        return
    got = load(out)
    s_.check(same(got, expected), "%s: merged state dict differs: %s vs %s" % (name, list(got), list(expected)))
    for a, b in tied:
        s_.check(got[a].data_ptr() == got[b].data_ptr(), "%s: %s and %s do not share a storage" % (name, a, b))
    # safetensors: the same tensors, each tie once
    st = os.path.join(s_.work, name + ".safetensors")
    merged(s_, folder, st)
    back = os.path.join(s_.work, name + ".back.pth")
    r = run(s_, "convert", st, "-o", back, "--force")
    s_.check(r.returncode == 0, "%s: convert safetensors back: %s" % (name, r.stderr))
    if r.returncode == 0:
        s_.check(same(collections.OrderedDict((k, load(back)[k]) for k in expected), expected),
                 "%s: safetensors output differs" % name)
    # inspect DIR --json: the same keys, dtypes and shapes, no tensor bytes read
    r = run(s_, "inspect", folder, "--json")
    s_.check(r.returncode == 0, "%s: inspect: %s" % (name, r.stderr))
    if r.returncode == 0:
        j = json.loads(r.stdout)
        s_.check(not schema_problems(j), "%s: inspect schema: %s" % (name, schema_problems(j)[:3]))
        listed = [(t["state_dict_key"], t["dtype"], t["shape"]) for t in j["tensors"] if t["state_dict_key"] is not None]
        want = [(k, str(v.dtype).replace("torch.", ""), list(v.shape)) for k, v in expected.items()]
        s_.check(listed == want, "%s: inspect lists %s, expected %s" % (name, listed, want))
        s_.check(j["format"] == "distributed" and j["distributed"]["world_size"] > 0, "%s: inspect: no distributed section" % name)
    # verify DIR, against the merged file, and through a saved fingerprint
    r = run(s_, "verify", folder)
    s_.check(r.returncode == 0, "%s: verify DIR: exit %d %s%s" % (name, r.returncode, r.stdout, r.stderr))
    r = run(s_, "verify", folder, out)
    s_.check(r.returncode == 0, "%s: verify DIR merged.pth: exit %d %s%s" % (name, r.returncode, r.stdout, r.stderr))
    fp = os.path.join(s_.work, name + ".fp.json")
    if os.path.exists(fp):
        os.remove(fp)
    r = run(s_, "verify", folder, "--write-fingerprint", fp)
    r2 = run(s_, "verify", out, fp)
    s_.check(r.returncode == 0 and r2.returncode == 0, "%s: fingerprint round trip: %s %s" % (name, r.stderr, r2.stdout))
    r = run(s_, "diff-keys", folder, out)
    s_.check(r.returncode == 0, "%s: diff-keys DIR merged: exit %d %s" % (name, r.returncode, r.stdout))


def test_deepspeed(s_):
    w = os.path.join(s_.work, "ds")
    bn = torch.tensor(7, dtype=torch.int64)
    groups = [[("emb.weight", (11, 6)), ("l1.weight", (5, 6)), ("l1.bias", (5,))], [("l2.weight", (2, 3))]]
    frozen = [("frozen.weight", (3, 5)), ("frozen.bias", (3,))]
    buffers = [("bn.running_mean", torch.arange(4.0)), ("bn.num_batches_tracked", bn)]
    tied = [("head.weight", "emb.weight")]
    cases = [
        ("zero1_bf16_ws3", dict(stage=1, ws=3, module_dtype=torch.bfloat16, bf16_files=True, zero_stage_recorded=False)),
        ("bf16_optimizer_ws3", dict(stage=1, ws=3, module_dtype=torch.bfloat16, bf16_optimizer=True)),
        ("zero2_fp16_ws4", dict(stage=2, ws=4, module_dtype=torch.float16)),
        ("zero2_fp32_ws1", dict(stage=2, ws=1)),
        ("zero3_ws3", dict(stage=3, ws=3)),
        ("zero3_fp16_ws4", dict(stage=3, ws=4, module_dtype=torch.float16)),
    ]
    for name, kw in cases:
        top = os.path.join(w, name)
        exp, _ = make_dist.write_deepspeed(top, groups=groups, frozen=frozen, buffers=buffers, tied=tied, **kw)
        check_merge(s_, name, top, exp, tied=[("head.weight", "emb.weight")])
        # a tag folder and one rank file stand for the same folder
        tag = os.path.join(top, "global_step1")
        out = os.path.join(s_.work, name + ".tag.pth")
        merged(s_, tag, out)
        s_.check(os.path.exists(out) and same(load(out), exp), "%s: merge of the tag folder differs" % name)
        rank = os.path.join(tag, sorted(f for f in os.listdir(tag) if "optim_states" in f)[-1])
        out = os.path.join(s_.work, name + ".rank.pth")
        r = merged(s_, rank, out)
        s_.check(os.path.exists(out) and same(load(out), exp) and "one rank's file" in r.stdout,
                 "%s: merge of a rank file differs (or says nothing): %s" % (name, r.stdout))
        r = run(s_, "inspect", rank, "--json")
        hints = [h["kind"] for h in json.loads(r.stdout)["hints"]] if r.returncode == 0 else []
        s_.check("deepspeed_rank_file" in hints, "%s: inspect of a rank file: no hint %s %s" % (name, hints, r.stderr))
        r = run(s_, "inspect", top, "--json")
        writer = json.loads(r.stdout)["distributed"]["writer"] if r.returncode == 0 else r.stderr
        want = "module %s," % str(kw.get("module_dtype", torch.float32)).replace("torch.", "")
        s_.check(want in writer, "%s: writer %r does not say %r (the parameters' dtype, not the buffers')" % (name, writer, want))
    # ZeRO-2 with 4 ranks and a 6-element group: the last rank holds only padding
    top = os.path.join(w, "zero2_padding_rank")
    exp, _ = make_dist.write_deepspeed(top, stage=2, ws=4, groups=[[("a", (2, 3))], [("b", (13,))]])
    part = load(os.path.join(top, "global_step1", "zero_pp_rank_3_mp_rank_00_optim_states.pt"), weights_only=False)
    s_.check(part["optimizer_state_dict"]["single_partition_of_fp32_groups"][0].numel() == 0,
             "fixture: rank 3 should hold only padding")
    check_merge(s_, "zero2_padding_rank", top, exp)

    # --optimizer: torch's layout, per parameter index over the groups in order
    for stage in (2, 3, "bf16"):  # bf16: BF16_Optimizer, its last partition saved with the padding (and its moments)
        top = os.path.join(w, "opt%s" % stage)
        kw = dict(stage=1, module_dtype=torch.bfloat16, bf16_optimizer=True) if stage == "bf16" else dict(stage=stage)
        exp, opt = make_dist.write_deepspeed(top, ws=3, groups=groups, frozen=frozen, buffers=buffers, **kw)
        out = os.path.join(s_.work, "opt%s.pth" % stage)
        merged(s_, top, out, "--optimizer")
        if os.path.exists(out):
            got = load(out, weights_only=False)  # torch 1.13's weights-only loader lacks BINFLOAT (lr)
            s_.check(same(got["model"], exp), "optimizer %s: model differs" % stage)
            names = [n for grp in groups for n, _ in grp]
            for i, n in enumerate(names):
                st = got["optimizer"]["state"][i]
                s_.check(same(st["exp_avg"], opt[n]["exp_avg"]) and same(st["exp_avg_sq"], opt[n]["exp_avg_sq"])
                         and same(st["step"], opt[n]["step"]), "optimizer %s: state of %s differs" % (stage, n))
            pg = got["optimizer"]["param_groups"]
            s_.check([g["params"] for g in pg] == [[0, 1, 2], [3]] and pg[1]["lr"] == 0.02,
                     "optimizer %s: param_groups %s" % (stage, pg))
            # it loads into a real optimizer over the same parameters
            model = torch.nn.Module()
            params = [torch.nn.Parameter(exp[n].clone()) for n in names]
            o = torch.optim.AdamW([{"params": params[:3], "lr": 0.01}, {"params": params[3:], "lr": 0.02}])
            try:
                o.load_state_dict(got["optimizer"])
                s_.check(True, "")
            except Exception as e:  # noqa: BLE001
                s_.check(False, "optimizer %s: load_state_dict: %s" % (stage, e))
            del model

    # --strip-prefix: the wrappers anywhere in a key, or a given prefix
    top = os.path.join(w, "wrapped")
    exp, _ = make_dist.write_deepspeed(top, stage=2, ws=2, groups=[[("module._orig_mod.enc._fsdp_wrapped_module.w", (3, 2)),
                                                                   ("module.head.b", (2,))]])
    out = os.path.join(s_.work, "wrapped.pth")
    merged(s_, top, out, "--strip-prefix")
    s_.check(os.path.exists(out) and list(load(out)) == ["enc.w", "head.b"], "--strip-prefix: %s" % (list(load(out)) if os.path.exists(out) else None))
    for target in (top, os.path.join(top, "global_step1", "mp_rank_00_model_states.pt")):
        r = run(s_, "strip-prefix", target, "-o", os.path.join(s_.work, "sp.pth"))
        s_.check(r.returncode == 2 and "merge" in r.stderr and not os.path.exists(os.path.join(s_.work, "sp.pth")),
                 "strip-prefix of %s: exit %d %r" % (target, r.returncode, r.stderr))
    merged(s_, top, out, "--strip-prefix", "module.", "--force")
    s_.check(os.path.exists(out) and list(load(out)) == ["_orig_mod.enc._fsdp_wrapped_module.w", "head.b"], "--strip-prefix module.")
    # --dtype, --shard-size, --dry-run, --json
    out = os.path.join(s_.work, "bf16.pth")
    merged(s_, top, out, "--dtype", "bfloat16")
    if os.path.exists(out):
        got = load(out)
        s_.check(all(v.dtype == torch.bfloat16 for v in got.values()) and
                 all(torch.equal(got[k], v.to(torch.bfloat16)) for k, v in exp.items()), "--dtype bfloat16 differs")
    out = os.path.join(s_.work, "shards", "model.safetensors")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    merged(s_, os.path.join(w, "zero3_ws3"), out, "--shard-size", "200B")
    s_.check(os.path.exists(out + ".index.json"), "--shard-size: no index")
    r = run(s_, "merge", os.path.join(w, "zero3_ws3"), "-o", os.path.join(s_.work, "dry.pth"), "--dry-run", "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    s_.check(r.returncode == 0 and not os.path.exists(os.path.join(s_.work, "dry.pth")) and not schema_problems(j) and
             j["layout"] == "deepspeed-zero3" and j["world_size"] == 3 and j["tensors"] == 8,
             "--dry-run --json: %s %s %s" % (r.returncode, r.stderr, schema_problems(j)[:3] if j else ""))

    # tags: `latest`, --tag, and no `latest` with two tags
    top = os.path.join(w, "tags")
    exp1, _ = make_dist.write_deepspeed(top, stage=2, ws=2, groups=[[("x", (4,))]], tag="global_step1", seed=1)
    exp2, _ = make_dist.write_deepspeed(top, stage=2, ws=2, groups=[[("x", (4,))]], tag="global_step2", seed=2)
    out = os.path.join(s_.work, "tags.pth")
    merged(s_, top, out)
    s_.check(os.path.exists(out) and same(load(out), exp2), "latest (global_step2) not merged")
    merged(s_, top, out, "--tag", "global_step1", "--force")
    s_.check(os.path.exists(out) and same(load(out), exp1), "--tag global_step1 not merged")
    os.remove(os.path.join(top, "latest"))
    r = run(s_, "merge", top, "-o", os.path.join(s_.work, "t2.pth"))
    s_.check(r.returncode == 2 and "--tag" in r.stderr, "two tags, no latest: %d %s" % (r.returncode, r.stderr))


def bad_folder(s_, label, folder, needle):
    out = os.path.join(s_.work, "bad.pth")
    if os.path.exists(out):
        os.remove(out)
    for cmd in (["merge", folder, "-o", out], ["inspect", folder], ["verify", folder]):
        r = run(s_, *cmd)
        s_.check(r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1,
                 "%s: %s: exit %d, stderr %r (wanted %r)" % (label, cmd[0], r.returncode, r.stderr, needle))
    s_.check(not os.path.exists(out), "%s: merge wrote an output" % label)


def test_deepspeed_bad(s_):
    w = os.path.join(s_.work, "dsbad")
    groups = [[("a", (5, 3)), ("b", (7,))]]

    def fresh(name, **kw):
        top = os.path.join(w, name)
        make_dist.write_deepspeed(top, groups=groups, **kw)
        return top, os.path.join(top, "global_step1")

    top, tag = fresh("missing", stage=2, ws=3)
    os.remove(os.path.join(tag, "zero_pp_rank_1_mp_rank_00_optim_states.pt"))
    bad_folder(s_, "missing rank", top, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    top, tag = fresh("truncated", stage=3, ws=2)
    f = os.path.join(tag, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    data = open(f, "rb").read()
    open(f, "wb").write(data[:len(data) // 2])
    bad_folder(s_, "truncated rank file", top, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    top, tag = fresh("worldsize", stage=2, ws=2)
    other = os.path.join(w, "other")
    make_dist.write_deepspeed(other, stage=2, ws=3, groups=groups)
    shutil.copy(os.path.join(other, "global_step1", "zero_pp_rank_2_mp_rank_00_optim_states.pt"), tag)
    bad_folder(s_, "a rank of another world size", top, "zero_pp_rank_2_mp_rank_00_optim_states.pt")
    top, tag = fresh("mixed", stage=2, ws=2)
    shutil.copy(os.path.join(tag, "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                os.path.join(tag, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    bad_folder(s_, "mixed runs", top, "bf16_zero_pp_rank")
    top, tag = fresh("stages", stage=2, ws=2)
    other = os.path.join(w, "other3")
    make_dist.write_deepspeed(other, stage=1, ws=2, groups=groups)
    shutil.copy(os.path.join(other, "global_step1", "zero_pp_rank_1_mp_rank_00_optim_states.pt"), tag)
    bad_folder(s_, "stages disagree", top, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    top, tag = fresh("shapes", stage=2, ws=2)
    other = os.path.join(w, "other4")
    make_dist.write_deepspeed(other, stage=2, ws=2, groups=[[("a", (5, 3)), ("b", (9,))]])
    shutil.copy(os.path.join(other, "global_step1", "zero_pp_rank_0_mp_rank_00_optim_states.pt"), tag)
    shutil.copy(os.path.join(other, "global_step1", "zero_pp_rank_1_mp_rank_00_optim_states.pt"), tag)
    bad_folder(s_, "partitions of other parameters", top, "param_shapes")
    top, tag = fresh("latest", stage=2, ws=2)
    open(os.path.join(top, "latest"), "w").write("global_step9")
    bad_folder(s_, "latest names no folder", top, "global_step9")


def test_fsdp_files(s_):
    """Single files of FSDP that are not a model's state dict on their own: refused by merge, with why."""
    w = os.path.join(s_.work, "fsdp")
    os.makedirs(w, exist_ok=True)
    local = os.path.join(w, "local_rank0.pt")  # LOCAL_STATE_DICT's keys (torch 2.x: _flat_param)
    torch.save(collections.OrderedDict([("_fsdp_wrapped_module._flat_param", torch.randn(40)),
                                        ("_fsdp_wrapped_module.layer1._fsdp_wrapped_module._flat_param", torch.randn(8))]), local)
    out = os.path.join(w, "merged.pth")
    r = run(s_, "merge", local, "-o", out)
    s_.check(r.returncode == 2 and "LOCAL_STATE_DICT" in r.stderr and local in r.stderr and
             len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(out),
             "FSDP local: merge exit %d %r" % (r.returncode, r.stderr))
    r = run(s_, "inspect", local, "--json")
    hints = [h["kind"] for h in json.loads(r.stdout)["hints"]] if r.returncode == 0 else []
    s_.check("fsdp_local" in hints, "FSDP local: inspect hints %s" % hints)
    # FULL_STATE_DICT is a plain state dict: merge writes it as convert would
    full = os.path.join(w, "full.pt")
    sd = collections.OrderedDict([("layer1.weight", torch.randn(3, 2)), ("layer1.bias", torch.randn(3))])
    torch.save(sd, full)
    r = run(s_, "merge", full, "-o", out)
    s_.check(r.returncode == 0 and same(load(out), sd), "FSDP full: merge exit %d %s" % (r.returncode, r.stderr))


def test_dcp(s_):
    w = os.path.join(s_.work, "dcp")
    g = torch.Generator().manual_seed(3)
    sd = {
        "model": collections.OrderedDict([
            ("row.weight", torch.randn(7, 4, generator=g)),
            ("col.weight", torch.randn(3, 6, generator=g)),
            ("block", torch.randn(4, 6, 5, generator=g)),
            ("rep.bias", torch.randn(5, generator=g)),
            ("scalar", torch.tensor(2.5)),
            ("half", torch.randn(6, generator=g).to(torch.bfloat16)),
        ]),
        "optim": {"state": {"row.weight": {"exp_avg": torch.randn(7, 4, generator=g), "step": torch.tensor(3.0)}},
                  "param_groups": [{"lr": 0.1, "params": ["row.weight"]}]},
        "step": 7,
        "extra": {"name": "run-a", "lrs": [0.1, 0.01]},
    }
    shards = {
        "model.row.weight": [(0, [0, 0], [4, 4]), (1, [4, 0], [3, 4])],
        "model.col.weight": [(0, [0, 0], [3, 3]), (1, [0, 3], [3, 3])],
        "model.block": [(0, [0, 0, 0], [2, 3, 5]), (1, [0, 3, 0], [2, 3, 5]), (2, [2, 0, 0], [2, 6, 5])],
        "optim.state.row.weight.exp_avg": [(1, [4, 0], [3, 4]), (0, [0, 0], [4, 4])],
        "model.half": [(2, [0], [2]), (0, [2], [4])],
    }
    for era in ("2.4", "2.2"):
        folder = os.path.join(w, "dcp" + era)
        make_dist.write_dcp(folder, sd, shards, ws=3, era=era, replicated_rank=1)
        out = os.path.join(s_.work, "dcp%s.pth" % era)
        merged(s_, folder, out)
        if os.path.exists(out):
            got = load(out, weights_only=False)
            s_.check(same(got, sd), "dcp %s: merged tree differs:\n%s\n%s" % (era, got, sd))
        r = run(s_, "inspect", folder, "--json")
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        s_.check(r.returncode == 0 and j.get("distributed", {}).get("writer", "").endswith("(torch %s)" % ("2.4+" if era == "2.4" else "2.0–2.2")),
                 "dcp %s: inspect writer %s" % (era, j.get("distributed")))
        listed = [(t["state_dict_key"], t["shape"]) for t in j.get("tensors", []) if t["state_dict_key"] is not None]
        s_.check(listed == [(k, list(v.shape)) for k, v in sd["model"].items()], "dcp %s: inspect lists %s" % (era, listed))
        for cmd in (["verify", folder], ["verify", folder, out], ["scan", os.path.join(folder, ".metadata")]):
            r = run(s_, *cmd)
            s_.check(r.returncode == 0, "dcp %s: %s: exit %d %s%s" % (era, cmd[0], r.returncode, r.stdout, r.stderr))
        st = os.path.join(s_.work, "dcp%s.safetensors" % era)
        merged(s_, folder, st)
        # a .metadata or a .distcp given stands for its folder
        for f in (".metadata", "__0_0.distcp"):
            r = run(s_, "inspect", os.path.join(folder, f))
            s_.check(r.returncode == 0 and "distributed.checkpoint" in r.stdout, "dcp %s: inspect %s: %s" % (era, f, r.stderr))

    def bad(label, needle, **kw):
        folder = os.path.join(w, label.replace(" ", "_"))
        make_dist.write_dcp(folder, sd, shards, ws=3, **kw)
        return folder

    bad_folder(s_, "a chunk left out", bad("gap", "", drop_chunk="model.col.weight"), "model.col.weight")
    bad_folder(s_, "a chunk past its tensor", bad("past", "", chunk_past="model.row.weight"), "model.row.weight")
    folder = bad("missing distcp", "")
    os.remove(os.path.join(folder, "__2_0.distcp"))
    bad_folder(s_, "a missing .distcp", folder, "__2_0.distcp")
    folder = bad("truncated distcp", "")
    f = os.path.join(folder, "__1_0.distcp")
    data = open(f, "rb").read()
    open(f, "wb").write(data[:len(data) - 700])
    bad_folder(s_, "a truncated .distcp", folder, "__1_0.distcp")


def test_corpus(s_):
    if not os.path.isdir(CORPUS):
        print("shared corpus: skipped (%s is not here)" % CORPUS)
        return
    truth = json.load(open(os.path.join(CORPUS, "truth.json")))
    for case in ("ds_zero2_r2", "ds_zero3_r2", "dcp_r2"):
        expected = load(os.path.join(CORPUS, truth["cases"][case]["expected"]), weights_only=False)
        out = os.path.join(s_.work, "corpus_" + case + ".pth")
        merged(s_, os.path.join(CORPUS, case), out)
        if not os.path.exists(out):
            continue
        got = load(out, weights_only=False)
        s_.check(same(got, expected), "corpus %s: merge differs from the reference tool's output" % case)
        if case.startswith("ds"):
            s_.check(got["head.weight"].data_ptr() == got["emb.weight"].data_ptr(), "corpus %s: tie lost" % case)
        r = run(s_, "verify", os.path.join(CORPUS, case), out)
        s_.check(r.returncode == 0, "corpus %s: verify DIR merged: %s" % (case, r.stdout))
        for f in sorted(os.listdir(os.path.join(CORPUS, case))):
            p = os.path.join(CORPUS, case, f)
            files = [os.path.join(p, x) for x in sorted(os.listdir(p))] if os.path.isdir(p) else [p]
            for x in files:
                if x.endswith((".pt", ".metadata", ".distcp")):
                    r = run(s_, "scan", x)
                    s_.check(r.returncode == 0, "corpus %s: scan %s: %s" % (case, x, r.stdout))


def main():
    def body(s_, _args):
        test_deepspeed(s_)
        test_deepspeed_bad(s_)
        test_fsdp_files(s_)
        test_dcp(s_)
        test_corpus(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
