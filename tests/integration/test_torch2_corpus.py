#!/usr/bin/python3
"""The files of ../shared/corpus/torch2 (written by real torch 2.6, with what torch 2.6 reads back in
truth.json), read with `inspect --json` and `verify --json --all` and scored by the corpus's rule:
every tensor with torch's key, dtype and shape, and a float64 mean within 1e-9 + 1e-6 * abs_mean.
Skipped (exit 77) when ../shared is not here.

Also: no crash on any file (exit 0, 1, or 2 with one line naming the file); verify's findings on an
intact file only where torch 2.6's weights_only refuses it (a class of the writer's script); every
float8 and every other dtype known.

GAPS lists the files not read in full yet, each with why (none now). A gap that starts passing fails
the test until it is taken off the list, so the list stays true. Beyond the corpus's rule, a sparse
tensor's layout, a meta tensor's device and a quantized tensor's scheme must be torch's too, and a
nested tensor's components' shapes stand for its shape.

Usage: test_torch2_corpus.py --tool PATH --work DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "torch2")
sys.path.insert(0, HERE)
from test_repair import suite_main  # noqa: E402

GAPS = {}


def run_json(tool, *argv):
    r = subprocess.run([tool] + list(argv), capture_output=True, text=True, timeout=120)
    try:
        return r.returncode, json.loads(r.stdout), r.stderr
    except ValueError:
        return r.returncode, None, r.stderr


def score(tool, path, truth):
    """The tensors of `truth` read wrong (a list of why), and the problems of the runs."""
    rc_i, inspect, err_i = run_json(tool, "inspect", "--json", path)
    rc_v, verify, err_v = run_json(tool, "verify", "--json", "--all", path)
    problems = []
    for what, rc, out, err in (("inspect", rc_i, inspect, err_i), ("verify", rc_v, verify, err_v)):
        if rc not in (0, 1, 2):
            problems.append("%s crashed: exit %d %s" % (what, rc, err[-300:]))
        elif rc == 2 and (len(err.strip().splitlines()) != 1 or path not in err):
            problems.append("%s: exit 2 without one line naming the file: %r" % (what, err))
        elif rc != 2 and out is None:
            problems.append("%s: exit %d without JSON" % (what, rc))
    got = {}
    for t in (inspect or {}).get("tensors", []):
        got[t["key"]] = {"dtype": t["dtype"], "shape": t["shape"], "shapes": t.get("shapes"), "layout": t.get("layout", "strided"),
                         "device": t.get("device"), "quantized": (t.get("quantization") or {}).get("scheme")}
    for t in (verify or {}).get("tensors", []):
        got.setdefault(t["key"], {}).update({"mean": t.get("mean")})
    wrong = []
    for key, want in truth["tensors"].items():
        g = got.get(key)
        # A nested tensor has no shape in torch: its components' shapes are compared.
        shape_of = (lambda x: x.get("shapes")) if "shapes" in want else (lambda x: list(x.get("shape") or []))
        if g is None:
            wrong.append("%s missing" % key)
        elif g.get("dtype") != want["dtype"] or shape_of(g) != shape_of(want):
            wrong.append("%s is %s %s, torch: %s %s" % (key, g.get("dtype"), shape_of(g), want["dtype"], shape_of(want)))
        elif any(want.get(f) is not None and g.get(f) != want[f] for f in ("layout", "device", "quantized")):
            wrong.append("%s is %s, torch: %s" % (key, {f: g.get(f) for f in ("layout", "device", "quantized")},
                                                   {f: want.get(f) for f in ("layout", "device", "quantized")}))
        elif want["mean"] is not None:
            m = g.get("mean")
            if not isinstance(m, (int, float)) or abs(m - want["mean"]) > 1e-9 + 1e-6 * (want["abs_mean"] or 0):
                wrong.append("%s mean %r, torch: %r" % (key, m, want["mean"]))
    findings = [f for f in (verify or {}).get("findings", [])]
    return wrong, problems, findings


def test_corpus(s, tool):
    truth = json.load(open(os.path.join(CORPUS, "truth.json")))["files"]
    s.check(len(truth) >= 48, "truth.json lists %d files" % len(truth))
    tensors = right = 0
    for name, t in sorted(truth.items()):
        path = os.path.join(CORPUS, name)
        wrong, problems, findings = score(tool, path, t)
        tensors += len(t["tensors"])
        right += len(t["tensors"]) - len(wrong)
        s.check(not problems, "%s: %s" % (name, problems))
        if name in GAPS:
            s.check(bool(wrong), "%s reads right now: take it off GAPS (%s)" % (name, GAPS[name]))
            continue
        s.check(not wrong, "%s: %s" % (name, wrong[:5]))
        # An intact file has findings only where torch 2.6 refuses it with weights_only (the
        # classes of the writer's __main__, which no allow-list can know).
        unexpected = [f for f in findings
                      if not (f["kind"] == "unsafe_global" and f["key"].startswith("__main__.") and not t["weights_only_loadable"])]
        s.check(not unexpected, "%s: findings on an intact file: %s" % (name, [(f["kind"], f["message"]) for f in unexpected][:4]))
    print("torch2 corpus: %d of %d tensors read as torch 2.6 reads them; gaps: %s" % (right, tensors, ", ".join(sorted(GAPS))))


def test_crc_off(s, tool):
    # set_crc32_options(False) writes 0 for every CRC, skip_data() for its storages: not checked, said so
    for name, unchecked in (("nocrc_a.pt", 15), ("skipdata_a.pt", 11)):
        rc, j, err = run_json(tool, "verify", "--json", os.path.join(CORPUS, name))
        s.check(rc == 0 and j and j["records_without_crc"] == unchecked,
                "%s: exit %d, records_without_crc %s (%s)" % (name, rc, j and j.get("records_without_crc"), err))


def test_device_hint(s, tool):
    # storages tagged cuda:0: torch.load needs map_location on a machine without CUDA; inspect says so
    rc, j, err = run_json(tool, "inspect", "--json", os.path.join(CORPUS, "cuda_loc_a.pt"))
    hints = {h["kind"]: h["message"] for h in (j or {}).get("hints", [])}
    s.check(rc == 0 and "cuda:0" in hints.get("device_storages", "") and "map_location" in hints.get("device_storages", ""),
            "cuda_loc_a.pt: hints %s (%s)" % (hints, err))
    rc, j, err = run_json(tool, "inspect", "--json", os.path.join(CORPUS, "cnn_sd_a.pt"))
    s.check(rc == 0 and all(h["kind"] != "device_storages" for h in j["hints"]), "cnn_sd_a.pt: a device hint on a CPU file")


def main():
    if not os.path.isdir(CORPUS):
        print("skipped: %s is not here" % CORPUS)
        return 77

    def body(s, args):
        test_corpus(s, s.tool)
        test_crc_off(s, s.tool)
        test_device_hint(s, s.tool)
    return suite_main(body)


if __name__ == "__main__":
    sys.exit(main())
