#!/usr/bin/python3
"""What the build makes from the tool's own --help: the bash completion and the man page's command
sections. Both are read from the binary just built (`ckpt-tool --help`, then `ckpt-tool COMMAND
--help` for every command that lists), so an option added in app/ is completed and documented by the
next build, with nothing to keep in step by hand.

  cli_docs.py completion  --tool BUILD/ckpt-tool -o OUT   bash completion script (installed as
                                                          share/bash-completion/completions/ckpt-tool)
  cli_docs.py man-include --tool BUILD/ckpt-tool -o OUT   help2man include: one section per command

The help is CLI11's layout: a description, `Usage: …`, then blocks under a heading ending in ':'
(`Positionals:`, `Options:`, `Subcommands:`, and the footer's `Examples:`), entries indented two
spaces, `NAMES [TYPE[:CHECK][=DEFAULT]] [...] [REQUIRED]` then the description (on the next line,
indented further, when the names are long). An option's fixed values come from CLI11's IsMember
check (`TEXT:{auto,always,never}`) or, for an option checked by the command itself, from a
description that starts with them (`bfloat16|float16|float32|float64: cast …`). Any other value
completes as a file name (CLI11 calls every string TEXT; a path is the value worth completing),
except numbers (INT, UINT, FLOAT), which get nothing; an ExistingDirectory check (`:DIR`) completes
directories.
"""
import argparse
import os
import re
import subprocess
import sys
import unicodedata

PROGRAM = "ckpt-tool"
NUMERIC = {"INT", "UINT", "FLOAT", "NUMBER", "DOUBLE"}
HEADING = re.compile(r"^(\S.*):$")
TYPE = re.compile(r"^([A-Z][A-Z0-9_]*)(?=$|[:=])")
LEADING_CHOICES = re.compile(r"^([\w.+-]+(?:\|[\w.+-]+)+):\s")
SAFE_WORD = re.compile(r"^[\w.+:@%/-]+$")  # a word that needs no quoting in the generated script
# What a terminal without the character shows (man in the C locale: groff -Tascii), when Unicode's
# compatibility decomposition has no ASCII form.
ASCII_FALLBACK = {"\u2192": "->", "\u2190": "<-", "\u2264": "<=", "\u2265": ">=", "\u00d7": "x",
                  "\u2014": "--", "\u2013": "-", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}


class Entry:
    """One row of Positionals, Options or Subcommands."""

    def __init__(self, names, spec, description):
        self.names = names            # ["-o", "--output"], ["FILE"], ["inspect"]
        self.spec = spec              # the rest of the left column: ["TEXT", "...", "REQUIRED"]
        self.description = description
        self.type = None              # TEXT, FLOAT … (None: a flag)
        self.check = ""               # what follows ':' in the type: "{auto,always,never}", "FILE"
        self.type_token = None        # the spec word naming the type, "TEXT:{auto,always,never}=auto"
        for tok in spec:
            if tok in ("...", "REQUIRED"):
                continue
            if tok.endswith(":"):  # Needs: / Excludes: and the options they name
                break
            m = TYPE.match(tok)
            if m and self.type is None:
                self.type, self.type_token = m.group(1), tok
                rest = tok[m.end():]
                if rest.startswith(":{"):
                    self.check = rest[1:rest.find("}") + 1]
                elif rest.startswith(":"):
                    self.check = rest[1:].split("=", 1)[0]

    def choices(self):
        """The fixed values of an option, [] when any value goes."""
        m = re.search(r"\{([^}]*)\}", self.check)
        if m:
            return [c.split("->")[0].strip() for c in m.group(1).split(",") if c.strip()]
        m = LEADING_CHOICES.match(self.description)
        return m.group(1).split("|") if m and self.type else []

    def value_kind(self):
        """What completes after the option: None (a flag), "choices", "none", "dirs" or "files"."""
        if self.type is None:
            return None
        if self.choices():
            return "choices"
        if self.type in NUMERIC:
            return "none"
        if self.check == "DIR" or self.type == "DIR":
            return "dirs"
        return "files"


class Block:
    """A heading and what is under it: entries (Positionals, Options, Subcommands) or plain lines."""

    def __init__(self, title):
        self.title = title
        self.lines = []
        self.entries = []

    def is_entries(self):
        rows = [l for l in self.lines if re.match(r"^  \S", l)]
        return bool(rows) and (self.title in ("Positionals", "Subcommands") or all(r.startswith("  -") for r in rows))


class Help:
    """One --help text, parsed."""

    def __init__(self, text):
        self.description = []
        self.usage = ""
        self.blocks = []              # Block, or a str: a paragraph line outside any block
        block = None
        for line in text.splitlines():
            if not self.usage:
                if line.startswith("Usage:"):
                    self.usage = line[len("Usage:"):].strip()
                elif line.strip():
                    self.description.append(line.strip())
                continue
            if not line.strip():
                block = None
                continue
            m = HEADING.match(line)
            if m and block is None:
                block = Block(m.group(1))
                self.blocks.append(block)
            elif block is not None:
                block.lines.append(line)
            else:
                self.blocks.append(line)
        for b in self.sections():
            if b.is_entries():
                b.entries = parse_entries(b.lines)
        # The usage names the binary as it was run (a build path): the installed name instead.
        words = self.usage.split(None, 1)
        if words and os.path.basename(words[0]) == PROGRAM:
            self.usage = PROGRAM + (" " + words[1] if len(words) > 1 else "")

    def sections(self):
        return [b for b in self.blocks if isinstance(b, Block)]

    def entries(self, title):
        return [e for b in self.sections() if b.title == title for e in b.entries]

    def options(self):
        return [e for b in self.sections() if b.entries and b.title not in ("Positionals", "Subcommands")
                for e in b.entries]


def parse_entries(lines):
    """CLI11 rows: `  NAMES SPEC  description`, the description from column 30, or on the next line
    (indented to 30) when the left column is longer; further description lines indented alike."""
    entries = []
    for i, line in enumerate(lines):
        if not re.match(r"^  \S", line):
            if entries:
                d = entries[-1].description
                entries[-1].description = (d + "\n" + line.strip()) if d else line.strip()
            continue
        body = line[2:]
        gap = re.search(r"\s{2,}", body)
        wrapped = i + 1 < len(lines) and lines[i + 1].startswith(" " * 3)
        if gap:
            left, desc = body[:gap.start()], body[gap.end():]
        elif not wrapped and len(line) > 30 and line[29] == " ":
            left, desc = line[2:29], line[30:]  # a left column of 27 characters: one space, then the text
        else:
            left, desc = body, ""
        tokens = left.split()
        entries.append(Entry(tokens[0].split(","), tokens[1:], desc.strip()))
    return entries


def help_of(tool, *args):
    r = subprocess.run([tool] + list(args) + ["--help"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("cli_docs.py: %s %s --help exit %d: %s" % (tool, " ".join(args), r.returncode, r.stderr.strip()))
    return Help(r.stdout)


def read_tool(tool):
    """The top-level help and {command: its help}, in the order the top-level help lists them."""
    top = help_of(tool)
    commands = [e.names[0] for e in top.entries("Subcommands")]
    if not commands:
        sys.exit("cli_docs.py: no Subcommands in %s --help" % tool)
    return top, {c: help_of(tool, c) for c in commands}


# --- bash completion -----------------------------------------------------------------------------

def safe_words(words, what):
    for w in words:
        if not SAFE_WORD.match(w):
            sys.exit("cli_docs.py: %s %r cannot be completed (only letters, digits and _.+:@%%/-)" % (what, w))
    return " ".join(words)


def completion_script(top, commands):
    scopes = [("", top)] + list(commands.items())
    out = []
    w = out.append
    w("# bash completion for %s. Generated by tools/cli_docs.py from `%s --help` and" % (PROGRAM, PROGRAM))
    w("# `%s COMMAND --help` when the tool is built: edit the options in app/, not this file." % PROGRAM)
    w("#")
    w("# Generated once rather than asking the tool at each TAB: nothing runs while you type, there is")
    w("# no cache to go stale, and a test compares this script with --help, command by command.")
    w("# Options of the tool itself go before the command (CLI11 does not take them after it).")
    w("")
    w("_ckpt_tool_commands() {")
    w("    echo %s" % safe_words(commands, "command"))
    w("}")
    w("")
    w("# $1: a command, or empty for the tool's own options.")
    w("_ckpt_tool_options() {")
    w("    case $1 in")
    for name, h in scopes:
        names = [n for e in h.options() for n in e.names]
        w("    %s) echo %s ;;" % (name or '""', safe_words(names, "option")))
    w("    esac")
    w("}")
    w("")
    w("# What follows option $2 of command $1 (empty: the tool's own): \"choices WORD...\", \"files\",")
    w("# \"dirs\" or \"none\" (a number); nothing for a flag.")
    w("_ckpt_tool_value() {")
    w('    case "$1 $2" in')
    for name, h in scopes:
        for e in h.options():
            kind = e.value_kind()
            if kind is None:
                continue
            if kind == "choices" and not all(SAFE_WORD.match(c) for c in e.choices()):
                print("cli_docs.py: warning: %s %s: values %s not completed (only letters, digits and _.+:@%%/-)"
                      % (name, e.names[-1], e.choices()), file=sys.stderr)
                kind = "none"
            value = "choices " + " ".join(e.choices()) if kind == "choices" else kind
            w("    %s) echo %s ;;" % ("|".join('"%s %s"' % (name, n) for n in e.names), value))
    w("    esac")
    w("}")
    w("")
    w(r'''# $1: what _ckpt_tool_value said, $2: the word so far, $3: what goes in front of each candidate.
_ckpt_tool_reply() {
    case $1 in
    choices\ *) mapfile -t COMPREPLY < <(compgen -P "$3" -W "${1#choices }" -- "$2") ;;
    files | dirs)
        compopt -o filenames 2>/dev/null  # a trailing / on directories (only inside real completion)
        if [[ $1 == dirs ]]; then
            mapfile -t COMPREPLY < <(compgen -P "$3" -d -- "$2")
        else
            mapfile -t COMPREPLY < <(compgen -P "$3" -f -- "$2")
        fi
        ;;
    esac
}

_ckpt_tool() {
    COMPREPLY=()
    local cword=$COMP_CWORD cur=${COMP_WORDS[COMP_CWORD]} prev="" word="" cmd="" opt="" lead="" value=""
    local i=1 positional_only=0
    ((cword > 0)) && prev=${COMP_WORDS[cword - 1]}
    # The command: the first word before the cursor that is neither an option nor an option's value.
    # bash splits `--color=never` into `--color`, `=`, `never`.
    while ((i < cword)); do
        word=${COMP_WORDS[i]}
        if [[ -n $cmd ]]; then
            [[ $word == -- ]] && positional_only=1
        elif [[ $word == -* ]]; then
            if [[ ${COMP_WORDS[i + 1]-} == = ]]; then
                ((i += 2))
            elif [[ $word != *=* && -n $(_ckpt_tool_value "" "$word") ]]; then
                ((i += 1))
            fi
        else
            cmd=$word
        fi
        ((i += 1))
    done

    # An option's value: `--opt VALUE`, `--opt=VALUE` (split at = or not, as COMP_WORDBREAKS says).
    if ((!positional_only)); then
        if [[ $cur == = && $prev == -* ]]; then
            opt=$prev cur=""
        elif [[ $prev == = ]] && ((cword >= 2)) && [[ ${COMP_WORDS[cword - 2]} == -* ]]; then
            opt=${COMP_WORDS[cword - 2]}
        elif [[ $cur == -*=* ]]; then
            opt=${cur%%=*} lead=${cur%%=*}= cur=${cur#*=}
        elif [[ $prev == -* && $prev != *=* ]]; then
            opt=$prev
        fi
        if [[ -n $opt ]]; then
            value=$(_ckpt_tool_value "$cmd" "$opt")
            if [[ -n $value ]]; then
                _ckpt_tool_reply "$value" "$cur" "$lead"
                return 0
            fi
        fi
        if [[ $cur == -* ]]; then
            mapfile -t COMPREPLY < <(compgen -W "$(_ckpt_tool_options "$cmd")" -- "$cur")
            return 0
        fi
    fi
    if [[ -z $cmd ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_ckpt_tool_commands)" -- "$cur")
        return 0
    fi
    _ckpt_tool_reply files "$cur" ""  # every positional argument is a file, an index or a directory
    return 0
}

complete -F _ckpt_tool ckpt-tool''')
    return "\n".join(out) + "\n"


# --- man page: help2man include ------------------------------------------------------------------

def roff_text(text, code=False):
    """Text for a roff line: backslashes escaped, options (and all of a code line) with real minus
    signs and options in bold, non-ASCII as groff's \\[uXXXX] (groff reads the bytes as Latin-1)."""
    out = text.replace("\\", "\\e")
    if code:
        out = out.replace("-", "\\-").replace("'", "\\(aq").replace("`", "\\(ga")
    else:
        out = re.sub(r"(?<![\w/.-])(--?[A-Za-z][\w-]*)", lambda m: "\\fB" + m.group(1).replace("-", "\\-") + "\\fR", out)
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in out)  # groff: 4 to 6 hex digits


def roff_line(line):
    """A line roff (or help2man's include reader: `[section]`, `/pattern/`) would take for a request."""
    special = line[:1] in (".", "'") or re.match(r"^\[.*\]\s*$|^/.*/[ims]*\s*$", line)
    return "\\&" + line if special else line


def tag(entry, positional):
    names = ", ".join(("\\fI%s\\fR" if positional else "\\fB%s\\fR") % roff_text(n, True) for n in entry.names)
    spec = " ".join(("\\fI%s\\fR" if t == entry.type_token else "%s") % roff_text(t, True) for t in entry.spec)
    return names + (" " + spec if spec else "")


def usage_line(usage):
    words = usage.split()
    cmd, rest = words[:2], words[2:]  # "ckpt-tool inspect", then "[OPTIONS] FILE"
    styled = [re.sub(r"([A-Z][A-Z_]*)", r"\\fI\1\\fR", roff_text(w, True)) for w in rest]
    return "\\fB%s\\fR %s" % (roff_text(" ".join(cmd), True), " ".join(styled))


def man_include(top, commands):
    out = ["A section for each command, from `%s COMMAND --help`: generated by tools/cli_docs.py." % PROGRAM, ""]
    w = out.append
    for name, h in commands.items():
        w("[%s %s]" % (PROGRAM, name))
        for line in h.description:
            w(roff_line(roff_text(line)))
        w(".PP")
        w(usage_line(h.usage))
        for b in h.blocks:
            if not isinstance(b, Block):
                w(".PP")
                w(roff_line(roff_text(b)))
                continue
            w(".SS %s" % b.title)
            if b.entries:
                for e in b.entries:
                    w(".TP")
                    w(tag(e, b.title == "Positionals"))
                    for line in e.description.split("\n"):
                        w(roff_line(roff_text(line)))
            else:
                w(".PP")
                w(".nf")
                w(".RS")
                for line in b.lines:
                    w(roff_line(roff_text(line[2:] if line.startswith("  ") else line, True)))
                w(".RE")
                w(".fi")
        w("")
    # groff's ASCII device (man in the C locale) lacks some characters: a fallback for each used, defined
    # (.fchar: only where the font has no glyph) at the top of the first section.
    used = sorted({chr(int(x, 16)) for line in out for x in re.findall(r"\\\[u([0-9A-F]{4,6})\]", line)})
    fallbacks = []
    for c in used:
        text = unicodedata.normalize("NFKD", c)
        text = text if text.isascii() and text.strip() else ASCII_FALLBACK.get(c)
        if text:
            fallbacks.append(".fchar \\[u%04X] %s" % (ord(c), text))
    first = next(i for i, line in enumerate(out) if line.startswith("["))
    return "\n".join(out[:first + 1] + fallbacks + out[first + 1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("completion", "man-include"))
    ap.add_argument("--tool", required=True)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    top, commands = read_tool(args.tool)
    text = completion_script(top, commands) if args.what == "completion" else man_include(top, commands)
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
