"""The one surface for plugin authors (issue 19, item 5): ``muxhost.api`` has what a plugin needs,
the in-tree plugins import nothing else of muxhost, and the id check is the host's.

In-process and quick: source parsed with ``ast``, fresh interpreters only where what is imported
at start-up is the question."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import muxhost
from muxhost import api, plans
from muxhost.agent import AgentContext
from muxhost.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {"muxhost.api"}


def plugin_sources() -> list[Path]:
    """Every module of the in-tree plugins: plugins/*/muxhost_*/ and the built-in demo agent."""
    found = sorted(ROOT.glob("plugins/*/muxhost_*/**/*.py")) + [ROOT / "muxhost/plugins/demo.py"]
    assert len({p.parts[len(ROOT.parts) + 1] for p in found if p.parts[len(ROOT.parts)] == "plugins"}) >= 4
    return found


def muxhost_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a muxhost module in ``path``, at any depth (function-local
    ones too); ``from muxhost import x`` counts as ``muxhost.x``, ``import muxhost`` as ``muxhost``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "muxhost"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "muxhost":
            if node.module == "muxhost":
                out += [(node.lineno, f"muxhost.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("path", plugin_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_an_in_tree_plugin_imports_only_muxhost_api(path):
    wrong = [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in muxhost_imports(path) if name not in ALLOWED]
    assert not wrong, "plugins import muxhost.api only:\n" + "\n".join(wrong)


def test_the_meta_test_sees_every_kind_of_import(tmp_path):
    src = tmp_path / "p.py"
    src.write_text("import muxhost\nimport muxhost.procs as p\nfrom muxhost import procs, api\n"
                   "from muxhost.kit import sqlite\nfrom muxhost.api import kit\nfrom . import activity\n"
                   "def f():\n    from muxhost.errors import NotFound\n")
    assert sorted(n for _l, n in muxhost_imports(src) if n not in ALLOWED) == [
        "muxhost", "muxhost.errors", "muxhost.kit", "muxhost.procs", "muxhost.procs"]


def test_every_name_of_the_api_is_there_and_muxhost_has_them_too():
    assert set(api.__all__) >= {"Agent", "AgentContext", "Launch", "PurgeReport", "hookimpl", "artifacts", "kit",
                                "MuxhostError", "UsageError", "NotFound", "Refused", "PurgeIncomplete",
                                "Backend", "PaneInfo", "launch_file"}
    for name in api.__all__:
        assert getattr(api, name) is getattr(muxhost, name), name
    assert muxhost.hookimpl is api.hookimpl  # one marker
    assert api.artifacts.File and api.kit.sqlite.rows and api.kit.holders.holders and api.kit.jsonl.tail
    with pytest.raises(AttributeError):
        api.procs  # noqa: B018  (a host module is not part of the surface)
    with pytest.raises(AttributeError):
        muxhost.NoSuchName  # noqa: B018


def test_importing_muxhost_or_the_api_loads_nothing_else():
    code = ("import sys, muxhost, muxhost.api; from muxhost import api; "
            "print(sorted(m for m in sys.modules if m.startswith('muxhost')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['muxhost', 'muxhost.api']"
    code = "import sys; from muxhost.api import Agent, kit; print('muxhost.kit.sqlite' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_the_id_check_is_the_hosts_a_plugin_cannot_override_it():
    with pytest.raises(TypeError, match="id_pattern"):
        class Lenient(api.Agent):  # noqa: F841
            name = "lenient"

            def valid_id(self, conversation_id):
                return True

    class Strict(api.Agent):
        name = "strict"
        id_pattern = r"s[0-9]{3}"

    agent = Strict()
    assert agent.valid_id("s123") and not agent.valid_id("s1234") and not agent.valid_id("../s123")
    assert not agent.valid_id(None) and not agent.valid_id(["s123"])


def test_the_demo_plugin_knows_its_program_s_words(tmp_path):
    from muxhost import demo_agent
    from muxhost.plugins import demo

    for name in ("ID_PATTERN", "PROMPT", "WORKING", "ASK", "HELPER"):
        assert getattr(demo, name) == getattr(demo_agent, name), name


# -- an older plugin's strings take the one purge path --------------------------------------------
class Old(api.Agent):
    """Strings from ``artifacts`` and its own ``purge``, as plugins did before typed artifacts."""

    name = "old"
    id_pattern = r"[a-z0-9]{1,16}"

    def __init__(self, files: dict[str, list[Path]], kids=None, purges=True):
        self.files, self.kids, self.purges, self.calls = files, kids or {}, purges, []

    def children(self, ctx, cid):
        return self.kids.get(cid, [])

    def artifacts(self, ctx, cid):
        return [ctx.expand(p) for p in self.files.get(cid, []) if p.exists()]

    def purge(self, ctx, cid):
        if not self.purges:
            return super().purge(ctx, cid)
        self.calls.append(cid)
        gone = []
        for member in plans.family(self, ctx, cid):
            for p in self.files.get(member, []):
                if p.exists() and not p.name.startswith("keep"):
                    p.unlink()
                    gone.append(ctx.expand(p))
        return gone


def test_an_older_plugins_strings_are_planned_carried_out_once_and_asked_again(tmp_path):
    ctx = AgentContext(home=str(tmp_path), cwd=str(tmp_path))
    files = {c: [tmp_path / f"{c}.txt"] for c in ("c1", "k1")}
    files["c1"].append(tmp_path / "keep-c1.txt")  # one its purge leaves: the residual
    for ps in files.values():
        for p in ps:
            p.write_text("x")
    agent = Old(files, kids={"c1": ["k1"]})
    members = plans.family(agent, ctx, "c1")
    items = plans.plan(agent, ctx, members)
    assert plans.labels(items) == ["~/c1.txt", "~/keep-c1.txt", "~/k1.txt [child conversation k1]"]
    ran = plans.carry_out(items, ctx, [])
    assert agent.calls == ["c1"] and ran == ["~/c1.txt", "~/k1.txt"]  # its purge, once, for the root
    assert plans.labels(plans.plan(agent, ctx, members)) == ["~/keep-c1.txt"]
    with pytest.raises(UsageError, match="cannot purge"):
        plans.carry_out(plans.plan(Old(files, purges=False), ctx, ["c1"]), ctx, [])


def test_the_authors_section_is_short_and_its_example_uses_only_the_api(tmp_path):
    text = (ROOT / "docs/plugins.md").read_text()
    section = text.split("\n## ", 1)[0]
    assert len(section.splitlines()) <= 80 and "minimum safe plugin" in section
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    example = tmp_path / "muxhost_myagent.py"
    example.write_text(block)
    assert {name for _l, name in muxhost_imports(example)} == ALLOWED
    names = {}
    exec(compile(block, str(example), "exec"), names)  # noqa: S102  (the example defines a real Agent)
    assert names["MyAgent"]().valid_id("0" * 32)
    for word in ("Agent", "AgentContext", "Launch", "PurgeReport", "artifacts", "kit", "Proc", "ProcessTable",
                 "same_process", "RECORD_ENV", "hookimpl"):
        assert f"`{word}`" in section and word in api.__all__, word
