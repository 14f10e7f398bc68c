#!/usr/bin/python3
"""DeepSpeed's universal checkpoints (ds_to_universal.py: zero/<name>/fp32.pt per trainable parameter,
the rest from the copied model-states files) and pipeline checkpoints (layer_NN-model_states.pt per
layer, mp_rank_SS per stage).

The real pipeline folder of ../shared/corpus/dist/real2/ds_pp2_r2 (DeepSpeed 0.16.5, 2 stages, a
function layer without a file, a frozen block, buffers, a tied head without a file) is merged and
compared with the live layers; copies of it with a layer file, a stage's module states or an
optimizer file missing, or a tensor-parallel layer file, are exit 2 naming the file.

The real one of ../shared/corpus/dist/real2/ds_universal_zero2_r2 (DeepSpeed 0.16.5, from a ZeRO-2 run
with a frozen layer, a buffer and a tied head) is merged and compared with the live model gathered
during the run (truth.json: sha256 per tensor); its Adam moments are listed; copies of it with a
parameter's file missing, a folder of no parameter, or a tensor of another size are exit 2 naming
the file, nothing written. Skipped when ../shared is not here (nothing of it is copied into the
project: the bad cases are made in the work folder).

Usage: test_deepspeed_layouts.py --tool PATH --work DIR
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from test_merge import bad_folder, load, merged, merged_both, run, truth_mismatches  # noqa: E402
from test_repair import schema_problems, suite_main  # noqa: E402

CASE = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "dist", "real2", "ds_universal_zero2_r2")
PIPE = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "dist", "real2", "ds_pp2_r2")


def test_real(s_):
    truth = json.load(open(os.path.join(CASE, "truth.json")))["cases"]["ds_universal_zero2_r2"]
    folder = os.path.join(CASE, "universal")
    for ext, got in merged_both(s_, folder, "universal"):
        # keys_complete is the live module's tensors, not its state dict: it has the non-persistent
        # buffer `scratch` (no file holds it) and not the tied alias head.weight, which the state dict
        # (and ../real/truth.json's ds_zero2_r2 keys, this checkpoint's source) has as emb.weight.
        want = {k: v for k, v in truth["keys_complete"].items() if k != "scratch"}
        want["head.weight"] = want["emb.weight"]
        wrong = truth_mismatches(got, want)
        s_.check(not wrong and set(got) == set(want), "%s: %d tensors differ from the live model (%s), keys %s" %
                 (ext, len(wrong), wrong[:3], sorted(set(got) ^ set(want))))
        if ext == ".pth" and "head.weight" in got:
            s_.check(got["head.weight"].data_ptr() == got["emb.weight"].data_ptr(), "the tied head is not the embedding's storage")
    r = run(s_, "inspect", folder, "--json")
    s_.check(r.returncode == 0, "inspect: %s" % r.stderr)
    if r.returncode == 0:
        j = json.loads(r.stdout)
        s_.check(not schema_problems(j), "inspect schema: %s" % schema_problems(j)[:3])
        s_.check(j["distributed"]["layout"] == "deepspeed-universal", "layout %s" % j["distributed"]["layout"])
        moments = {t["key"]: (t["dtype"], t["shape"]) for t in j["tensors"] if t["key"].startswith("optimizer_moments.")}
        want = {"optimizer_moments.%s.%s" % (k.rsplit(".", 1)[1], k.rsplit(".", 1)[0]): (v["dtype"], v["shape"]) for k, v in truth["optimizer_keys"].items()}
        s_.check(moments == want, "moments listed %s, expected %s" % (sorted(moments)[:4], sorted(want)[:4]))
    for argv in (["verify", folder], ["verify", folder, os.path.join(s_.work, "universal.pth")], ["scan", folder]):
        r = run(s_, *argv)
        s_.check(r.returncode == 0, "%s: exit %d %s%s" % (argv[0], r.returncode, r.stdout[-300:], r.stderr))


def test_latest_universal(s_):
    # two tags: latest_universal names the one to read, as `latest` does for a save
    w = os.path.join(s_.work, "two_tags")
    shutil.rmtree(w, ignore_errors=True)
    shutil.copytree(os.path.join(CASE, "universal"), w)
    shutil.copytree(os.path.join(w, "global_step3_universal"), os.path.join(w, "global_step1_universal"))
    r = run(s_, "inspect", w, "--json")
    tag = json.loads(r.stdout)["distributed"]["tag"] if r.returncode == 0 else r.stderr
    s_.check(tag == "global_step3_universal", "two tags and latest_universal: read %s" % tag)


def test_bad(s_):
    src = os.path.join(CASE, "universal")
    w = os.path.join(s_.work, "bad_universal")

    def fresh():
        shutil.rmtree(w, ignore_errors=True)
        shutil.copytree(src, w)
        return os.path.join(w, "global_step3_universal", "zero")

    z = fresh()
    os.remove(os.path.join(z, "l1.bias", "fp32.pt"))
    bad_folder(s_, "a parameter's fp32.pt missing", w, "zero/l1.bias/fp32.pt")
    z = fresh()
    shutil.copytree(os.path.join(z, "l1.bias"), os.path.join(z, "l2.bias"))
    bad_folder(s_, "a folder of no parameter", w, "zero/l2.bias")
    z = fresh()
    shutil.copy(os.path.join(z, "emb.weight", "fp32.pt"), os.path.join(z, "l1.bias", "fp32.pt"))
    bad_folder(s_, "a tensor of another size", w, "param_shapes says (5,)")
    z = fresh()
    data = open(os.path.join(z, "l1.weight", "fp32.pt"), "rb").read()
    open(os.path.join(z, "l1.weight", "fp32.pt"), "wb").write(data[: len(data) // 2])
    bad_folder(s_, "an fp32.pt cut short", w, "zero/l1.weight/fp32.pt")


def test_pipeline(s_):
    truth = json.load(open(os.path.join(PIPE, "truth.json")))["cases"]["ds_pp2_r2"]
    folder = os.path.join(PIPE, "ckpt")
    out = os.path.join(s_.work, "pipeline.pth")
    merged(s_, folder, out)
    if os.path.exists(out):
        got = load(out)
        want = truth["keys"]
        wrong = truth_mismatches(got, want)
        s_.check(not wrong and set(got) == set(want), "pipeline: %d tensors differ from the live layers (%s), keys %s" %
                 (len(wrong), wrong[:3], sorted(set(got) ^ set(want))))
    r = run(s_, "inspect", folder, "--json")
    s_.check(r.returncode == 0 and json.loads(r.stdout)["distributed"]["layout"] == "deepspeed-pipeline" and not schema_problems(json.loads(r.stdout)),
             "pipeline: inspect: %s" % (r.stderr or r.stdout[:200]))
    for argv in (["verify", folder], ["verify", folder, out], ["diff-keys", folder, out], ["scan", folder]):
        r = run(s_, *argv)
        s_.check(r.returncode == 0, "pipeline %s: exit %d %s%s" % (argv[0], r.returncode, r.stdout[-300:], r.stderr))
    one = os.path.join(s_.work, "pipeline_one.pth")
    r = merged(s_, os.path.join(folder, "global_step3", "layer_04-model_states.pt"), one)
    s_.check("one rank's file" in r.stdout, "pipeline: merge of one layer file does not merge the folder: %s" % r.stdout)
    w = os.path.join(s_.work, "bad_pipeline")

    def fresh():
        shutil.rmtree(w, ignore_errors=True)
        shutil.copytree(folder, w)
        return os.path.join(w, "global_step3")

    t = fresh()
    os.remove(os.path.join(t, "layer_04-model_states.pt"))
    bad_folder(s_, "a layer file missing", w, "4.lin.weight")
    t = fresh()
    os.remove(os.path.join(t, "mp_rank_01_model_states.pt"))
    bad_folder(s_, "the last stage's module states missing", w, "mp_world_size 2")
    t = fresh()
    os.remove(os.path.join(t, "zero_pp_rank_0_mp_rank_01_optim_states.pt"))
    bad_folder(s_, "an optimizer file missing", w, "zero_pp_rank_0_mp_rank_01_optim_states.pt")
    t = fresh()
    os.rename(os.path.join(t, "layer_06-model_states.pt"), os.path.join(t, "layer_06-model_00-model_states.pt"))
    bad_folder(s_, "a tensor-parallel layer file", w, "layer_06-model_00-model_states.pt")


def main():
    def body(s_, _args):
        if not os.path.isdir(CASE) or not os.path.isdir(PIPE):
            print("shared corpus: skipped (%s is not here)" % os.path.dirname(CASE))
            return
        test_real(s_)
        test_latest_universal(s_)
        test_bad(s_)
        test_pipeline(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
