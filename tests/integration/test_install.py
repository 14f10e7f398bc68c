#!/usr/bin/python3
"""`cmake --install` into a fresh prefix, then what a user does with it: run the installed tool (its
backend found where it was installed, with no environment set), and build a project of their own
(tests/consumer) with find_package(ckpt) against the installed tree, whose output must equal the
tool's."""
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_repair import suite_main  # noqa: E402


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)


def test_install(s, args):
    source = os.path.abspath(args.source)
    prefix = s.path("prefix")
    r = run("cmake", "--install", args.build, "--prefix", prefix)
    if not s.check(r.returncode == 0, "cmake --install exit %d: %s" % (r.returncode, r.stderr.strip())):
        return
    for f in ("bin/ckpt-tool", "lib/ckpt-tool/libckpt-torch.so", "include/ckpt/checkpoint.hpp",
              "include/ckpt/inspect.hpp", "lib/libckpt.a", "lib/cmake/ckpt/ckptConfig.cmake",
              "lib/cmake/ckpt/ckptConfigVersion.cmake", "lib/cmake/ckpt/ckptTargets.cmake"):
        s.check(os.path.exists(os.path.join(prefix, f)), "installed: %s" % f)

    tool = os.path.join(prefix, "bin", "ckpt-tool")
    env = {k: v for k, v in os.environ.items() if k != "CKPT_TORCH_BACKEND"}
    sample = os.path.join(source, "data", "training.pth")
    want = run(s.tool, "inspect", sample, "--json")
    got = run(tool, "inspect", sample, "--json", env=env)
    s.check(want.returncode == 0 and got.returncode == 0 and json.loads(got.stdout) == json.loads(want.stdout),
            "installed tool: inspect --json as the build's (%d %s)" % (got.returncode, got.stderr.strip()))
    v = run(tool, "--version", env=env)
    s.check(v.returncode == 0 and v.stdout.strip() == run(s.tool, "--version").stdout.strip() and v.stdout.startswith("ckpt-tool "),
            "installed tool: --version %r" % v.stdout)
    # A cast needs the backend: found in PREFIX/lib/ckpt-tool from PREFIX/bin, no environment.
    out = s.path("bf16.pth")
    c = run(tool, "convert", sample, "-o", out, "--weights-only", "--dtype", "bfloat16", env=env)
    if s.check(c.returncode == 0, "installed tool: convert --dtype bfloat16 exit %d %s" % (c.returncode, c.stderr.strip())):
        sd = torch.load(out, weights_only=True)
        s.check(any(t.dtype == torch.bfloat16 for t in sd.values()), "installed tool: the cast output holds bfloat16")

    # A project of the user's own, against the installed tree only.
    build = s.path("consumer-build")
    r = run("cmake", "-S", os.path.join(source, "tests", "consumer"), "-B", build,
            "-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_CXX_FLAGS=" + args.consumer_flags, "-DCMAKE_EXE_LINKER_FLAGS=" + args.consumer_flags)
    if not s.check(r.returncode == 0, "consumer: find_package(ckpt) configure: %s" % (r.stdout + r.stderr)[-2000:]):
        return
    r = run("cmake", "--build", build, "-j2")
    if not s.check(r.returncode == 0, "consumer: build: %s" % (r.stdout + r.stderr)[-2000:]):
        return
    r = run(os.path.join(build, "consumer"), sample, env=env)
    s.check(r.returncode == 0 and json.loads(r.stdout) == json.loads(want.stdout),
            "consumer: inspect report equal to ckpt-tool inspect --json (%d %s)" % (r.returncode, r.stderr.strip()))
    r = run(os.path.join(build, "consumer"), os.path.join(source, "README.md"), env=env)
    s.check(r.returncode == 2 and "README.md" in r.stderr, "consumer: a non-checkpoint is a ckpt::Error: %r" % r.stderr)


def main():
    return suite_main(test_install, ("--build", "--source", "--consumer-flags"))


if __name__ == "__main__":
    sys.exit(main())
