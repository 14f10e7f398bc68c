#!/usr/bin/python3
"""The bash completion the build generates (tools/cli_docs.py), driven in bash as readline drives it:
the script is sourced, the function `complete -p ckpt-tool` names is called with COMP_WORDS and
COMP_CWORD set, and COMPREPLY is compared with what the tool's own --help says, read here with a
parser of this test's own. Every command's options must complete to exactly its --help options (a new
option the completion misses fails here), every {a,b,c} value list to its values, a command name from
its first letters, file names for positionals and path options; then two real TABs in an interactive
bash on a pty; then the generator on a fake tool whose help has what this one's lacks yet (a
command's {a,b,c} option, a directory check, Excludes).

Usage: test_completion.py --tool PATH --completion SCRIPT --work DIR
"""
import os
import pty
import re
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from test_repair import suite_main  # noqa: E402

BASH = "/bin/bash"
# Run in a bash with no rc files: source the script, find the function it registered for ckpt-tool,
# call it as readline does (command, word, previous word), print COMPREPLY one per line.
DRIVER = r'''
source "$1" || exit 3
shift
spec=$(complete -p ckpt-tool) || exit 4
[[ $spec =~ -F\ ([^ ]+) ]] || exit 5
COMP_WORDS=("$@")
COMP_CWORD=$(($# - 1))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
"${BASH_REMATCH[1]}" ckpt-tool "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
for c in "${COMPREPLY[@]}"; do printf '%s\n' "$c"; done
'''


def read_help(text):
    """{"options": [names], "choices": {name: [values]}, "commands": [names]} of one CLI11 --help."""
    got = {"options": [], "choices": {}, "commands": []}
    heading = None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            heading = line[:-1]
            continue
        if not line.strip():
            heading = None
            continue
        m = re.match(r"^  (\S+)(?: (\S+))?", line)
        if not m or heading is None:
            continue
        if heading == "Subcommands":
            got["commands"].append(m.group(1))
        elif m.group(1).startswith("-") and heading not in ("Positionals", "Examples"):
            names = m.group(1).split(",")
            got["options"] += names
            values = re.search(r"\{([^}]*)\}", m.group(2) or "")
            if values:
                for n in names:
                    got["choices"][n] = values.group(1).split(",")
    return got


class Completer:
    def __init__(self, s, script):
        self.s = s
        self.script = script

    def __call__(self, *words, cwd=None):
        """COMPREPLY for the command line `ckpt-tool WORDS...`, the last word being the one typed."""
        r = subprocess.run([BASH, "--norc", "--noprofile", "-c", DRIVER, "driver", self.script, "ckpt-tool"] + list(words),
                           capture_output=True, text=True, cwd=cwd)
        if r.returncode != 0 or r.stderr:
            self.s.check(False, "completing %r: exit %d %s" % (words, r.returncode, r.stderr.strip()))
        return r.stdout.splitlines()


def same(s, got, want, what):
    return s.check(sorted(got) == sorted(want) and len(set(got)) == len(got),
                   "%s: completed %s, --help says %s" % (what, sorted(got), sorted(want)))


def test_completion(s, args):
    script = os.path.abspath(args.completion)
    if not s.check(os.path.exists(script), "no completion script at %s (tools/cli_docs.py, app/CMakeLists.txt)" % script):
        return
    r = subprocess.run([BASH, "-n", script], capture_output=True, text=True)
    s.check(r.returncode == 0, "bash -n: %s" % r.stderr.strip())
    r = subprocess.run([BASH, "--norc", "--noprofile", "-c", 'source "$1"', "x", script], capture_output=True, text=True)
    s.check(r.returncode == 0 and r.stdout == "" and r.stderr == "", "sourcing prints nothing: %r %r" % (r.stdout, r.stderr))
    complete = Completer(s, script)

    top = read_help(s.run("--help").stdout)
    commands = top["commands"]
    s.check(len(commands) >= 6 and "verify" in commands and "scan" in commands, "commands in --help: %s" % commands)
    helps = {c: read_help(s.run(c, "--help").stdout) for c in commands}

    # Command names.
    same(s, complete(""), commands, "ckpt-tool <TAB>")
    same(s, complete("ver"), ["verify"], "ckpt-tool ver<TAB>")
    same(s, complete("s"), [c for c in commands if c.startswith("s")], "ckpt-tool s<TAB>")
    same(s, complete("-q", "--color", "never", ""), commands, "ckpt-tool -q --color never <TAB>")
    same(s, complete("--color", "=", "never", "ins"), ["inspect"], "ckpt-tool --color=never ins<TAB>")
    same(s, complete("nothing-like-it"), [], "ckpt-tool nothing-like-it<TAB>")

    # Options, for the tool and for every command: exactly those of its --help, short and long.
    for name, h in [("", top)] + list(helps.items()):
        words = [name] if name else []
        label = "ckpt-tool %s" % (name + " " if name else "")
        s.check(len(h["options"]) >= 2, "%s--help: options found %s" % (label, h["options"]))
        same(s, complete(*words, "-"), h["options"], label + "-<TAB>")
        same(s, complete(*words, "--"), [o for o in h["options"] if o.startswith("--")], label + "--<TAB>")
        # Fixed values, split at = or not.
        for opt, values in h["choices"].items():
            same(s, complete(*words, opt, ""), values, "%s%s <TAB>" % (label, opt))
            if opt.startswith("--"):
                same(s, complete(*words, opt, "="), values, "%s%s=<TAB>" % (label, opt))
                first = values[0]
                same(s, complete(*words, opt, "=", first[:2]), [v for v in values if v.startswith(first[:2])],
                     "%s%s=%s<TAB>" % (label, opt, first[:2]))
    same(s, complete("verify", "--"), [o for o in helps["verify"]["options"] if o.startswith("--")], "ckpt-tool verify --<TAB>")
    same(s, complete("--color", ""), ["auto", "always", "never"], "ckpt-tool --color <TAB>")
    same(s, complete("--color", "a"), ["auto", "always"], "ckpt-tool --color a<TAB>")
    same(s, complete("--color=a"), ["--color=auto", "--color=always"], "--color=a<TAB> when = does not break words")
    same(s, complete("convert", "x.pth", "--dtype", ""), ["bfloat16", "float16", "float32", "float64"],
         "ckpt-tool convert x.pth --dtype <TAB>")
    same(s, complete("convert", "x.pth", "--dtype", "f"), ["float16", "float32", "float64"], "convert --dtype f<TAB>")
    same(s, complete("convert", "x.pth", "--to", ""), ["safetensors", "pth"], "ckpt-tool convert x.pth --to <TAB>")
    same(s, complete("verify", "x.pth", "--rtol", ""), [], "verify --rtol <TAB> (a number)")
    same(s, complete("verify", "--all", "--"), [o for o in helps["verify"]["options"] if o.startswith("--")],
         "verify --all --<TAB> (a flag takes no value)")

    # File names: positionals, options taking a path, after flags and option values, after --.
    d = s.path("files")
    os.makedirs(os.path.join(d, "sub dir"))
    for f in ("a.pth", "ab.safetensors", "b.fp.json", "sub dir/c.pth", "-dash.pth"):
        open(os.path.join(d, f), "w").close()
    everything = ["a.pth", "ab.safetensors", "b.fp.json", "sub dir", "-dash.pth"]
    same(s, complete("inspect", "", cwd=d), everything, "ckpt-tool inspect <TAB>")
    same(s, complete("inspect", "a", cwd=d), ["a.pth", "ab.safetensors"], "ckpt-tool inspect a<TAB>")
    same(s, complete("inspect", "sub dir/", cwd=d), ["sub dir/c.pth"], "ckpt-tool inspect 'sub dir/'<TAB>")
    same(s, complete("verify", "a.pth", "b", cwd=d), ["b.fp.json"], "ckpt-tool verify a.pth b<TAB>")
    same(s, complete("diff-keys", "--json", "a", cwd=d), ["a.pth", "ab.safetensors"], "diff-keys --json a<TAB>")
    same(s, complete("verify", "--rtol", "1e-5", "a", cwd=d), ["a.pth", "ab.safetensors"], "verify --rtol 1e-5 a<TAB>")
    same(s, complete("scan", "a.pth", "a", cwd=d), ["a.pth", "ab.safetensors"], "scan a.pth a<TAB> (FILE...)")
    same(s, complete("convert", "a.pth", "-o", "a", cwd=d), ["a.pth", "ab.safetensors"], "convert a.pth -o a<TAB>")
    same(s, complete("convert", "a.pth", "--output", "=", "a", cwd=d), ["a.pth", "ab.safetensors"], "convert --output=a<TAB>")
    same(s, complete("strip-prefix", "a.pth", "--output", "=", cwd=d), everything, "strip-prefix --output=<TAB>")
    same(s, complete("verify", "a.pth", "--write-fingerprint", "b", cwd=d), ["b.fp.json"], "verify --write-fingerprint b<TAB>")
    same(s, complete("scan", "--", "-", cwd=d), ["-dash.pth"], "scan -- -<TAB> (files only after --)")

    # Real TABs: an interactive bash on a pty, readline doing the completing (a space after a word,
    # a / after a directory: compopt -o filenames only works there).
    tty = Pty(d)
    try:
        # ckpt-tool here is a function printing its arguments: Enter shows what the TAB made of the line.
        tty.send("source '%s'; ckpt-tool() { printf '<%%s>' \"$@\"; echo; }; PS1='rea''dy> '\n" % script)
        s.check(tty.wait("ready> "), "interactive bash: no prompt after sourcing (%r)" % tty.seen[-300:])
        tty.send("ckpt-tool ver\t--json\n")
        s.check(tty.wait("<verify><--json>\r\n"), "TAB after 'ckpt-tool ver': %r" % tty.seen[-300:])
        tty.send("ckpt-tool inspect su\t\n")
        s.check(tty.wait("<inspect><sub dir/>\r\n"), "TAB after 'ckpt-tool inspect su': %r" % tty.seen[-300:])
    finally:
        tty.close()

    test_generator(s, s.path("fake"))


# CLI11's layout for what the tool does not have yet, to see the generator read it: a command's
# IsMember option (wrapped: its left column is past column 30), a default, a directory check,
# Excludes, a number, a left column one space short of the text, positionals of two kinds.
FAKE_TOP = """A tool.
Usage: ./ckpt-tool [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit

Subcommands:
  check                       Check things.
"""
FAKE_CHECK = """Check things.
Usage: ./ckpt-tool check [OPTIONS] FILE [DIR]

Positionals:
  FILE TEXT REQUIRED          A file
  DIR TEXT:DIR                A directory

Options:
  -h,--help                   Print this help message and exit
  --format TEXT:{text,json,sarif}=text
                              Report format
  --out-dir TEXT:DIR          Where reports go
  -n,--count INT Excludes: --all
                              How many
  --all Excludes: --count     Everything
  --twentyseven-chars-xy TEXT A value, one space after the column

Examples:
  ckpt-tool check x.pth --format json
"""


def test_generator(s, fake_dir):
    """tools/cli_docs.py on a fake tool printing FAKE_TOP and FAKE_CHECK."""
    tool = os.path.join(fake_dir, "ckpt-tool")
    os.makedirs(os.path.join(fake_dir, "out", "reports"))
    open(os.path.join(fake_dir, "out", "o.txt"), "w").close()
    with open(tool, "w") as f:
        f.write("#!/bin/sh\nif [ \"$1\" = check ]; then cat <<'EOF'\n%sEOF\nelse cat <<'EOF'\n%sEOF\nfi\n" % (FAKE_CHECK, FAKE_TOP))
    os.chmod(tool, 0o755)
    script = os.path.join(fake_dir, "fake.bash")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "cli_docs.py"), "completion", "--tool", tool, "-o", script],
                       capture_output=True, text=True)
    if not s.check(r.returncode == 0 and r.stderr == "", "cli_docs.py on the fake tool: %d %s" % (r.returncode, r.stderr)):
        return
    complete = Completer(s, script)
    same(s, complete(""), ["check"], "fake: <TAB>")
    same(s, complete("check", "-"), ["-h", "--help", "--format", "--out-dir", "-n", "--count", "--all", "--twentyseven-chars-xy"],
         "fake: check -<TAB>")
    same(s, complete("check", "--format", ""), ["text", "json", "sarif"], "fake: a wrapped IsMember option")
    same(s, complete("check", "--out-dir", "out/", cwd=fake_dir), ["out/reports"], "fake: a :DIR option completes directories")
    same(s, complete("check", "-n", ""), [], "fake: an INT with Excludes:")
    same(s, complete("check", "--all", "out/", cwd=fake_dir), ["out/o.txt", "out/reports"], "fake: a flag with Excludes:")
    same(s, complete("check", "--twentyseven-chars-xy", "out/", cwd=fake_dir), ["out/o.txt", "out/reports"],
         "fake: a left column of 27 characters")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "cli_docs.py"), "man-include", "--tool", tool,
                        "-o", os.path.join(fake_dir, "fake.h2m")], capture_output=True, text=True)
    if s.check(r.returncode == 0, "cli_docs.py man-include on the fake tool: %s" % r.stderr):
        with open(os.path.join(fake_dir, "fake.h2m")) as f:
            h2m = f.read()
        for want in ("[ckpt-tool check]", "\\fB\\-\\-format\\fR \\fITEXT:{text,json,sarif}=text\\fR\nReport format",
                     "\\fB\\-\\-twentyseven\\-chars\\-xy\\fR \\fITEXT\\fR\nA value", "ckpt\\-tool check x.pth \\-\\-format json"):
            s.check(want in h2m, "fake man include lacks %r" % want)


class Pty:
    def __init__(self, cwd):
        self.seen = ""
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(cwd)
            os.environ["TERM"] = "dumb"
            os.execv(BASH, [BASH, "--norc", "--noprofile", "-i"])

    def send(self, text):
        self.seen = ""
        os.write(self.fd, text.encode())

    def wait(self, text, seconds=10):
        end = time.time() + seconds
        while text not in self.seen and time.time() < end:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:
                    break
        return text in self.seen

    def close(self):
        try:
            os.write(self.fd, b"exit\n")
        except OSError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def main():
    return suite_main(test_completion, ("--completion",))


if __name__ == "__main__":
    sys.exit(main())
