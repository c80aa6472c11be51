"""The contract suite catches broken plugins (issue 10, item 4).

``muxhost-mini`` is a small but correct plugin with typed artifacts for the demo program. Three
copies of it are broken on purpose, one line each: its purge also deletes a neighbour conversation;
its ``in_use`` always says free; it forgets the child conversations. Each copy is pip-installed on
its own and the contract suite (``muxhost.testing.AgentContract``) runs against it in a
``python -m pytest -p muxhost.testing`` of its own, all four at once: the correct copy passes every
test of the suite, and each broken copy fails the test that guards what it broke, for that reason
(the suite's message names it). A broken copy runs only that test: the rest would pass as they do
for the correct copy, at four times the cost.
"""
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from muxhost.testing import AgentContract, install_plugin

pytestmark = pytest.mark.tmux  # the suites it runs (in pytests of their own) start tmux servers and agents

MINI = textwrap.dedent('''
    """muxhost-mini: the demo program (muxhost.demo_agent) as a small plugin with typed artifacts."""
    import json
    import os
    import sys
    import uuid

    import muxhost
    from muxhost.api import kit
    from muxhost.artifacts import File, Lines

    PROGRAM = [sys.executable, "-m", "muxhost.demo_agent"]


    class Mini(muxhost.Agent):
        name = "mini"
        id_pattern = r"[0-9a-f]{32}"

        def _root(self, ctx):
            return ctx.data_home() / "muxhost-demo"

        def _conv(self, ctx, cid):
            return self._root(ctx) / "conversations" / f"{cid}.jsonl"

        def _metas(self, ctx):
            """{conversation id: its first line} for every conversation on disk."""
            out = {}
            for path in (self._root(ctx) / "conversations").glob("*.jsonl"):
                try:
                    out[path.stem] = json.loads(path.read_text().splitlines()[0])
                except (OSError, ValueError, IndexError):
                    continue
            return out

        def launch(self, ctx):
            cid = uuid.uuid4().hex
            return muxhost.Launch([*PROGRAM, "--id", cid], conversation_id=cid)

        def resume(self, ctx, cid):
            return muxhost.Launch([*PROGRAM, "--resume", cid], conversation_id=cid)

        def exists(self, ctx, cid):
            return self._conv(ctx, cid).is_file()

        def in_use(self, ctx, cid):
            return super().in_use(ctx, cid)  # every process whose argv names the id

        def children(self, ctx, cid):
            return sorted(c for c, meta in self._metas(ctx).items() if meta.get("parent") == cid)

        def conversations(self, ctx):
            metas = self._metas(ctx)

            def describe(path, entries):
                first = next((e.get("text") for e in entries if e.get("type") == "user"), "")
                return {"cwd": metas.get(path.stem, {}).get("cwd"), "title": kit.conversations.title(first),
                        "children": sorted(c for c, m in metas.items() if m.get("parent") == path.stem)}

            return list(kit.conversations.folder(self._root(ctx) / "conversations", describe))

        def artifacts(self, ctx, cid):
            return [File(self._conv(ctx, cid)),
                    Lines(self._root(ctx) / "history.jsonl", key="conversation", value=cid)]


    @muxhost.hookimpl
    def muxhost_register_agents(register):
        register(Mini())
''')

# each broken copy: MINI with one edit
BROKEN = {
    # "the conversations of this project": the neighbour's file goes too
    "deletes_the_neighbour": (
        "        return [File(self._conv(ctx, cid)),\n",
        "        return [File(self._conv(ctx, cid)),\n"
        "                *(File(self._conv(ctx, c)) for c, m in self._metas(ctx).items()\n"
        "                  if m.get('cwd') == os.path.realpath(ctx.cwd)),\n"),
    "in_use_always_free": (
        "        return super().in_use(ctx, cid)  # every process whose argv names the id\n",
        "        return []\n"),
    "forgets_the_children": (
        "        return sorted(c for c, meta in self._metas(ctx).items() if meta.get(\"parent\") == cid)\n",
        "        return []\n"),
    # a `conversations` that lists nothing on disk (the default's answer)
    "lists_nothing": (
        "        return list(kit.conversations.folder(self._root(ctx) / \"conversations\", describe))\n",
        "        return []\n"),
}

# the test that guards what each copy broke, and what its failure says
GUARDS = {
    "deletes_the_neighbour": ("test_purge_keeps_the_neighbour_byte_for_byte", ["[neighbour]", "is gone"]),
    "in_use_always_free": ("test_purge_refuses_while_resumed_outside_muxhost",
                           ["[in use]", "exited 0, not 4", "in_use() did not see it"]),
    "forgets_the_children": ("test_purge_takes_the_child_conversations",
                             ["[children]", "the plan does not name"]),
    "lists_nothing": ("test_conversations_lists_what_the_agent_wrote", ["[conversations]", "is not listed"]),
}
COPIES = ["correct", *GUARDS]

SUITE = textwrap.dedent('''
    import json

    from muxhost.testing import AgentContract, wait_for

    PLUGIN_ENV = json.loads({env!r})


    class TestMiniContract(AgentContract):
        agent = "mini"
        agent_cli = False
        has_children = True

        def prepare(self, mux):
            mux.env.update(PLUGIN_ENV)  # load this copy of muxhost-mini, and only it

        def converse(self, mux, pane, text):
            mux.wait_screen(pane, "demo>")
            mux.type(pane, text)
            mux.wait_screen(pane, text[::-1])

        def spawn_child(self, mux, pane, text):
            mux.type(pane, f"/child {{text}}")
            wait_for(lambda: "child conversation" in mux.capture(pane).split(f"/child {{text}}")[-1],
                     what="the child conversation")
''')

CONTRACT_TESTS = sorted(n for n in dir(AgentContract) if n.startswith("test_"))


def _copy(name: str) -> str:
    if name == "correct":
        return MINI
    old, new = BROKEN[name]
    assert MINI.count(old) == 1, f"the {name} copy no longer applies to muxhost-mini"
    return MINI.replace(old, new)


def _run_suite(folder: Path, env: dict[str, str], only: str | None = None) -> dict[str, tuple[str, str]]:
    """Run the contract suite (or its test ``only``) for one installed copy: ``{test name: (outcome,
    message)}``."""
    test_file = folder / "test_mini_contract.py"
    test_file.write_text(SUITE.format(env=json.dumps(env)))
    xml = folder / "results.xml"
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "muxhost.testing",
                        f"--junitxml={xml}", f"--basetemp={folder / 'tmp'}", str(test_file),
                        *(["-k", only] if only else [])],
                       cwd=folder, env=run_env, capture_output=True, text=True, timeout=600)
    assert xml.exists(), f"the suite did not run:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    results = {}
    for case in ET.parse(xml).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, (child.get("message") or "") + "\n" + (child.text or "")
        results[case.get("name")] = (outcome, message)
    return results


@pytest.fixture(scope="module")
def suite_runs(tmp_path_factory) -> dict[str, dict[str, tuple[str, str]]]:
    """Every copy installed (as its own package, in its own folder) and its suite run, all at once."""
    folders = {name: tmp_path_factory.mktemp(name) for name in COPIES}
    with ThreadPoolExecutor(len(COPIES)) as pool:
        envs = dict(zip(COPIES, pool.map(
            lambda n: install_plugin(folders[n], "muxhost-mini", "muxhost_mini", _copy(n)), COPIES)))
        runs = pool.map(lambda n: _run_suite(folders[n], envs[n], GUARDS.get(n, (None,))[0]), COPIES)
        return dict(zip(COPIES, runs))


def test_the_correct_plugin_passes_the_whole_suite(suite_runs):
    results = suite_runs["correct"]
    assert sorted(results) == CONTRACT_TESTS, f"the suite ran {sorted(results)}"
    failed = {name: message for name, (outcome, message) in results.items() if outcome != "passed"
              and not (name == "test_activity_answers_each_recorded_state" and "has no activity hook" in message)}
    assert not failed, "\n".join(f"--- {n}\n{m[:1500]}" for n, m in failed.items())


@pytest.mark.parametrize("copy", list(GUARDS))
def test_the_suite_fails_a_broken_plugin(suite_runs, copy):
    test, says = GUARDS[copy]
    outcome, message = suite_runs[copy].get(test, ("not run", ""))
    assert outcome == "failure", f"{copy}: {test} ended {outcome}, the suite did not catch it:\n{message[:1500]}"
    assert all(s in message for s in says), f"{copy}: {test} failed, but not saying {says}:\n{message[:1500]}"
