#!/usr/bin/python3
"""Per-rank DTensor state dicts (verl's model_world_size_W_rank_R.pt, written by torch.save on every rank
after FSDP2 fully_shard): merged as DTensor.full_tensor() gives them.

The real folder of ../shared/corpus/dist/real2/dtensor_fsdp2_r2 (torch 2.6, FSDP2 on a 1-D mesh of 2,
Shard(0) everywhere, a rank with an empty block, a plain buffer) is merged and compared with the
full tensors gathered in the run (truth.json); verify finds nothing, and a buffer changed on one rank
is a replica_drift; copies with a rank missing, the world sizes mixed or fsdp_config.json saying
another world size are exit 2 naming the file. Skipped when ../shared is not here.

Usage: test_dtensor.py --tool PATH --work DIR
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from test_merge import bad_folder, merged, merged_both, run, truth_mismatches  # noqa: E402
from test_repair import schema_problems, suite_main  # noqa: E402

CASE = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "dist", "real2", "dtensor_fsdp2_r2")


def test_real(s_):
    truth = json.load(open(os.path.join(CASE, "truth.json")))["cases"]["dtensor_fsdp2_r2"]
    folder = os.path.join(CASE, "ckpt")
    for ext, got in merged_both(s_, folder, "dtensor"):
        want = truth["keys"]
        wrong = truth_mismatches(got, want)
        s_.check(not wrong and set(got) == set(want), "%s: %d tensors differ from full_tensor() (%s), keys %s" %
                 (ext, len(wrong), wrong[:3], sorted(set(got) ^ set(want))))
    r = run(s_, "inspect", folder, "--json")
    s_.check(r.returncode == 0, "inspect: %s" % r.stderr)
    if r.returncode == 0:
        j = json.loads(r.stdout)
        s_.check(not schema_problems(j) and j["distributed"]["layout"] == "dtensor-per-rank" and j["distributed"]["world_size"] == 2,
                 "inspect: %s %s" % (schema_problems(j)[:3], j["distributed"]["layout"]))
    for argv in (["verify", folder], ["verify", folder, os.path.join(s_.work, "dtensor.pth")], ["diff-keys", folder, os.path.join(s_.work, "dtensor.pth")],
                 ["scan", folder]):
        r = run(s_, *argv)
        s_.check(r.returncode == 0, "%s: exit %d %s%s" % (argv[0], r.returncode, r.stdout[-300:], r.stderr))
    r = merged(s_, os.path.join(folder, "model_world_size_2_rank_1.pt"), os.path.join(s_.work, "dtensor_one.pth"))
    s_.check("one rank's file" in r.stdout, "merge of one rank's file does not merge the folder: %s" % r.stdout)


def test_bad(s_):
    src = os.path.join(CASE, "ckpt")
    w = os.path.join(s_.work, "bad_dtensor")

    def fresh():
        shutil.rmtree(w, ignore_errors=True)
        shutil.copytree(src, w)
        for n in os.listdir(w):
            os.chmod(os.path.join(w, n), 0o644)
        return w

    fresh()
    os.remove(os.path.join(w, "model_world_size_2_rank_1.pt"))
    bad_folder(s_, "a rank missing", w, "model_world_size_2_rank_1.pt")
    fresh()
    shutil.copy(os.path.join(w, "model_world_size_2_rank_1.pt"), os.path.join(w, "model_world_size_4_rank_2.pt"))
    bad_folder(s_, "world sizes mixed", w, "two runs' files are mixed")
    fresh()
    with open(os.path.join(w, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": 4}, f)
    bad_folder(s_, "fsdp_config.json says another world size", w, "world_size 4")
    # the plain buffer `scale` changed on rank 1 (a byte of its record): verify names the drift
    fresh()
    p = os.path.join(w, "model_world_size_2_rank_1.pt")
    r = run(s_, "inspect", p, "--json")
    record = [t for t in json.loads(r.stdout)["tensors"] if t["key"] == "scale"][0]["storage"]
    import struct
    import zipfile
    data = bytearray(open(p, "rb").read())
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("model_world_size_2_rank_1/data/" + record)
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len] ^= 0x01
    open(p, "wb").write(bytes(data))
    r = run(s_, "verify", w, "--json")
    found = [f for f in json.loads(r.stdout).get("findings", []) if f["kind"] in ("replica_drift", "crc_mismatch")] if r.stdout else []
    s_.check(r.returncode == 1 and any(f["kind"] == "replica_drift" and f["key"] == "scale" for f in found),
             "a drifted buffer: verify exit %d %s" % (r.returncode, found))


def main():
    def body(s_, _args):
        if not os.path.isdir(CASE):
            print("shared corpus: skipped (%s is not here)" % CASE)
            return
        test_real(s_)
        test_bad(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
