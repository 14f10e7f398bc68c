#!/usr/bin/python3
"""Megatron-LM checkpoints: inspect, merge, verify, diff-keys and scan on the folders Megatron writes.

Fixtures: tests/fixtures/make_megatron.py writes `--ckpt-format torch` folders with torch 1.13 in
Megatron's layout, cut from a full state dict it keeps (tensor × pipeline × expert parallel, virtual
stages, GQA, SwiGLU, tied embeddings): merge must give that back bit for bit (torch.load of the
output), inspect list its keys, dtypes and shapes, verify find nothing, or the one replica planted
drifted. Bad folders (a rank missing, iterations mixed, a tensor no rule covers) are exit 2 naming the
file, and nothing is written. The real Megatron-Core folders of ../shared/corpus/dist/real2
(torch and torch_dist, TP 2 × PP 2) are merged and compared with the sha256 of Megatron's own TP=1
re-save when ../shared is here.

Usage: test_megatron.py --tool PATH --work DIR
"""
import hashlib
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from test_merge import bad_folder, load, merged, run, same  # noqa: E402
from test_repair import schema_problems, suite_main  # noqa: E402
import make_megatron  # noqa: E402

CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "dist", "real2", "mcore_tp2pp2")

CASES = {
    "tp2pp2": dict(tp=2, pp=2),
    "tp2_gqa_swiglu": dict(tp=2, heads=8, groups=2, swiglu=True),
    "tp4pp2_vp2_tied": dict(tp=4, pp=2, vp=2, layers=8, tied=True, vocab=100),
    "tp2_ep2_moe_swiglu": dict(tp=2, ep=2, experts=4, swiglu=True),
    "pp3": dict(pp=3, layers=6),
    "tp1pp1": dict(),
    "tp2pp2_te_extra_state": dict(tp=2, pp=2, te_extra_state=True),
    "tp2pp2_legacy_names": dict(tp=2, pp=2, legacy_names=True),
}


def as_dict(sd):
    return {k: v for k, v in sd.items()}


def check_case(s_, name, save, expected, config):
    out = os.path.join(s_.work, name + ".pth")
    merged(s_, save, out)
    if os.path.exists(out):
        got = load(out)
        s_.check(sorted(got) == sorted(expected), "%s: merged keys %s, expected %s" % (name, sorted(set(got) ^ set(expected))[:6], len(expected)))
        s_.check(same(as_dict(got), {k: expected[k] for k in got if k in expected}) and set(got) == set(expected),
                 "%s: merged tensors differ from the full model" % name)
    st = os.path.join(s_.work, name + ".safetensors")
    merged(s_, save, st, "--dtype", "bfloat16")
    r = run(s_, "verify", save, out)
    s_.check(r.returncode == 0, "%s: verify DIR merged.pth: exit %d %s%s" % (name, r.returncode, r.stdout, r.stderr))
    r = run(s_, "inspect", save, "--json")
    s_.check(r.returncode == 0, "%s: inspect: %s" % (name, r.stderr))
    if r.returncode == 0:
        j = json.loads(r.stdout)
        s_.check(not schema_problems(j), "%s: inspect schema: %s" % (name, schema_problems(j)[:3]))
        listed = sorted((t["state_dict_key"], t["dtype"], t["shape"]) for t in j["tensors"] if t["state_dict_key"] is not None)
        want = sorted((k, str(v.dtype).replace("torch.", ""), list(v.shape)) for k, v in expected.items() if v is not None)
        s_.check(listed == want, "%s: inspect lists other keys, dtypes or shapes than the full model" % name)
        d = j["distributed"]
        par = d["parallel"]
        s_.check(d["layout"] == "megatron-torch" and d["iteration"] == 7 and
                 (par["tensor"], par["pipeline"], par["expert"], par["virtual_pipeline"]) ==
                 (config.get("tp", 1), config.get("pp", 1), config.get("ep", 1), config.get("vp", 1)),
                 "%s: inspect's distributed section: %s" % (name, {k: d[k] for k in ("layout", "iteration", "parallel")}))
        s_.check(d["model_shape"].get("layers") == str(config.get("layers", 4)), "%s: model_shape %s" % (name, d["model_shape"]))
    r = run(s_, "verify", save)
    s_.check(r.returncode == 0, "%s: verify DIR: exit %d %s%s" % (name, r.returncode, r.stdout, r.stderr))
    r = run(s_, "diff-keys", save, out)
    s_.check(r.returncode == 0, "%s: diff-keys DIR merged: exit %d %s" % (name, r.returncode, r.stdout))
    r = run(s_, "scan", os.path.join(save, "iter_0000007"))
    s_.check(r.returncode == 0, "%s: scan: exit %d %s" % (name, r.returncode, r.stdout[-400:]))


def test_fixtures(s_):
    for name, config in CASES.items():
        save = os.path.join(s_.work, name)
        expected = make_megatron.write(save, **config)
        check_case(s_, name, save, expected, config)
        # The iteration folder itself, and --tag naming it, open the same
        for argv in (["inspect", os.path.join(save, "iter_0000007")], ["merge", save, "--tag", "7", "--dry-run", "--json"]):
            r = run(s_, *argv)
            s_.check(r.returncode == 0 and "iter_0000007" in r.stdout, "%s: %s: %s" % (name, argv, r.stderr))
        # One rank's file: inspect hints at the folder, merge merges the folder
        rank = os.path.join(save, "iter_0000007", sorted(os.listdir(os.path.join(save, "iter_0000007")))[-1], "model_optim_rng.pt")
        r = run(s_, "inspect", rank, "--json")
        hints = [h["kind"] for h in json.loads(r.stdout)["hints"]] if r.returncode == 0 else []
        if name != "tp1pp1":
            s_.check("megatron_rank_file" in hints, "%s: inspect of a rank file: hints %s" % (name, hints))
            one = os.path.join(s_.work, name + ".one.pth")
            merged(s_, rank, one)
            if os.path.exists(one):
                s_.check(same(as_dict(load(one)), as_dict(load(os.path.join(s_.work, name + ".pth")))), "%s: merge of one rank file is not the folder's merge" % name)


DIST_CASES = {
    "dist_tp2pp2": dict(tp=2, pp=2),
    "dist_tp2_gqa_swiglu_tied": dict(tp=2, pp=1, heads=8, groups=2, swiglu=True, tied=True),
    "dist_tp1pp2_era22": dict(tp=1, pp=2, era="2.2"),
    "dist_moe_swiglu": dict(tp=2, pp=2, experts=4, swiglu=True),
}


def test_dist_fixtures(s_):
    for name, config in DIST_CASES.items():
        save = os.path.join(s_.work, name)
        expected = make_megatron.write_dist(save, **config)
        out = os.path.join(s_.work, name + ".pth")
        merged(s_, save, out)
        if os.path.exists(out):
            got = load(out)
            s_.check(set(got) == set(expected) and same(as_dict(got), {k: expected[k] for k in got if k in expected}),
                     "%s: merged state dict differs from the full model: %s" % (name, sorted(set(got) ^ set(expected))[:6]))
        r = run(s_, "inspect", save, "--json")
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        s_.check(r.returncode == 0 and not schema_problems(j), "%s: inspect: %s %s" % (name, r.stderr, schema_problems(j)[:2]))
        if j:
            d = j["distributed"]
            s_.check(d["layout"] == "megatron-torch_dist" and d["iteration"] == 7 and d["parallel"]["tensor"] == config.get("tp", 2),
                     "%s: distributed section %s" % (name, d))
            moments = [t["key"] for t in j["tensors"] if t["key"].startswith("optimizer_moments.exp_avg.")]
            tensors = [k for k, v in expected.items() if v is not None]
            s_.check(sorted(moments) == sorted("optimizer_moments.exp_avg." + k for k in tensors),
                     "%s: moments listed %s" % (name, moments[:4]))
        for cmd in (["verify", save], ["verify", save, out], ["scan", os.path.join(save, "iter_0000007")]):
            r = run(s_, *cmd)
            s_.check(r.returncode == 0, "%s: %s: exit %d %s%s" % (name, cmd[0], r.returncode, r.stdout[-400:], r.stderr))
    # without metadata.json the folder is a plain DCP folder (Megatron writes it last: a save cut short)
    save = os.path.join(s_.work, "dist_tp2pp2")
    os.remove(os.path.join(save, "iter_0000007", "metadata.json"))
    r = run(s_, "inspect", save)
    s_.check(r.returncode == 2 and "iter_0000007" in r.stderr and "unfinished save" in r.stderr, "dist without metadata.json: %s" % r.stderr)
    save = os.path.join(s_.work, "dist_nocommon")
    make_megatron.write_dist(save, common_pt=False)
    bad_folder(s_, "torch_dist without common.pt", save, "no common.pt")


def test_integrity(s_):
    save = os.path.join(s_.work, "integrity")
    make_megatron.write_dist(save, integrity=True)
    it = os.path.join(save, "iter_0000007")
    r = run(s_, "verify", save)
    s_.check(r.returncode == 0, "integrity: verify of an intact folder: exit %d %s" % (r.returncode, r.stdout))
    with open(os.path.join(it, "metadata.json"), "a") as f:
        f.write(" ")
    open(os.path.join(it, "notes.txt"), "w").write("added later")
    r = run(s_, "verify", save, "--json")
    j = json.loads(r.stdout) if r.stdout else {}
    found = sorted(f["key"] for f in j.get("findings", []) if f["kind"] == "integrity_mismatch")
    s_.check(r.returncode == 1 and found == ["metadata.json", "notes.txt"], "integrity: findings %s" % j.get("findings"))


def test_unpad(s_):
    for name, writer in (("unpad_torch", make_megatron.write), ("unpad_dist", make_megatron.write_dist)):
        save = os.path.join(s_.work, name)
        expected = writer(save, tp=2, pp=2, vocab=60)
        for extra, rows in ((["--unpad-vocab"], 60), (["--unpad-vocab", "50"], 50)):
            out = os.path.join(s_.work, name + "_%d.safetensors" % rows)
            merged(s_, save, out, *extra)
            back = out + ".pth"
            r = run(s_, "convert", out, "-o", back)
            if r.returncode:
                s_.check(False, "%s: convert back: %s" % (name, r.stderr))
                continue
            got = load(back)
            for k in ("embedding.word_embeddings.weight", "output_layer.weight"):
                s_.check(same(got[k], expected[k][:rows]), "%s %s: %s is %s, not the first %d rows" % (name, extra, k, tuple(got[k].shape), rows))
            s_.check(same(got["decoder.layers.0.mlp.linear_fc1.weight"], expected["decoder.layers.0.mlp.linear_fc1.weight"]),
                     "%s: other tensors changed" % name)
        r = run(s_, "merge", save, "-o", os.path.join(s_.work, "unpad_bad.pth"), "--unpad-vocab", "65")
        s_.check(r.returncode == 2 and "has only 64 rows" in r.stderr, "%s: --unpad-vocab 65: %s" % (name, r.stderr))
    r = run(s_, "merge", os.path.join(s_.work, "tp2pp2.pth"), "-o", os.path.join(s_.work, "unpad_bad.pth"), "--unpad-vocab")
    s_.check(r.returncode == 2 and "no Megatron folder" in r.stderr, "--unpad-vocab on a plain file: %s" % r.stderr)


def test_drift(s_):
    save = os.path.join(s_.work, "drift")
    make_megatron.write(save, tp=2, pp=2, drift="decoder.layers.1.pre_mlp_layernorm.weight")
    r = run(s_, "verify", save, "--json")
    j = json.loads(r.stdout) if r.stdout else {}
    found = [f for f in j.get("findings", []) if f["kind"] == "replica_drift"]
    s_.check(r.returncode == 1 and len(found) == 1 and found[0]["key"] == "decoder.layers.1.pre_mlp_layernorm.weight",
             "drift: verify exit %d findings %s" % (r.returncode, j.get("findings")))
    r = run(s_, "verify", save)
    s_.check("mp_rank_01_000" in r.stdout and "1 of 32 elements differ" in r.stdout, "drift: verify text: %s" % r.stdout)
    # tied copy drifted: the last stage's output layer against the embedding
    save = os.path.join(s_.work, "drift_tied")
    make_megatron.write(save, tp=2, pp=2, tied=True, drift="output_layer.weight")
    r = run(s_, "verify", save, "--json")
    j = json.loads(r.stdout) if r.stdout else {}
    found = [f for f in j.get("findings", []) if f["kind"] == "replica_drift"]
    s_.check(r.returncode == 1 and len(found) == 1 and found[0]["key"].startswith("output_layer.weight"),
             "drift_tied: verify exit %d findings %s" % (r.returncode, j.get("findings")))


def test_bad(s_):
    base = os.path.join(s_.work, "bad_src")
    make_megatron.write(base, tp=2, pp=2)
    w = os.path.join(s_.work, "bad")

    def fresh():
        if os.path.exists(w):
            shutil.rmtree(w)
        shutil.copytree(base, w)
        return os.path.join(w, "iter_0000007")

    def from_other_save(name, rank, **config):
        """The rank file `rank` of a fresh copy replaced by that of another save (`config`)."""
        it = fresh()
        other = os.path.join(s_.work, name)
        make_megatron.write(other, **config)
        src = os.path.join(other, "iter_%07d" % config.get("iteration", 7), rank, "model_optim_rng.pt")
        shutil.copy(src, os.path.join(it, rank, "model_optim_rng.pt"))

    it = fresh()
    os.remove(os.path.join(it, "mp_rank_01_001", "model_optim_rng.pt"))
    bad_folder(s_, "a rank file missing", w, "mp_rank_01_001/model_optim_rng.pt")
    from_other_save("other_iter", "mp_rank_00_001", tp=2, pp=2, iteration=8)
    bad_folder(s_, "iterations mixed", w, "iteration 8")
    it = fresh()
    make_megatron.write(os.path.join(s_.work, "other_tp"), tp=4, pp=2)
    shutil.copytree(os.path.join(s_.work, "other_tp", "iter_0000007", "mp_rank_02_000"), os.path.join(it, "mp_rank_02_000"))
    bad_folder(s_, "a rank past the degrees", w, "mp_rank_02_000")
    fresh()
    with open(os.path.join(w, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("9")
    bad_folder(s_, "the tracker names a missing iteration", w, "iter_0000009")
    save = os.path.join(s_.work, "unknown")
    make_megatron.write(save, tp=2, extra=("embedding.adapter.weight", torch.randn(8, 4)))
    bad_folder(s_, "a split tensor no rule covers", save, "embedding.adapter.weight")
    from_other_save("other_vp", "mp_rank_01_001", tp=2, pp=2, vp=2)
    bad_folder(s_, "virtual stages in one rank file only", w, "model chunks")
    it = fresh()
    data = open(os.path.join(it, "mp_rank_00_000", "model_optim_rng.pt"), "rb").read()
    open(os.path.join(it, "mp_rank_00_000", "model_optim_rng.pt"), "wb").write(data[: len(data) // 2])
    bad_folder(s_, "a rank file cut", w, "mp_rank_00_000/model_optim_rng.pt")


NEMO_CASES = {
    "nemo_tp2": dict(tp=2),
    "nemo_tp2pp2_gqa_swiglu": dict(tp=2, pp=2, heads=8, groups=2, swiglu=True),
    "nemo_tp1pp1": dict(),
    "nemo_pp2_untied": dict(pp=2, tied=False),
    "nemo_tp2_folder": dict(tp=2, folder=True),
    "nemo_tp2_geglu": dict(tp=2, swiglu=True, activation="fast-geglu"),
}


def test_nemo(s_):
    """NeMo 1's .nemo (a tar of model_config.yaml and per-rank model_weights.ckpt) and the folder it
    extracts to: merged bit for bit into the state dict a TP=1 .nemo holds ("model." names)."""
    for name, config in NEMO_CASES.items():
        path = os.path.join(s_.work, name + ("" if config.get("folder") else ".nemo"))
        expected = make_megatron.write_nemo(path, **config)
        out = os.path.join(s_.work, name + ".pth")
        merged(s_, path, out)
        if os.path.exists(out):
            got = load(out)
            s_.check(list(got) == list(expected) and same(as_dict(got), as_dict(expected)), "%s: merged state dict differs from the full model: %s" %
                     (name, sorted(set(got) ^ set(expected))[:4]))
        r = run(s_, "inspect", path, "--json")
        s_.check(r.returncode == 0, "%s: inspect: %s" % (name, r.stderr))
        if r.returncode == 0:
            j = json.loads(r.stdout)
            s_.check(not schema_problems(j), "%s: inspect schema: %s" % (name, schema_problems(j)[:3]))
            d = j["distributed"]
            par = d["parallel"]
            s_.check(d["layout"] == "megatron-nemo" and (par["tensor"], par["pipeline"]) == (config.get("tp", 1), config.get("pp", 1)) and
                     d["model_shape"].get("layers") == "4", "%s: inspect's distributed section: %s" % (name, d))
            listed = sorted((t["state_dict_key"], t["dtype"], t["shape"]) for t in j["tensors"] if t["state_dict_key"] is not None)
            want = sorted((k, str(v.dtype).replace("torch.", ""), list(v.shape)) for k, v in expected.items() if v is not None)
            s_.check(listed == want, "%s: inspect lists other keys, dtypes or shapes than the full model" % name)
        for argv in (["verify", path], ["verify", path, out], ["diff-keys", path, out], ["scan", path]):
            r = run(s_, *argv)
            s_.check(r.returncode == 0, "%s: %s: exit %d %s%s" % (name, argv[0], r.returncode, r.stdout[-300:], r.stderr))
        st = os.path.join(s_.work, name + ".safetensors")
        merged(s_, path, st, "--unpad-vocab", "60")
        r = run(s_, "convert", st, "-o", st + ".pth")
        if r.returncode == 0:
            got = load(st + ".pth")
            k = "model.embedding.word_embeddings.weight"
            s_.check(same(got[k], expected[k][:60]), "%s: --unpad-vocab 60: %s" % (name, tuple(got[k].shape)))
    # A replica drifted on tensor-parallel rank 1: verify names it
    path = os.path.join(s_.work, "nemo_drift.nemo")
    make_megatron.write_nemo(path, tp=2, pp=2, drift="decoder.layers.1.input_layernorm.weight")
    r = run(s_, "verify", path, "--json")
    j = json.loads(r.stdout) if r.stdout else {}
    found = [f["key"] for f in j.get("findings", []) if f["kind"] == "replica_drift"]
    s_.check(r.returncode == 1 and found == ["model.decoder.layers.1.input_layernorm.weight"], "nemo drift: exit %d %s" % (r.returncode, found))
    # Bad ones: exit 2, one line naming the file, nothing written
    src = os.path.join(s_.work, "nemo_tp2pp2_gqa_swiglu.nemo")
    gz = os.path.join(s_.work, "nemo_gz.nemo")
    make_megatron.write_nemo(gz, tp=2, gz=True)
    bad_folder(s_, "a gzip .nemo", gz, "tar xzf")
    import tarfile
    cut = os.path.join(s_.work, "nemo_missing.nemo")
    with tarfile.open(src) as t_in, tarfile.open(cut, "w:") as t_out:
        for m in t_in.getmembers():
            if "tp_rank_01_pp_rank_001" not in m.name:
                t_out.addfile(m, t_in.extractfile(m) if m.isfile() else None)
    bad_folder(s_, "a .nemo without one rank's weights", cut, "tp_rank_01_pp_rank_001/model_weights.ckpt")
    trunc = os.path.join(s_.work, "nemo_cut.nemo")
    data = open(src, "rb").read()
    open(trunc, "wb").write(data[: len(data) * 2 // 3])
    bad_folder(s_, "a .nemo cut short", trunc, "nemo_cut.nemo")
    dist = os.path.join(s_.work, "nemo_dist_weights")
    make_megatron.write_nemo(dist, tp=2, folder=True)
    os.makedirs(os.path.join(dist, "model_weights"))
    bad_folder(s_, "a .nemo with distributed weights", dist, "model_weights/")
    stray = os.path.join(s_.work, "nemo_stray")
    make_megatron.write_nemo(stray, tp=2, folder=True)
    os.makedirs(os.path.join(stray, "mp_rank_02"))
    shutil.copy(os.path.join(stray, "mp_rank_01", "model_weights.ckpt"), os.path.join(stray, "mp_rank_02", "model_weights.ckpt"))
    bad_folder(s_, "a .nemo with a rank past its config's degrees", stray, "mp_rank_02/model_weights.ckpt")
    r = run(s_, "merge", src, "-o", os.path.join(s_.work, "bad.pth"), "--unpad-vocab")
    s_.check(r.returncode == 2 and "--unpad-vocab N" in r.stderr, "nemo --unpad-vocab without N: %s" % r.stderr)
    # scan: a zip appended after the tar is a second reading (not the last member's), and is flagged
    hostile = os.path.join(s_.work, "nemo_appended_zip.nemo")
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", b"cposix\nsystem\n(S'true'\ntR.")
    open(hostile, "wb").write(data + buf.getvalue())
    r = run(s_, "scan", hostile)
    s_.check(r.returncode == 1 and "posix.system" in r.stdout, "a .nemo with a zip appended: scan exit %d %s" % (r.returncode, r.stdout[-300:]))


def test_nemo2(s_):
    """NeMo 2 folders (weights/ in torch_dist with "module." keys, context/model.yaml): merged bit for
    bit; the weights/ folder alone opens the same."""
    for name, config in (("nemo2_tp2pp2", dict(tp=2, pp=2)), ("nemo2_gqa_swiglu_tied", dict(tp=2, pp=1, heads=8, groups=2, swiglu=True, tied=True))):
        top = os.path.join(s_.work, name)
        expected = make_megatron.write_nemo2(top, **config)
        for given in (top, os.path.join(top, "weights")):
            out = os.path.join(s_.work, name + ".pth")
            merged(s_, given, out)
            if os.path.exists(out):
                got = load(out)
                s_.check(set(got) == set(expected) and same(as_dict(got), {k: expected[k] for k in got}),
                         "%s (%s): merged state dict differs: %s" % (name, given, sorted(set(got) ^ set(expected))[:4]))
        r = run(s_, "inspect", top, "--json")
        s_.check(r.returncode == 0, "%s: inspect: %s" % (name, r.stderr))
        if r.returncode == 0:
            j = json.loads(r.stdout)
            s_.check(not schema_problems(j), "%s: inspect schema: %s" % (name, schema_problems(j)[:3]))
            d = j["distributed"]
            s_.check(d["layout"] == "megatron-nemo2" and d["iteration"] == 7 and d["model_shape"].get("layers") == "4" and
                     d["parallel"]["tensor"] == config["tp"], "%s: inspect's distributed section: %s" % (name, d))
        for argv in (["verify", top], ["verify", top, out], ["diff-keys", top, out], ["scan", os.path.join(top, "weights")]):
            r = run(s_, *argv)
            s_.check(r.returncode == 0, "%s: %s: exit %d %s%s" % (name, argv[0], r.returncode, r.stdout[-300:], r.stderr))
        st = os.path.join(s_.work, name + ".safetensors")
        merged(s_, top, st, "--unpad-vocab")  # the config's vocab_size
        r = run(s_, "convert", st, "-o", st + ".pth")
        if r.returncode == 0:
            k = "module.embedding.word_embeddings.weight"
            s_.check(same(load(st + ".pth")[k], expected[k][:60]), "%s: --unpad-vocab: not the first 60 rows" % name)
    # no config: weights/ alone is a torch_dist folder without args, exit 2 naming why
    bare = os.path.join(s_.work, "nemo2_no_context")
    make_megatron.write_nemo2(bare, tp=2, pp=2)
    shutil.rmtree(os.path.join(bare, "context"))
    bad_folder(s_, "NeMo 2 weights without their context", os.path.join(bare, "weights"), "holds no `args`")


def test_not_megatron(s_):
    # another tool's metadata.json beside a Hugging Face index: still the index
    d = os.path.join(s_.work, "hf_with_metadata_json")
    os.makedirs(d)
    torch.save({"a": torch.ones(2)}, os.path.join(d, "pytorch_model.bin"))
    json.dump({"metadata": {"total_size": 8}, "weight_map": {"a": "pytorch_model.bin"}}, open(os.path.join(d, "pytorch_model.bin.index.json"), "w"))
    json.dump({"created_by": "another tool"}, open(os.path.join(d, "metadata.json"), "w"))
    r = run(s_, "inspect", d, "--json")
    s_.check(r.returncode == 0 and json.loads(r.stdout)["distributed"] is None, "HF index with a metadata.json: exit %d %s" % (r.returncode, r.stderr))


def sha(t):
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def extra_state_name(key):
    """decoder.layers.mlp.linear_fc1._extra_state/shard_2_4 (torch_dist, stacked) → decoder.layers.2.mlp.linear_fc1._extra_state"""
    if "/shard_" not in key:
        return key
    base, shard = key.split("/shard_")
    return "decoder.layers.%s.%s" % (shard.split("_")[0], base[len("decoder.layers."):])


def test_corpus(s_):
    if not os.path.isdir(CORPUS):
        print("shared corpus: skipped (%s is not here)" % CORPUS)
        return
    truth = json.load(open(os.path.join(CORPUS, "truth.json")))["cases"]
    for case, folder, keys in (("mcore_torch_tp2pp2", "torch", "keys"), ("mcore_dist_tp2pp2", "torch_dist", "keys_megatron_tp1pp1")):
        want = truth[case][keys]
        for ext in (".pth", ".safetensors"):
            out = os.path.join(s_.work, "corpus_" + folder + ext)
            merged(s_, os.path.join(CORPUS, folder), out)
            if ext == ".safetensors":
                back = out + ".pth"
                r = run(s_, "convert", out, "-o", back)
                s_.check(r.returncode == 0, "corpus %s: convert back: %s" % (folder, r.stderr))
                out = back
            if not os.path.exists(out):
                continue
            got = load(out)
            wrong = [k for k, v in want.items()
                     if k not in got or sha(got[k]) != v["sha256"] or list(got[k].shape) != v["shape"]
                     or str(got[k].dtype) != "torch." + v["dtype"]]
            others = {k: v for k, v in got.items() if k not in want}
            # .pth keeps the `_extra_state` values (None here) strict loading wants; safetensors holds tensors only
            want_others = {} if ext == ".safetensors" else {extra_state_name(k): None for k in truth[case]["non_tensor_keys"]
                                                                if k.endswith("_extra_state") or "._extra_state/" in k}
            s_.check(not wrong and others == want_others, "corpus %s%s: %d tensors differ from Megatron's TP=1 save (%s), other keys %s"
                     % (folder, ext, len(wrong), wrong[:3], sorted(set(others) ^ set(want_others))[:4]))
        r = run(s_, "inspect", os.path.join(CORPUS, folder), "--json")
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        listed = {t["state_dict_key"]: (t["dtype"], t["shape"]) for t in j.get("tensors", []) if t["state_dict_key"]}
        s_.check(listed == {k: (v["dtype"], v["shape"]) for k, v in want.items()}, "corpus %s: inspect keys" % folder)
        par = (j.get("distributed") or {}).get("parallel") or {}
        s_.check((par.get("tensor"), par.get("pipeline")) == (2, 2), "corpus %s: degrees %s" % (folder, par))
        for cmd in (["verify", os.path.join(CORPUS, folder)], ["scan", os.path.join(CORPUS, folder)],
                    ["verify", os.path.join(CORPUS, folder), os.path.join(CORPUS, "ref_tp1pp1")]):
            r = run(s_, *cmd)
            s_.check(r.returncode == 0, "corpus %s: %s: exit %d %s" % (folder, cmd[0], r.returncode, r.stdout[-500:]))
    # the torch_dist moments merged by name equal the live run's Adam moments
    live = torch.load(os.path.join(CORPUS, "live_optim_full.pt"), weights_only=False)
    r = run(s_, "inspect", os.path.join(CORPUS, "torch_dist"), "--json")
    s_.check(r.returncode == 0 and "optimizer_moments" in r.stdout, "corpus torch_dist: the moments are not listed")
    s_.check(isinstance(live, dict), "live_optim_full.pt: %s" % type(live))


def main():
    def body(s_, _args):
        test_fixtures(s_)
        test_dist_fixtures(s_)
        test_integrity(s_)
        test_unpad(s_)
        test_drift(s_)
        test_bad(s_)
        test_not_megatron(s_)
        test_nemo(s_)
        test_nemo2(s_)
        test_corpus(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
