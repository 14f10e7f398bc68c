#!/usr/bin/python3
"""Damaged files, as people get them, worded for people who do not know a .pth is a zip.

Every file here is real torch.save output, damaged the way it happens: two processes saving to one
path (each writes its whole file from byte 0; the later one's bytes win where both wrote, and the
longer one's tail stays), a save cut short, a record another writer left behind. torch.load's own
verdict on each is checked too: some of these load silently.

- Two saves of the same model, the second stopped at 60 %: torch.load returns the mix. inspect
  refuses it (exit 2, one line naming the file, "parts of two saves", the advice and `verify`) from
  the CRC-32s written after each record, without reading a tensor; verify says it first as one
  finding (mixed_saves), then each changed storage by the tensor keys that use it, in file order.
- Two saves of different models: torch.load fails. inspect refuses it the same way; verify lists
  the records whose frames are broken (exit 1) and reads no value; scan says torch.load refuses it,
  with weights_only or without, and why.
- A longer file's end after a shorter one's start, and a cut file: one line each, naming the file
  and what happened, exit 2, for every command; --json gives the error object.
- A record no storage names: torch.load loads the file; inspect warns (exit 0), verify finds it.

Usage: test_damage.py --tool PATH --work DIR
"""
import collections
import io
import json
import os
import sys
import zipfile

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_repair import suite_main  # noqa: E402  (one harness for the integration tests)


def saved(obj):
    """torch.save's bytes for `obj` (saved to a buffer: the archive's root is "archive")."""
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def model(n_layers, scale=1.0, extra=None):
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Linear(8, 8) for _ in range(n_layers)])
    sd = collections.OrderedDict((k, v * scale) for k, v in m.state_dict().items())
    if extra:
        sd.update(extra)
    return sd


def torch_loads(path):
    try:
        torch.load(path)
        return True
    except Exception:  # noqa: BLE001 (torch raises RuntimeError or its own errors)
        return False


def one_error_line(s, r, path, *parts):
    lines = r.stderr.strip().splitlines()
    return (r.returncode == 2 and r.stdout == "" and len(lines) == 1 and lines[0].startswith("ckpt-tool: error: " + path + ": ")
            and all(p in lines[0] for p in parts))


def test_same_model_two_writers(s):
    a = saved(model(12))
    b = saved(model(12, scale=2.0))
    s.check(len(a) == len(b), "two saves of one model have one layout")
    cut = len(a) * 6 // 10
    path = s.path("mixed.pth")
    with open(path, "wb") as f:
        f.write(b[:cut] + a[cut:])
    s.check(torch_loads(path), "torch.load returns the mix of two saves without a word (the reason for this check)")

    r = s.run("inspect", path)
    s.check(one_error_line(s, r, path, "parts of two saves", "two processes saving to one path", "ckpt-tool verify " + path),
            "inspect refuses the mix: %d %r" % (r.returncode, r.stderr))
    r = s.run("inspect", "--json", path)
    j = json.loads(r.stdout or "{}")
    s.check(r.returncode == 2 and j.get("error", {}).get("kind") == "corrupt" and j["error"].get("file") == path,
            "inspect --json: the error object: %r" % r.stdout[:300])

    r = s.run("verify", "--json", path)
    j = json.loads(r.stdout or "{}")
    findings = j.get("findings", [])
    kinds = [f["kind"] for f in findings]
    s.check(r.returncode == 1 and kinds[:1] == ["mixed_saves"] and set(kinds[1:]) == {"crc_mismatch"},
            "verify: mixed_saves first, then the CRC findings: %s" % kinds)
    # The changed storages in file order, each named by its tensor, as torch.load would key it.
    with zipfile.ZipFile(path) as z:
        crc = {i.filename: i.CRC for i in z.infolist()}
    keys = list(model(12).keys())
    named = [f["message"].split(" (record ")[0] for f in findings[1:]]
    s.check(named == [k for k in keys if k in named] and len(named) >= 2,
            "verify: CRC findings in file order by tensor key: %s" % named)
    s.check(all(f["key"] in crc for f in findings[1:]), "verify: each CRC finding's key is its record")
    s.check(findings and findings[0]["message"].startswith("%d of %d tensor records changed" % (len(named), len(keys))),
            "verify: the summary counts them: %r" % (findings[0]["message"] if findings else None))
    r = s.run("verify", path)
    lines = r.stdout.splitlines()
    s.check(len(lines) > 2 and lines[1].startswith("  mixed_saves  ") and lines[2].startswith("  crc_mismatch  " + keys[0] + " (record "),
            "verify text: %s" % lines[:3])


def test_different_models_two_writers(s):
    a = saved(model(12))
    b = saved(model(12, extra={"extra": torch.zeros(3)}))
    s.check(len(b) > len(a), "the second save is the longer one")
    mix = bytearray(b)
    mix[:len(a) // 2] = a[:len(a) // 2]
    path = s.path("two_models.pth")
    with open(path, "wb") as f:
        f.write(bytes(mix))
    s.check(not torch_loads(path), "torch.load fails on the mix of two models")

    r = s.run("inspect", path)
    s.check(one_error_line(s, r, path, "parts of two saves", "ckpt-tool verify"), "inspect: %d %r" % (r.returncode, r.stderr))
    r = s.run("verify", "--json", path)
    j = json.loads(r.stdout or "{}")
    kinds = [f["kind"] for f in j.get("findings", [])]
    s.check(r.returncode == 1 and kinds[:1] == ["mixed_saves"] and "record_frame" in kinds and j.get("tensors_read") in (0, None),
            "verify: broken frames are findings, no value read: %d %s" % (r.returncode, kinds))
    r = s.run("verify", path)
    s.check(r.returncode == 1 and "no value read" in r.stdout.splitlines()[0], "verify text head: %r" % r.stdout[:200])
    r = s.run("scan", "--json", path)
    j = json.loads(r.stdout or "{}")
    wo = (j.get("files") or [{}])[0].get("weights_only") or []
    s.check(len(wo) == 2 and all(a["loads"] is False and a["blockers"][0]["kind"] == "damage" for a in wo),
            "scan: torch.load refuses a damaged file whatever weights_only says: %s" % wo)


def test_overwritten_and_cut(s):
    a = saved(model(12))
    longer = saved(model(12, extra={"extra": torch.zeros(100)}))
    over = s.path("over.pth")
    with open(over, "wb") as f:
        f.write(a + longer[len(a):])  # the shorter save finished last: the longer one's end stays
    s.check(not torch_loads(over), "torch.load fails on a shorter save over a longer one")
    cut = s.path("cut.pth")
    with open(cut, "wb") as f:
        f.write(a[:len(a) - 300])
    s.check(not torch_loads(cut), "torch.load fails on a cut file")
    for cmd in (["inspect"], ["verify"], ["diff-keys", "REF"], ["strip-prefix", "--dry-run"], ["convert", "-o", s.path("x.safetensors")]):
        for path, words in ((over, ["the file's end and its start come from different saves"]),
                            (cut, ["truncated or still being written: %d bytes" % (len(a) - 300)])):
            args = [cut if w == "REF" else w for w in cmd[1:]]
            r = s.run(cmd[0], path, *args)
            s.check(one_error_line(s, r, path, *words), "%s %s: %d %r" % (cmd[0], os.path.basename(path), r.returncode, r.stderr))
    s.check(not os.path.exists(s.path("x.safetensors")), "nothing written")


def test_left_record(s):
    a = saved(model(2))
    src, path = s.path("clean.pth"), s.path("left.pth")
    with open(src, "wb") as f:
        f.write(a)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
        root = zin.namelist()[0].split("/")[0]
        for item in zin.infolist():
            zout.writestr(item, zin.read(item.filename))
        zout.writestr(root + "/data/99", b"\0" * 64)
    s.check(torch_loads(path), "torch.load loads a file with a record no storage names")
    r = s.run("inspect", "--json", path)
    j = json.loads(r.stdout or "{}")
    w = [x for x in j.get("warnings", []) if x["kind"] == "unreferenced_records"]
    s.check(r.returncode == 0 and len(w) == 1 and root + "/data/99" in w[0]["message"], "inspect warns: %s" % j.get("warnings"))
    r = s.run("inspect", path)
    s.check(r.returncode == 0 and "no tensor's storage" in r.stdout, "inspect text warns: %r" % r.stdout[-400:])
    r = s.run("verify", "--json", path)
    j = json.loads(r.stdout or "{}")
    s.check(r.returncode == 1 and [f["kind"] for f in j.get("findings", [])] == ["unreferenced_record"], "verify: %s" % j.get("findings"))


def main():
    def body(s, _args):
        test_same_model_two_writers(s)
        test_different_models_two_writers(s)
        test_overwritten_and_cut(s)
        test_left_record(s)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
