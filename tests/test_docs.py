"""The documentation's examples against the real parser: every `muxhost …` line in a code block of
the README and of docs/ parses (a renamed or removed flag fails here, not in a user's terminal)."""
import re
import shlex
from pathlib import Path

import pytest

from muxhost.cli import build_parser
from muxhost.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples(page: Path):
    """(line number, argv after `muxhost`) for each command line of each fenced code block."""
    fence = None
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence is None or fence not in ("", "sh", "bash", "console", "shell"):
            continue
        assert not line.rstrip().endswith("\\"), f"{page.name} line {n}: a continued line is not checked; join it"
        lex = shlex.shlex(re.sub(r"^\s*(\$ )?", "", line), posix=True, punctuation_chars=True)
        lex.whitespace_split, lex.commenters = True, "#"
        try:
            words = list(lex)
        except ValueError:  # not a shell line (output shown in the block)
            continue
        command: list[str] = []
        for w in [*words, ";"]:
            if w and set(w) <= set("&|;<>()"):  # an operator ends a command
                if command[:1] == ["muxhost"]:
                    yield n, command[1:]
                command = []
            else:
                command.append(w)


CASES = [(page, n, argv) for page in PAGES for n, argv in examples(page)]


def test_every_flag_the_cli_reference_names_exists():
    """Each row of docs/cli.md's command table names the command and its flags: every one of them is
    a flag of that command (a renamed flag fails here, whatever the examples show)."""
    import argparse

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    table = re.findall(r"^\| `([a-z-]+)([^`]*)`", (ROOT / "docs" / "cli.md").read_text(), re.M)
    checked = 0
    for cmd, rest in table:
        assert cmd in subs, f"docs/cli.md names a command {cmd!r} muxhost does not have"
        for flag in re.findall(r"--[a-z][a-z-]*", rest.split(" -- ")[0]):
            assert flag in subs[cmd]._option_string_actions, f"docs/cli.md: `{cmd}` has no flag {flag}"
            checked += 1
    assert checked >= 30, checked


def test_the_pages_have_examples():
    assert len(CASES) >= 15, [(p.name, n) for p, n, _ in CASES]


@pytest.mark.parametrize("page, line, argv", CASES, ids=[f"{p.name}:{n}" for p, n, _ in CASES])
def test_every_muxhost_line_parses(page, line, argv):
    try:
        build_parser().parse_args(argv)
    except UsageError as e:
        pytest.fail(f"{page.name} line {line}: muxhost {shlex.join(argv)}: {e}")
    except SystemExit as e:  # --help, --version
        assert e.code == 0, f"{page.name} line {line}: muxhost {shlex.join(argv)} exits {e.code}"


def quick_start() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Quick start"):]
    block = block[block.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    out = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["muxhost"]:
            out.append(words[1:])
    return out


def test_the_quick_start_works_line_by_line_in_that_order(mux):
    steps = quick_start()
    assert len(steps) >= 8 and steps[0][0] == "launch"
    for argv in steps:
        r = mux.run(*argv)
        assert r.rc == 0, f"muxhost {shlex.join(argv)} exited {r.rc}: {r.err or r.out}"
        if argv[0] == "send":  # (a person reads the answer before going on)
            mux.wait_screen(mux.ok("show", argv[1], "--json")["pane"], argv[2][::-1])
    assert mux.ok("ls", "--all", "--json")[-1]["resumable"] is False  # purged
