"""launch --worktree and rm: a git worktree on a new branch per agent, removed again without ever
losing work (a dirty worktree is refused, a branch with commits is kept). Real git repos, the demo agent."""
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from muxhost.testing import one_line_error

GIT_ENV = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "test@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo, *args) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env={**env, **GIT_ENV})
    assert p.returncode == 0, f"git {' '.join(args)}: {p.stderr}"
    return p.stdout.strip()


def branches(repo) -> set[str]:
    return set(git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split())


def worktrees(repo) -> list[str]:
    return [ln.split(" ", 1)[1] for ln in git(repo, "worktree", "list", "--porcelain").splitlines()
            if ln.startswith("worktree ")]


@pytest.fixture
def repo(tmp_path) -> Path:
    """tmp_path/proj: a git repo on main with one commit (README, src/app.py)."""
    r = tmp_path / "proj"
    (r / "src").mkdir(parents=True)
    (r / "README").write_text("hello\n")
    (r / "src" / "app.py").write_text("print('hi')\n")
    git(tmp_path, "init", "-q", "-b", "main", str(r))
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "first")
    return r


def conversation_file(mux, cid) -> Path:
    return mux.home / ".local/share/muxhost-demo/conversations" / f"{cid}.jsonl"


def launched(mux, repo, name="feat"):
    rec = mux.ok("launch", "demo", "--cwd", str(repo), "--worktree", name, "--json")
    mux.wait_screen(rec["pane"], "demo>")
    return rec




# -- launch --worktree ------------------------------------------------------------------------------
def test_launch_worktree_makes_the_folder_and_branch_and_runs_the_agent_there(mux, repo, tmp_path):
    head = git(repo, "rev-parse", "HEAD")
    rec = mux.ok("launch", "demo", "--cwd", str(repo / "src"), "--worktree", "feat", "--json")
    path = tmp_path / "proj-feat"  # beside the repo, named after it
    assert (path / "src" / "app.py").read_text() == "print('hi')\n"
    assert "feat" in branches(repo) and git(repo, "rev-parse", "feat") == head
    assert str(path) in worktrees(repo)
    assert git(path, "branch", "--show-current") == "feat"
    # the agent runs in the same folder of the worktree as --cwd was of the repo
    assert rec["cwd"] == str(path / "src")
    mux.wait_screen(rec["pane"], "demo>")
    assert psutil.Process(mux.pane_pid(rec["pane"])).cwd() == str(path / "src")
    want = {"path": str(path), "repo": str(repo), "branch": "feat", "base": head}
    assert rec["worktree"] == want
    [listed] = mux.ok("ls", "--json")
    assert listed["cwd"] == str(path / "src") and listed["worktree"] == want
    assert mux.ok("show", rec["id"], "--json")["worktree"] == want
    assert not git(repo, "status", "--porcelain")  # the main checkout is untouched


def test_the_worktree_root_comes_from_the_config(mux, repo):
    mux.config.write_text("worktree:\n  root: ~/trees\n")
    r = mux.run("launch", "demo", "--cwd", str(repo), "--worktree", "fix/login")
    assert r.rc == 0, r.err
    path = mux.home / "trees" / "proj-fix-login"  # ~ is the user's home; '/' in NAME becomes '-'
    assert f"worktree: {path} (branch fix/login)" in r.out
    assert (path / "README").is_file() and "fix/login" in branches(repo)


def test_a_bad_worktree_root_in_the_config_is_a_config_error(mux, repo):
    mux.config.write_text("worktree:\n  root: [a, b]\n")
    one_line_error(mux.run("launch", "demo", "--cwd", str(repo), "--worktree", "x"), 2, "line 2", "worktree.root")


@pytest.mark.parametrize("case", ["bad name", "not a repo", "branch exists", "folder exists", "no commit"])
def test_launch_worktree_refusals_are_one_line_and_create_nothing(mux, repo, tmp_path, case):
    cwd, name, needle = repo, "feat", ""
    if case == "bad name":
        name, needle = "bad..name", "not a valid branch name"
    elif case == "not a repo":
        cwd = tmp_path / "plain"
        cwd.mkdir()
        needle = "not inside a git repository"
    elif case == "branch exists":
        git(repo, "branch", "feat")
        needle = "branch 'feat' already exists"
    elif case == "folder exists":
        (tmp_path / "proj-feat").mkdir()
        (tmp_path / "proj-feat" / "mine.txt").write_text("keep me")
        needle = f"{tmp_path / 'proj-feat'} already exists"
    else:
        cwd = tmp_path / "fresh"
        git(tmp_path, "init", "-q", "-b", "main", str(cwd))
        needle = "has no commit yet"
    folders = lambda: sorted(set(os.listdir(tmp_path)) - {"state"})  # noqa: E731 (the record store's own)
    before = folders(), branches(repo), worktrees(repo)
    one_line_error(mux.run("launch", "demo", "--cwd", str(cwd), "--worktree", name), 2, needle)
    assert (folders(), branches(repo), worktrees(repo)) == before
    if case == "folder exists":
        assert (tmp_path / "proj-feat" / "mine.txt").read_text() == "keep me"
    assert mux.ok("ls", "--all", "--json") == []


@pytest.mark.parametrize("case", ["command not installed", "pane cannot start"])
def test_a_launch_that_fails_after_the_worktree_was_made_leaves_no_worktree_and_no_branch(mux, repo, tmp_path, case):
    agent, extra, code = "demo", [], 3
    if case == "command not installed":
        mux.config.write_text("agents:\n  nope:\n    command: [no-such-binary-for-muxhost]\n")
        agent, code = "nope", 1
    else:
        mux.server.cmd("new-session", "-d", "-s", "other")
        extra = ["--target", "no-such-session"]  # the pane cannot start: no such session on the server
    r = mux.run("launch", agent, "--cwd", str(repo), "--worktree", "feat", *extra)
    assert r.rc == code, (r.rc, r.err)
    assert not (tmp_path / "proj-feat").exists()
    assert branches(repo) == {"main"} and worktrees(repo) == [str(repo)]
    assert mux.ok("ls", "--all", "--json") == []


# -- rm ---------------------------------------------------------------------------------------------
def test_rm_refuses_a_running_record_and_removes_nothing(mux, repo, tmp_path):
    rec = launched(mux, repo)
    one_line_error(mux.run("rm", rec["id"], "--force"), 4, "running", "stop it first")
    assert (tmp_path / "proj-feat").is_dir() and "feat" in branches(repo)
    assert [r["id"] for r in mux.ok("ls", "--json")] == [rec["id"]]


def test_rm_of_a_stopped_record_removes_its_clean_worktree_its_branch_and_the_record(mux, repo, tmp_path):
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    r = mux.run("rm", rec["name"])
    assert r.rc == 0, r.err
    path = tmp_path / "proj-feat"
    assert r.out.splitlines() == [f"removed worktree {path}",
                                  f"deleted branch feat (it was at {rec['worktree']['base'][:12]}, where it started)",
                                  f"forgot record {rec['id']} ({rec['name']})"]
    assert not path.exists()
    assert branches(repo) == {"main"} and worktrees(repo) == [str(repo)]
    assert mux.ok("ls", "--all", "--json") == []
    assert conversation_file(mux, rec["conversation_id"]).is_file()  # no --purge: the conversation stays


@pytest.mark.parametrize("change", ["untracked", "modified", "staged"])
def test_rm_refuses_a_dirty_worktree_and_removes_nothing_not_even_with_purge(mux, repo, tmp_path, change):
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    path = tmp_path / "proj-feat"
    if change == "untracked":
        (path / "notes.txt").write_text("my notes")
        what = "1 untracked: notes.txt"
    elif change == "modified":
        (path / "README").write_text("edited\n")
        what = "1 changed: README"
    else:
        (path / "new.py").write_text("x = 1\n")
        git(path, "add", "new.py")
        what = "1 changed: new.py"
    conv = conversation_file(mux, rec["conversation_id"])
    conv_bytes = conv.read_bytes()
    r = mux.run("rm", rec["id"], "--purge")
    assert conv.is_file() and conv.read_bytes() == conv_bytes  # --purge purged nothing
    assert path.is_dir() and "feat" in branches(repo) and str(path) in worktrees(repo)
    assert [r["id"] for r in mux.ok("ls", "--all", "--json")] == [rec["id"]]
    if change == "untracked":
        assert (path / "notes.txt").read_text() == "my notes"
    one_line_error(r, 4, str(path), what, "nothing was removed")
    # --force: removed, changes and all (the branch has no commit: deleted too)
    done = mux.ok("rm", rec["id"], "--force", "--json")
    assert done["worktree"]["removed"] and done["branch"] == {"name": "feat", "deleted": True} and done["forgotten"]
    assert not path.exists() and branches(repo) == {"main"}
    assert mux.ok("ls", "--all", "--json") == []


def test_rm_keeps_a_branch_that_has_commits(mux, repo, tmp_path):
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    path = tmp_path / "proj-feat"
    (path / "feature.py").write_text("done = True\n")
    git(path, "add", "feature.py")
    git(path, "commit", "-q", "-m", "the feature")
    tip = git(path, "rev-parse", "HEAD")
    r = mux.run("rm", rec["id"])
    assert r.rc == 0, r.err
    assert "feat" in branches(repo) and git(repo, "rev-parse", "feat") == tip
    assert "branch feat kept: it has commits" in r.out
    assert not path.exists()  # the folder is clean (the work is in the commit): removed
    assert git(repo, "show", "feat:feature.py") == "done = True"
    assert mux.ok("ls", "--all", "--json") == []


def test_rm_purge_purges_the_records_conversation(mux, repo, tmp_path):
    rec = launched(mux, repo)
    mux.type(rec["pane"], "remember this")
    mux.wait_screen(rec["pane"], "siht rebmemer")
    mux.ok("stop", rec["id"])
    conv = conversation_file(mux, rec["conversation_id"])
    assert conv.is_file()
    done = mux.ok("rm", rec["id"], "--purge", "--json")
    assert [p["conversation_id"] for p in done["purged"]] == [rec["conversation_id"]]
    assert done["done"][0].startswith(f"purged demo conversation {rec['conversation_id']}: ")
    assert not conv.exists()
    assert "remember this" not in (mux.home / ".local/share/muxhost-demo/history.jsonl").read_text()
    assert not (tmp_path / "proj-feat").exists() and branches(repo) == {"main"}
    assert mux.ok("ls", "--all", "--json") == []


def test_rm_of_a_record_without_a_worktree_just_forgets_it(mux, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "file.txt").write_text("mine")
    rec = mux.ok("launch", "demo", "--cwd", str(work), "--json")
    assert rec["worktree"] is None
    mux.wait_screen(rec["pane"], "demo>")
    mux.ok("stop", rec["id"])
    r = mux.run("rm", rec["id"])
    assert r.rc == 0, r.err
    assert r.out.strip() == f"forgot record {rec['id']} ({rec['name']})"
    assert (work / "file.txt").read_text() == "mine"
    assert conversation_file(mux, rec["conversation_id"]).is_file()
    assert mux.ok("ls", "--all", "--json") == []
    one_line_error(mux.run("rm", rec["id"]), 3, "no record matches")


def test_rm_of_a_worktree_removed_by_hand_still_cleans_up_the_branch(mux, repo, tmp_path):
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    shutil.rmtree(tmp_path / "proj-feat")
    r = mux.run("rm", rec["id"])
    assert r.rc == 0, r.err
    assert f"worktree {tmp_path / 'proj-feat'} was already gone" in r.out
    assert branches(repo) == {"main"} and worktrees(repo) == [str(repo)]
    assert mux.ok("ls", "--all", "--json") == []


def test_rm_refuses_an_asleep_record(mux, repo, tmp_path):
    rec = launched(mux, repo)
    mux.type(rec["pane"], "hello")  # a conversation on disk: it can sleep
    mux.wait_screen(rec["pane"], "olleh")
    mux.ok("sleep", rec["id"])
    one_line_error(mux.run("rm", rec["id"], "--force"), 4, "asleep", "stop it first")
    assert (tmp_path / "proj-feat").is_dir() and "feat" in branches(repo)
    assert [r["id"] for r in mux.ok("ls", "--json")] == [rec["id"]]


def test_rm_waits_for_a_resume_under_way_and_then_keeps_what_it_started(mux, repo, tmp_path):
    """A resume holds the conversation's lock until its pane runs; rm waits for it, sees the record
    started again, and removes nothing: no worktree pulled from under a running agent."""
    rec = launched(mux, repo)
    mux.type(rec["pane"], "hello")
    mux.wait_screen(rec["pane"], "olleh")
    mux.ok("stop", rec["id"])
    with mux.resume_under_way(rec["id"]):
        r = mux.run("rm", rec["id"])
    one_line_error(r, 4, "changed meanwhile", "kept")
    assert (tmp_path / "proj-feat").is_dir() and "feat" in branches(repo)
    assert [r["id"] for r in mux.ok("ls", "--all", "--json")] == [rec["id"]]


def test_rm_refuses_a_worktree_whose_commits_are_on_no_branch(mux, repo, tmp_path):
    """Commits made on a detached HEAD have no name but the worktree's HEAD: removing the worktree
    would lose them. Refused (nothing removed) until they are on a branch, or with --force."""
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    path = tmp_path / "proj-feat"
    git(path, "checkout", "-q", "--detach")
    (path / "work.txt").write_text("an afternoon's work\n")
    git(path, "add", "work.txt")
    git(path, "commit", "-q", "-m", "work")
    sha = git(path, "rev-parse", "HEAD")
    one_line_error(mux.run("rm", rec["id"]), 4, sha[:12], "on no branch", "nothing was removed")
    assert path.is_dir() and "feat" in branches(repo)
    assert [r["id"] for r in mux.ok("ls", "--all", "--json")] == [rec["id"]]
    git(path, "branch", "keep")  # on a branch now: rm goes ahead, and the branch keeps the commit
    assert mux.run("rm", rec["id"]).rc == 0
    assert not path.exists() and git(repo, "rev-parse", "keep") == sha


def test_rm_refuses_while_a_process_of_the_record_is_left_and_removes_nothing(mux, repo, tmp_path):
    """A detached process of the record (its MUXHOST_RECORD, out of any pane) may be working in the
    worktree: rm refuses until `stop` ended it."""
    import sys

    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                            env={**mux.env, "MUXHOST_RECORD": rec["id"]}, cwd=tmp_path / "proj-feat")
    try:
        one_line_error(mux.run("rm", rec["id"]), 4, f"pid {left.pid}", "nothing was removed")
        assert (tmp_path / "proj-feat").is_dir() and "feat" in branches(repo)
        mux.ok("stop", rec["id"])
        left.wait(timeout=10)
        assert mux.run("rm", rec["id"]).rc == 0 and not (tmp_path / "proj-feat").exists()
    finally:
        if left.poll() is None:
            left.kill()


def _commit_in_repo(repo, message):
    """A commit on top of main made without touching any checkout (``git commit-tree``)."""
    return git(repo, "commit-tree", "-p", "main", "-m", message, git(repo, "rev-parse", "main^{tree}"))


@pytest.mark.parametrize("reflog", ["reset", "worktree HEAD", "branch"])
def test_rm_refuses_a_worktree_whose_commit_only_a_reflog_names(mux, repo, tmp_path, reflog):
    """A commit made in the worktree and then reset away (`git reset --hard HEAD~1`) has no name
    left but the worktree HEAD's reflog and the branch's; the branch, back at its base, would be
    deleted and the worktree removed, reflogs and all. Refused (nothing removed), with how to keep it."""
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    path = tmp_path / "proj-feat"
    if reflog != "branch":
        if reflog == "worktree HEAD":  # committed on a detached HEAD, then back on the branch
            git(path, "checkout", "-q", "--detach")
        (path / "work.txt").write_text("an afternoon's work\n")
        git(path, "add", "work.txt")
        git(path, "commit", "-q", "-m", "work")
        sha = git(path, "rev-parse", "HEAD")
        if reflog == "reset":  # both reflogs name it
            git(path, "reset", "-q", "--hard", "HEAD~1")
        else:  # only the worktree HEAD's
            git(path, "checkout", "-q", "feat")
            assert sha not in git(repo, "log", "-g", "--format=%H", "feat")
    else:  # moved there and back from the main checkout: only the branch's reflog names it
        sha = _commit_in_repo(repo, "work")
        git(repo, "update-ref", "-m", "there", "refs/heads/feat", sha)
        git(repo, "update-ref", "-m", "back", "refs/heads/feat", rec["worktree"]["base"])
        assert sha not in git(path, "log", "-g", "--format=%H", "HEAD")
    assert git(repo, "rev-parse", "feat") == rec["worktree"]["base"] and not git(path, "status", "--porcelain")
    r = mux.run("rm", rec["id"])
    one_line_error(r, 4, str(path), sha[:12], f"git -C {repo} branch keep {sha}", "nothing was removed")
    assert path.is_dir() and "feat" in branches(repo) and str(path) in worktrees(repo)
    assert [x["id"] for x in mux.ok("ls", "--all", "--json")] == [rec["id"]]
    git(repo, "branch", "keep", sha)  # as the message says: rm goes ahead, and the commit keeps its name
    assert mux.run("rm", rec["id"]).rc == 0
    assert not path.exists() and "feat" not in branches(repo) and git(repo, "rev-parse", "keep") == sha


@pytest.mark.parametrize("ignored", [True, False])
def test_rm_refuses_a_worktree_that_holds_another_repository(mux, repo, tmp_path, ignored):
    """A repository inside the worktree (a clone the agent made; ignored by the worktree's git or
    committed as a gitlink, so `git status` is clean) has a history of its own that removing the
    folder would take. Refused (nothing removed) until it is moved out, or with --force."""
    rec = launched(mux, repo)
    mux.ok("stop", rec["id"])
    path = tmp_path / "proj-feat"
    inner = path / "vendor" / "lib"
    inner.mkdir(parents=True)
    git(tmp_path, "init", "-q", "-b", "main", str(inner))
    (inner / "x.py").write_text("x = 1\n")
    git(inner, "add", "x.py")
    git(inner, "commit", "-q", "-m", "the only copy")
    if ignored:
        (path / ".gitignore").write_text("vendor/\n")
        git(path, "add", ".gitignore")
    else:
        git(path, "add", "vendor/lib")  # a gitlink: the inner repository's commit, not its history
    git(path, "commit", "-q", "-m", "vendor")
    assert not git(path, "status", "--porcelain")
    r = mux.run("rm", rec["id"])
    one_line_error(r, 4, str(path), str(inner), "move it out", "nothing was removed")
    assert git(inner, "log", "--format=%s") == "the only copy"
    assert str(path) in worktrees(repo) and [x["id"] for x in mux.ok("ls", "--all", "--json")] == [rec["id"]]
    shutil.move(str(inner), str(tmp_path / "lib"))  # moved out: rm goes ahead
    if not ignored:
        git(path, "rm", "-q", "--cached", "vendor/lib")
        git(path, "commit", "-q", "-m", "no vendor")
    r = mux.run("rm", rec["id"])
    assert r.rc == 0, r.err
    assert not path.exists() and git(tmp_path / "lib", "log", "--format=%s") == "the only copy"
