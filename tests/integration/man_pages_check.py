#!/usr/bin/env python3
"""The man pages and `uroce help` against the command lines as CLI11 defines
them (issue: they drifted): every option of every uroce command (its
`uroce help CMD`) is in uroce.1 and in the overview `uroce help`; every
uroced option (`uroced --help`) is in uroced.8; and no option a page names
is unknown to the program.

  man_pages_check.py UROCE UROCED MAN_DIR
"""
import re
import subprocess
import sys

uroce, uroced, man_dir = sys.argv[1:4]
failures = 0


def bad(msg):
    global failures
    failures += 1
    print("FAIL " + msg)


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout


def options(help_text):
    """--long options of a CLI11 help (its Options: section)."""
    found = set()
    section = help_text.split("Options:", 1)[-1] if "Options:" in help_text else ""
    for line in section.splitlines():
        m = re.match(r"\s+(?:-\w,)?((?:--[\w-]+,?)+)", line)
        if m:
            found.update(o for o in m.group(1).split(",") if o)
    found.discard("--help")
    return found


def man_options(path):
    text = re.sub(r"\\f[BIRP]", "", open(path).read()).replace("\\-", "-")
    return text, set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text))


overview = run(uroce, "help")
commands = re.findall(r"^  (\w+)\b", overview.split("Commands:", 1)[1], re.M)
man1, man1_opts = man_options(f"{man_dir}/uroce.1")
known = {"--runtime-dir", "--version", "--help"}
for cmd in commands:
    if cmd == "help":
        continue
    if not re.search(rf"^\.BR? {cmd}\b", man1, re.M):
        bad(f"uroce.1 has no entry for the command {cmd}")
    opts = options(run(uroce, "help", cmd))
    known |= opts
    entry = re.search(rf"^  {cmd}\b.*?(?=^  \w|\Z)", overview, re.M | re.S)
    for opt in sorted(opts):
        if opt not in man1_opts:
            bad(f"uroce.1 does not mention {opt} of 'uroce {cmd}'")
        if not entry or opt not in entry.group(0):
            bad(f"'uroce help' does not mention {opt} of 'uroce {cmd}'")
# uroce.1 may name uroced's options where it says they are passed on.
uroced_opts = options(run(uroced, "--help"))
for opt in sorted(man1_opts - known - uroced_opts):
    bad(f"uroce.1 names {opt}, which no uroce command has")

man8, man8_opts = man_options(f"{man_dir}/uroced.8")
for opt in sorted(uroced_opts - man8_opts):
    bad(f"uroced.8 does not mention {opt}")
for opt in sorted(man8_opts - uroced_opts):
    bad(f"uroced.8 names {opt}, which uroced does not have")
print(f"man pages: {len(commands)} commands, {len(known)} uroce and {len(uroced_opts)} uroced options checked; "
      + ("all agree" if not failures else f"{failures} differ"))
sys.exit(1 if failures else 0)
