"""Running the agent's own program for a purge step (``codex delete --force ID``, ``opencode session
delete ID``): with the agent's environment and HOME, never as one of the record's processes, never
waiting forever, never raising because the program failed.

    result = command.run(ctx, [ctx.find_binary("opencode"), "session", "delete", cid], timeout=60)
    if not result.ok:
        ctx.notes.append(f"`opencode session delete` {result.why}: removed the rows with SQL")
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    from muxhost.agent import AgentContext

__all__ = ["Result", "run", "reason"]


@dataclass
class Result:
    """How a command ended: ``returncode`` (None when it could not run or timed out), its output,
    and ``error`` (why it could not run)."""

    argv: list[str]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def why(self) -> str:
        """One line for a note: ``exited 1 (Error: no such session)``, ``could not run (…)``."""
        if self.returncode is None:
            return f"could not run ({self.error})"
        if self.ok:
            return "exited 0"
        return f"exited {self.returncode} ({reason(self.stderr) or reason(self.stdout) or 'no output'})"


def reason(text: str, limit: int = 200) -> str:
    """The line of ``text`` that says what went wrong: the first line starting with ``error``
    (any case), else the last line that is not a backtrace frame; ``""`` for no text."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    if errors:
        return errors[0][:limit]
    plain = [ln for ln in lines if not re.match(r"(\d+:|at |Stack backtrace|Traceback|File \")", ln)]
    return plain[-1][:limit] if plain else ""


def run(ctx: "AgentContext", argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout: float = 60.0, cwd: str | None = None) -> Result:
    """Run ``argv`` (a list, never a shell string) to completion, at most ``timeout`` seconds.

    It runs with the agent's environment (``ctx.env``) and HOME (``ctx.home``), plus ``env``;
    without ``MUXHOST_RECORD``, so that a stop of the record never takes it for one of its
    processes, and without ``PWD``, so that it takes its directory from ``cwd``: ``ctx.cwd`` when
    that still exists, else the agent's HOME. Its stdin is empty; it runs in a session of its own,
    and at the deadline that session's process group is killed. Never raises for the command's
    failure: see :attr:`Result.ok` and :attr:`Result.why`."""
    from muxhost.procs import RECORD_ENV

    argv = [str(a) for a in argv]
    full = {k: v for k, v in (ctx.env or os.environ).items() if k not in (RECORD_ENV, "PWD")}
    full["HOME"] = str(ctx.home)
    full.update(env or {})
    where = cwd or next((d for d in (ctx.cwd, ctx.home) if d and os.path.isdir(d)), "/")
    try:
        p = subprocess.Popen(argv, env=full, cwd=where, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    except (OSError, subprocess.SubprocessError) as e:
        return Result(argv, None, error=f"{type(e).__name__}: {e}")
    with p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # its own session: what it started goes with it
            except OSError:
                pass
            p.wait()
            return Result(argv, None, error=f"timed out after {timeout:g}s")
    return Result(argv, p.returncode, out, err)
