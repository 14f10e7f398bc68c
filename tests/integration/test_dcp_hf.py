#!/usr/bin/python3
"""torch.distributed.checkpoint in Hugging Face's storage (torch ≥ 2.7: per-rank
shard-RRRRR-model-IIIII-of-NNNNN.safetensors with DCP_SHARDING_INFO, no .metadata): merged tensor by tensor
from their chunks, every dtype kept (torch's own consolidation crashes on integer and bool tensors,
pytorch #192485), a gap or an overlap refused.

Fixtures: tests/fixtures/make_dist.py write_dcp_hf, byte for byte as torch's writer lays the files out
(no torch ≥ 2.7 here). Outputs are read back with torch 1.13.

Usage: test_dcp_hf.py --tool PATH --work DIR
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from test_merge import bad_folder, merged_both, run, same  # noqa: E402
from test_repair import schema_problems, suite_main  # noqa: E402
import make_dist  # noqa: E402


def tensors():
    g = torch.Generator().manual_seed(3)
    return {
        "tok_embeddings.weight": torch.randn(11, 6, generator=g),
        "layers.0.attention.wq.weight": torch.randn(6, 6, generator=g).to(torch.bfloat16),
        "layers.0.feed_forward.w1.weight": torch.randn(5, 7, generator=g),  # split along dim 1
        "layers.0.mask": torch.rand(7, 3, generator=g) > 0.5,
        "step_counts": torch.arange(5, dtype=torch.int64) * 1000003,
        "tiny": torch.randn(2, generator=g).to(torch.float16),  # fewer rows than ranks: a rank holds none
        "scale": torch.tensor(2.5),
    }


def test_merge(s_):
    want = tensors()
    folder = os.path.join(s_.work, "dcp_hf")
    make_dist.write_dcp_hf(folder, want, 3, dims={"layers.0.feed_forward.w1.weight": 1})
    for ext, got in merged_both(s_, folder, "dcp_hf"):
        s_.check(set(got) == set(want) and all(same(got[k], want[k]) for k in want),
                 "%s: merged tensors differ: %s" % (ext, [k for k in want if k not in got or not same(got[k], want[k])]))
    r = run(s_, "inspect", folder, "--json")
    s_.check(r.returncode == 0, "inspect: %s" % r.stderr)
    if r.returncode == 0:
        j = json.loads(r.stdout)
        s_.check(not schema_problems(j) and j["distributed"]["layout"] == "dcp-hf" and j["distributed"]["world_size"] == 3,
                 "inspect: %s %s" % (schema_problems(j)[:3], j["distributed"]))
    for argv in (["verify", folder], ["verify", folder, os.path.join(s_.work, "dcp_hf.pth")], ["scan", folder]):
        r = run(s_, *argv)
        s_.check(r.returncode == 0, "%s: exit %d %s%s" % (argv[0], r.returncode, r.stdout[-300:], r.stderr))


def test_bad(s_):
    want = tensors()
    w = os.path.join(s_.work, "dcp_hf_missing")
    make_dist.write_dcp_hf(w, want, 3, drop_rank=2)
    bad_folder(s_, "rank 2's file missing", w, "shard-00002-model-")
    w = os.path.join(s_.work, "dcp_hf_shifted")
    make_dist.write_dcp_hf(w, want, 3, shift=("tok_embeddings.weight", 2))
    bad_folder(s_, "a chunk's offsets one row off", w, "tok_embeddings.weight")
    w = os.path.join(s_.work, "dcp_hf_no_info")
    make_dist.write_dcp_hf(w, want, 2)
    p = os.path.join(w, "shard-00001-model-00001-of-00001.safetensors")
    data = open(p, "rb").read().replace(b"DCP_SHARDING_INFO", b"DCP_SHARDING_INFX")
    open(p, "wb").write(data)
    bad_folder(s_, "no DCP_SHARDING_INFO", w, "DCP_SHARDING_INFO")


def main():
    def body(s_, _args):
        test_merge(s_)
        test_bad(s_)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
