#!/usr/bin/python3
"""Runs inside the Debian 13 root (torch 2.6, Python 3.13, numpy 2): `write DIR` writes the 2.x
fixtures with real torch.save (and torch.distributed.checkpoint.save) and their expected tensors;
`check DIR` loads every output ckpt-tool wrote back with torch 2.6 and compares it with its input;
`hostile DIR` writes files that torch 2.6 and numpy 2 run code from (and clean ones that must scan
clean), proving each payload on the loader here first. Prints JSON lines; exits 1 on any difference.
Driven from outside by test_torch2.py."""
import json
import os
import subprocess
import sys
import warnings

import torch
import torch.nn as nn

warnings.filterwarnings("ignore")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)
        self.head = nn.Linear(5, 5, bias=False)


def write(d):
    torch.manual_seed(0)
    os.makedirs(d, exist_ok=True)
    m = Net()
    sd = m.state_dict()
    cases = {}

    def save(name, obj, **kw):
        torch.save(obj, os.path.join(d, name), **kw)
        cases[name] = True

    save("ddp.pt", {"module." + k: v for k, v in sd.items()})
    save("compiled.pt", {"_orig_mod." + k: v for k, v in sd.items()})
    # weights with decay / without, as Hugging Face's trainer splits them, on a DDP model
    decay = [p for n, p in m.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in m.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}])
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    save("train_ddp.pt", {"model": {"module." + k: v for k, v in m.state_dict().items()},
                          "optimizer": opt.state_dict(), "epoch": 3, "step": torch.tensor(7)})
    save("fp8.pt", {n: torch.arange(120, dtype=torch.uint8).view(getattr(torch, n)).reshape(6, 20)
                    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")})
    torch.serialization.set_crc32_options(False)
    save("nocrc_ddp.pt", {"module." + k: v for k, v in sd.items()})
    torch.serialization.set_crc32_options(True)
    save("proto5_ddp.pt", {"module." + k: v for k, v in sd.items()}, pickle_protocol=5)
    # torch.distributed.checkpoint, one process (no process group: torch 2.6 saves as rank 0)
    import torch.distributed.checkpoint as dcp
    dcp.save({"model": m.state_dict(), "step": 5}, checkpoint_id=os.path.join(d, "dcp"))
    cases["dcp"] = True
    write_exotic(d, save)
    write_dtensor(d)
    cases["dtensor_fsdp2"] = cases["dtensor_tp"] = True
    print(json.dumps({"torch": torch.__version__, "written": sorted(cases)}))


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 7)
        self.b = nn.Linear(7, 3, bias=False)
        self.c = nn.Linear(3, 6).to(torch.bfloat16)
        self.register_buffer("steps", torch.arange(4, dtype=torch.int64))


def dtensor_rank(rank, ws, out, kind):
    """One rank of a run on CPU with gloo: FSDP2 fully_shard on a 1-D mesh (fsdp2), or tensor
    parallelism on a 2 × 2 (dp, tp) mesh (tp: a colwise and a rowwise linear, their DTensors
    Replicate on dp); torch.save(model.state_dict()) per rank under verl's names, and rank 0 saves
    every entry's full_tensor() as expected.pt."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533" if kind == "fsdp2" else "29534", USE_LIBUV="0")
    dist.init_process_group("gloo", rank=rank, world_size=ws)
    torch.manual_seed(0)
    m = Mixed()
    if kind == "fsdp2":
        from torch.distributed._composable.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (ws,), mesh_dim_names=("dp",))
        fully_shard(m.a, mesh=mesh)
        fully_shard(m.c, mesh=mesh)
        fully_shard(m, mesh=mesh)
    else:
        mesh = init_device_mesh("cpu", (2, ws // 2), mesh_dim_names=("dp", "tp"))
        from torch.distributed.tensor import distribute_tensor, Replicate, Shard
        for name, mod, dim in (("a", m.a, 0), ("b", m.b, 1)):
            for pn, p in list(mod.named_parameters()):
                d = dim if p.dim() > 1 or dim == 0 else None
                placements = [Replicate(), Shard(d) if d is not None else Replicate()]
                setattr(mod, pn, nn.Parameter(distribute_tensor(p.detach(), mesh, placements)))
    sd = m.state_dict()
    torch.save(sd, os.path.join(out, "model_world_size_%d_rank_%d.pt" % (ws, rank)))
    full = {k: (v.full_tensor().contiguous() if hasattr(v, "full_tensor") else v) for k, v in sd.items()}  # gloo gathers uneven Shard(1) into a padded view
    if rank == 0:
        torch.save(full, os.path.join(out, "..", os.path.basename(out) + ".expected.pt"))
    dist.barrier()
    dist.destroy_process_group()


def write_dtensor(d):
    import torch.multiprocessing as mp
    for kind, ws in (("fsdp2", 3), ("tp", 4)):
        out = os.path.join(d, "dtensor_" + kind)
        os.makedirs(out, exist_ok=True)
        mp.spawn(dtensor_rank, args=(ws, out, kind), nprocs=ws)


class WithConstant(nn.Module):
    """A model whose export has a parameter, a buffer and a lifted constant tensor."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("shift", torch.full((2,), 0.5))
        self.table = torch.arange(3.0)

    def forward(self, x):
        return self.lin(x) + self.shift + self.table.sum()


def write_exotic(d, save):
    """Tensors that are not one plain view of a storage, as torch 2.6 saves them, and a torch.export
    archive; exotic_truth.json says what torch 2.6 reads back (the torch2 corpus's rule and fields)."""
    torch.manual_seed(1)
    a = torch.randn(5, 6)
    a[a.abs() < 0.7] = 0
    base = torch.randn(3, 8, 2)
    save("sparse.pt", {
        "csr": a.to_sparse_csr(), "csc": a.to_sparse_csc(), "bsr": torch.randn(4, 6).to_sparse_bsr((2, 3)),
        "bsc": torch.randn(4, 6).to_sparse_bsc((2, 3)), "hybrid": torch.randn(3, 4, 2).to_sparse(1),
        "uncoalesced": torch.sparse_coo_tensor(torch.tensor([[0, 0, 1], [1, 1, 2]]), torch.tensor([1.0, 2.0, 3.0]), (2, 3)),
        "complex": (torch.randn(3, 3, dtype=torch.complex64) * (torch.rand(3, 3) > 0.5)).to_sparse(),
        "dense": torch.ones(2)})
    save("nested.pt", {
        "jagged": torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(5, 3), torch.randn(1, 3)], layout=torch.jagged),
        "narrowed": torch.nested.narrow(base, 1, torch.tensor([0, 2, 1]), torch.tensor([3, 4, 5]), layout=torch.jagged),
        "strided": torch.nested.nested_tensor([torch.randn(2, 2), torch.randn(3, 2)]),
        "dense": torch.ones(2)})
    x = torch.randn(4, 3)
    save("quantized.pt", {
        "per_channel": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.double), torch.tensor([0, 1, 2, 3]), 0, torch.qint8),
        "quint8": torch.quantize_per_tensor(x, 0.05, 10, torch.quint8),
        "qint32": torch.quantize_per_tensor(x, 0.01, 0, torch.qint32)})
    tagged = torch.randn(3)
    tagged.tag = "ema"
    p = nn.Parameter(torch.randn(2))
    p.lr_scale = 0.5
    save("attrs_ddp.pt", {"module.tagged": tagged, "module.scaled": p, "module.meta": torch.empty(2, 3, device="meta"),
                          "module.plain": torch.arange(4.0)})
    save("bits.pt", {n: torch.arange(8, dtype=torch.uint8).view(getattr(torch, n))
                     for n in ("bits8", "bits1x8", "bits2x4", "bits4x2")} | {"bits16": torch.arange(4, dtype=torch.int16).view(torch.bits16)})
    m = WithConstant()
    torch.export.save(torch.export.export(m, (torch.randn(1, 3),)), os.path.join(d, "export.pt2"))
    truth = {}
    for name in ("sparse.pt", "nested.pt", "quantized.pt", "attrs_ddp.pt", "export.pt2", "bits.pt"):
        path = os.path.join(d, name)
        if name.endswith(".pt2"):
            ep = torch.export.load(path)
            obj = dict(ep.state_dict)
            obj.update(ep.constants)
            loadable = None
        else:
            obj = torch.load(path, weights_only=False)
            # weights_only in a fresh process: nothing imported beyond `import torch`
            r = subprocess.run([sys.executable, "-c", "import sys, torch; torch.load(sys.argv[1], weights_only=True)", path],
                               capture_output=True, text=True)
            loadable = r.returncode == 0
        tensors = {}
        for k, t in obj.items():
            e = {"dtype": str(t.dtype).replace("torch.", "")}
            if t.is_nested:
                parts = t.unbind()
                e.update(nested=True, layout=str(t.layout).replace("torch.", ""), shapes=[list(c.shape) for c in parts])
                e["mean"] = torch.cat([c.reshape(-1) for c in parts]).double().mean().item()
            else:
                e["shape"] = list(t.shape)
                if t.is_sparse or t.layout != torch.strided:
                    e["layout"] = str(t.layout).replace("torch.", "")
                    dense = t.to_dense()
                    e["mean"] = (torch.view_as_real(dense) if dense.is_complex() else dense).double().mean().item()
                elif t.is_quantized:
                    e.update(quantized=str(t.qscheme()).replace("torch.", ""), mean=None)
                elif t.is_meta:
                    e.update(device="meta", mean=None)
                elif e["dtype"].startswith("bits"):  # raw bits: torch has no arithmetic on them
                    e["mean"] = None
                else:
                    e["mean"] = t.double().mean().item() if t.numel() else None
            e["abs_mean"] = None
            tensors[k] = e
        truth[name] = {"tensors": tensors, "weights_only_loadable": loadable,
                       "attributes": {k: {a: repr(v) for a, v in vars(t).items()} for k, t in obj.items()
                                      if not t.is_nested and vars(t)}}
    with open(os.path.join(d, "exotic_truth.json"), "w") as f:
        json.dump(truth, f)


def same(a, b, where, bad):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (a.is_nested or a.layout != torch.strided or a.is_quantized or a.is_meta):
        # the tensors these are made of, and what the kind says about them
        if (a.layout, a.is_nested, a.is_quantized, a.is_meta, a.dtype) != (b.layout, b.is_nested, b.is_quantized, b.is_meta, b.dtype):
            bad.append("%s: %s vs %s" % (where, (a.layout, a.dtype, a.is_nested), (b.layout, b.dtype, b.is_nested)))
        elif a.is_nested:
            same(list(a.unbind()), list(b.unbind()), where, bad)
        elif a.is_quantized:
            same(a.int_repr(), b.int_repr(), where + ".int_repr", bad)
            if a.qscheme() == torch.per_tensor_affine:
                same((a.q_scale(), a.q_zero_point()), (b.q_scale(), b.q_zero_point()), where + ".qparams", bad)
            else:
                same(a.q_per_channel_scales(), b.q_per_channel_scales(), where + ".scales", bad)
        elif a.is_meta:
            if a.shape != b.shape:
                bad.append("%s: meta %s vs %s" % (where, tuple(a.shape), tuple(b.shape)))
        elif a.layout == torch.sparse_coo:
            same(a._indices(), b._indices(), where + ".indices", bad)
            same(a._values(), b._values(), where + ".values", bad)
        else:
            same(a.to_dense(), b.to_dense(), where + ".dense", bad)
        return
    if isinstance(a, torch.Tensor) and vars(a) != (vars(b) if isinstance(b, torch.Tensor) else None):
        bad.append("%s: attributes %r vs %r" % (where, vars(a), vars(b) if isinstance(b, torch.Tensor) else b))
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride() and a.is_contiguous() != b.is_contiguous():
            bad.append("%s: %s %s vs %s" % (where, getattr(a, "dtype", type(a)), tuple(a.shape), getattr(b, "dtype", type(b))))
        elif not torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)):
            bad.append("%s: bytes differ" % where)
    elif isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            bad.append("%s: keys %s vs %s" % (where, list(a)[:4], list(b)[:4] if isinstance(b, dict) else type(b)))
        else:
            for k in a:
                same(a[k], b[k], "%s.%s" % (where, k), bad)
    elif isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            bad.append("%s: %r vs %r" % (where, type(a), type(b)))
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, "%s.%d" % (where, i), bad)
    elif a != b and not (a != a and b != b):
        bad.append("%s: %r vs %r" % (where, a, b))


def strip(obj, prefix):
    if isinstance(obj, dict):
        return {(k[len(prefix):] if isinstance(k, str) and k.startswith(prefix) else k): v for k, v in obj.items()}
    return obj


def check(d):
    """checks.json: [{"output", "input", "expect": "same" | "strip:PREFIX" | "dcp", "path": key or "",
    "unordered": true when the output's format does not keep the order (safetensors sorts)}]. The
    output is loaded with weights_only=True where the input loads so (torch 2.6 refuses some files
    torch.save itself writes, e.g. pickle protocol 5's MEMOIZE and FRAME)."""
    import torch._dynamo  # noqa: F401 - what torch asks before a weights_only load of nested jagged tensors
    import torch.nested._internal.nested_tensor  # noqa: F401
    ok = True
    for c in json.load(open(os.path.join(d, "checks.json"))):
        out = os.path.join(d, c["output"])
        bad = []
        inp = os.path.join(d, c["input"])
        try:
            input_wo = os.path.isdir(inp) or c["expect"] == "export" or torch.load(inp, weights_only=True) is not None
        except Exception:  # noqa: BLE001 - torch 2.6 refuses the input itself
            input_wo = False
        try:
            got = torch.load(out, weights_only=input_wo)
        except Exception as e:  # noqa: BLE001 - the error is the finding
            print(json.dumps({"output": c["output"], "ok": False, "error": "load (weights_only=%s): %s" % (input_wo, str(e)[-300:])}))
            ok = False
            continue
        if c["expect"] == "export":
            ep = torch.export.load(os.path.join(d, c["input"]))
            want = dict(ep.state_dict)
            want.update(ep.constants)
            want = {k: v.detach() if isinstance(v, nn.Parameter) else v for k, v in want.items()}
            got = {k: v.detach() if isinstance(v, nn.Parameter) else v for k, v in got.items()}
        elif c["expect"] == "dcp":
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
            ref = os.path.join(d, c["output"] + ".torch.pt")
            dcp_to_torch_save(os.path.join(d, c["input"]), ref)
            want = torch.load(ref, weights_only=False)
        else:
            want = torch.load(os.path.join(d, c["input"]), weights_only=False)
        if c["expect"].startswith("strip:"):
            p = c["expect"][len("strip:"):]
            if c.get("path"):
                want = dict(want)
                want[c["path"]] = strip(want[c["path"]], p)
            else:
                want = strip(want, p)
        if c.get("unordered"):
            want = dict(sorted(want.items()))
            got = dict(sorted(got.items()))
        same(want, got, c["output"], bad)
        if c.get("strict"):
            m = Net()
            sd = got[c["strict"]] if c["strict"] != "." else got
            m.load_state_dict(sd, strict=True)
        print(json.dumps({"output": c["output"], "ok": not bad, "weights_only": input_wo, "differences": bad[:5]}))
        ok = ok and not bad
    return 0 if ok else 1


def pickle_calling(cmd):
    """A protocol 2 pickle that calls os.system(cmd), written opcode by opcode."""
    import struct
    b = cmd.encode()
    return b"\x80\x02cos\nsystem\n(X" + struct.pack("<I", len(b)) + b + b"tR."


def zip_replacing(src, dst, member, data):
    """`src` again with one member's bytes replaced (Python's zipfile, as torch.export writes a .pt2)."""
    import zipfile
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, data if info.filename == member else zin.read(info.filename))


def hostile(d):
    """Files torch 2.6 / numpy 2 run code from, each proven here (a marker file appears), and files of
    torch 2.6 that must scan clean. One JSON line each: name, file, proven, want (finding kinds or
    globals) or clean."""
    import argparse
    import io
    import pickle
    import signal
    import struct
    import zipfile
    import numpy as np
    os.makedirs(d, exist_ok=True)
    marker = os.path.join(d, "MARK")

    def proof(load):
        if os.path.exists(marker):
            os.remove(marker)
        try:
            load()
        except Exception:  # noqa: BLE001 - the loader may fail after the payload ran
            pass
        ran = os.path.exists(marker)
        if ran:
            os.remove(marker)
        return ran

    touch = "touch " + marker
    # A torch.export archive whose serialized_state_dict.pt is a torch.save archive with a payload:
    # torch.export.load hands it to torch.load.
    m = WithConstant().eval()
    good = os.path.join(d, "export_good.pt2")
    torch.export.save(torch.export.export(m, (torch.randn(1, 3),)), good)
    evil_pt = io.BytesIO()
    with zipfile.ZipFile(evil_pt, "w") as z:
        z.writestr("archive/data.pkl", pickle_calling(touch))
        z.writestr("archive/version", "3\n")
    with zipfile.ZipFile(good) as z:
        names = z.namelist()
    member = next(n for n in names if n.endswith("serialized_state_dict.pt"))
    bad = os.path.join(d, "export_evil.pt2")
    zip_replacing(good, bad, member, evil_pt.getvalue())
    print(json.dumps({"name": "torch.export archive with a hostile serialized_state_dict.pt", "file": "export_evil.pt2",
                      "proven": proof(lambda: torch.export.load(bad)), "want": ["os.system"]}))
    print(json.dumps({"name": "torch.export archive", "file": "export_good.pt2", "clean": True}))

    # TorchScript whose __setstate__ writes a file: torch.jit.load runs it; torch 2.6's
    # torch.load(weights_only=True) refuses the archive (CVE-2025-32434's fix).
    class Marker(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.ones(1)

        @torch.jit.export
        def __getstate__(self):
            return (self.w, self.training)

        @torch.jit.export
        def __setstate__(self, state: tuple[torch.Tensor, bool]):
            self.w = state[0]
            self.training = state[1]
            torch.save(self.w, "PATH")

        def forward(self, x):
            return x + self.w

    src = torch.jit.script(Marker())
    ts = os.path.join(d, "ts_setstate.pt")
    torch.jit.save(src, ts)
    # The path is a constant of the compiled code: point it at the marker.
    with zipfile.ZipFile(ts) as z:
        code_name = next(n for n in z.namelist() if n.endswith("code/__torch__.py"))
        code = z.read(code_name).replace(b'"PATH"', repr(marker).replace("'", '"').encode())
    zip_replacing(ts, ts + ".tmp", code_name, code)
    os.replace(ts + ".tmp", ts)
    print(json.dumps({"name": "TorchScript __setstate__ that writes a file", "file": "ts_setstate.pt",
                      "proven": proof(lambda: torch.jit.load(ts)), "want": ["torchscript_op"],
                      "weights_only_refused": not proof(lambda: torch.load(ts, weights_only=True))}))

    # numpy 2's StringDType ('T') holds objects: numpy.load(allow_pickle=True) unpickles the data.
    hdr = "{'descr': 'T', 'fortran_order': False, 'shape': (1,), }"
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    npy = os.path.join(d, "stringdtype.npy")
    with open(npy, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + pickle_calling(touch))
    print(json.dumps({"name": "numpy 2 StringDType header", "file": "stringdtype.npy",
                      "proven": proof(lambda: np.load(npy, allow_pickle=True)), "want": ["os.system"]}))

    # Python 3.13's pickles of what training runs save: an enum in args (Megatron's exit_signal), a
    # tensor pickled with pickle.dumps inside a uint8 tensor (TransformerEngine's _extra_state).
    state = pickle.dumps({"scale_fwd": torch.ones(2), "amax_history_fwd": torch.zeros(1, 2), "extra": (1, "x")})
    sd = {"model": {"layer.weight": torch.zeros(2, 2),
                    "layer._extra_state": torch.frombuffer(bytearray(state), dtype=torch.uint8)},
          "args": argparse.Namespace(exit_signal=signal.SIGTERM, lr=0.1), "iteration": 2}
    torch.save(sd, os.path.join(d, "te_megatron_like.pt"))
    print(json.dumps({"name": "an enum in args and a pickle.dumps'd state in _extra_state", "file": "te_megatron_like.pt", "clean": True}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    elif sys.argv[1] == "hostile":
        hostile(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
