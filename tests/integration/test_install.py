#!/usr/bin/python3
"""`cmake --install` into a fresh prefix, then what a user does with it: run the installed tool (its
backend found where it was installed, with no environment set), read its man page (rendered by man
and groff without a warning where they are installed; a section per command holding every option of
that command's --help), load its bash completion, and build a project of their own (tests/consumer)
with find_package(ckpt) against the installed tree, whose output must equal the tool's."""
import json
import os
import re
import shutil
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_completion import read_help  # noqa: E402
from test_repair import suite_main  # noqa: E402


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)


def test_install(s, args):
    source = os.path.abspath(args.source)
    prefix = s.path("prefix")
    r = run("cmake", "--install", args.build, "--prefix", prefix)
    if not s.check(r.returncode == 0, "cmake --install exit %d: %s" % (r.returncode, r.stderr.strip())):
        return
    for f in ("bin/ckpt-tool", "lib/ckpt-tool/libckpt-torch.so", "lib/ckpt-tool/ckpt-torch-load", "include/ckpt/checkpoint.hpp",
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

    # A TorchScript reference is read by the helper installed beside the backend.
    ts = s.path("model.ts.pt")
    lin = torch.nn.Linear(3, 2)
    torch.jit.save(torch.jit.script(lin), ts)
    sd = s.path("lin.pth")
    torch.save(lin.state_dict(), sd)
    d = run(tool, "diff-keys", sd, ts, env=env)
    s.check(d.returncode == 0, "installed tool: diff-keys against TorchScript exit %d %s" % (d.returncode, d.stderr.strip()))

    check_man_page(s, prefix, tool, env)
    check_completion(s, prefix, args.build)

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


def roff_plain(line):
    """A roff line as text: font changes and zero-width escapes dropped, \\- a hyphen."""
    return re.sub(r"\\f[BIRP]|\\&|\\/|\\,", "", line).replace("\\-", "-").replace("\\(aq", "'").replace("\\e", "\\")


def check_man_page(s, prefix, tool, env):
    page = os.path.join(prefix, "share", "man", "man1", "ckpt-tool.1")
    if not s.check(os.path.exists(page), "installed: share/man/man1/ckpt-tool.1 (help2man at configure time; make deps installs it)"):
        return
    with open(page, encoding="utf-8") as f:
        roff = f.read()
    s.check(re.search(r'^\.TH CKPT-TOOL "?1"? ', roff, re.M) is not None, "man page: no .TH CKPT-TOOL 1 line")
    # The text of each .SH section, by name.
    sections = {}
    name = None
    for line in roff.splitlines():
        m = re.match(r'^\.SH\s+"?(.*?)"?\s*$', line)
        if m:
            name = roff_plain(m.group(1))
            sections[name] = []
        elif name is not None:
            sections[name].append(roff_plain(line))
    for want in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "SEE ALSO"):
        s.check(want in sections, "man page: no %s section (%s)" % (want, list(sections)))
    exit_status = "\n".join(sections.get("EXIT STATUS", []))
    s.check(all(re.search(r"^\.B %d$" % code, exit_status, re.M) for code in (0, 1, 2)), "man page: EXIT STATUS lists 0, 1, 2")

    top = read_help(run(tool, "--help", env=env).stdout)
    s.check(len(top["commands"]) >= 6, "--help lists the commands: %s" % top["commands"])
    options_text = "\n".join(sections.get("OPTIONS", []))
    for opt in top["options"]:
        s.check(re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), options_text), "man page: OPTIONS lacks %s" % opt)
    for cmd in top["commands"]:
        text = sections.get("CKPT-TOOL " + cmd.upper())
        if not s.check(text is not None, "man page: no section for %s (%s)" % (cmd, list(sections))):
            continue
        body = "\n".join(text)
        s.check("ckpt-tool %s [OPTIONS]" % cmd in body, "man page: %s section has no usage line" % cmd)
        # Every option of the command's --help is an item of its section (the line after a .TP).
        tags = "\n".join(text[i + 1] for i, line in enumerate(text[:-1]) if line.startswith(".TP"))
        h = read_help(run(tool, cmd, "--help", env=env).stdout)
        for opt in h["options"]:
            s.check(re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), tags), "man page: %s section lacks %s" % (cmd, opt))
        s.check(re.search(r"^ckpt-tool %s " % re.escape(cmd), body, re.M), "man page: %s section has no example" % cmd)

    # Rendered as a reader sees it, by whichever of man and groff this machine has, on a UTF-8 terminal
    # and in the C locale (ASCII): no warning.
    rendered = 0
    if shutil.which("man"):
        for locale in ("C.UTF-8", "C"):
            r = run("man", "--warnings", "-l", page, env=dict(env, LC_ALL=locale, MANWIDTH="80", MANPAGER="cat"))
            s.check(r.returncode == 0 and r.stderr == "", "man -l (%s): exit %d, warnings: %s" % (locale, r.returncode, r.stderr.strip()))
            s.check(all(("CKPT-TOOL " + c.upper()) in r.stdout for c in top["commands"]), "man -l (%s): a command's section is missing" % locale)
        rendered += 1
    if shutil.which("groff"):
        for device in ("utf8", "ascii"):
            r = run("groff", "-man", "-T" + device, "-ww", "-z", page)
            s.check(r.returncode == 0 and r.stderr == "", "groff -man -T%s -ww: exit %d, warnings: %s" % (device, r.returncode, r.stderr.strip()))
        rendered += 1
    if not rendered:
        print("note: neither man nor groff here: the man page was checked as roff only")


def check_completion(s, prefix, build):
    script = os.path.join(prefix, "share", "bash-completion", "completions", "ckpt-tool")
    if not s.check(os.path.exists(script), "installed: share/bash-completion/completions/ckpt-tool"):
        return
    with open(script) as f, open(os.path.join(build, "ckpt-tool.bash-completion")) as g:
        s.check(f.read() == g.read(), "installed completion differs from the build's")
    r = run("bash", "--norc", "--noprofile", "-c", 'source "$1" && complete -p ckpt-tool', "x", script)
    s.check(r.returncode == 0 and "-F " in r.stdout and r.stdout.strip().endswith(" ckpt-tool"),
            "installed completion: complete -p ckpt-tool %r %r" % (r.stdout, r.stderr))


def main():
    return suite_main(test_install, ("--build", "--source", "--consumer-flags"))


if __name__ == "__main__":
    sys.exit(main())
