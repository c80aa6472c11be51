"""A real sshd on 127.0.0.1 and a second local user for the remote-host tests (tests/test_remote*.py).

The sshd runs with its own host key and config in a temp folder (never the system's), on a free
port, accepting one key made for the test; the remote user has its own HOME, state folder and tmux
server, and runs this checkout's muxhost (the test venv's python -m muxhost). Needs root (useradd,
sshd), OpenSSH and a checkout other users may read: a test skips with the reason otherwise, and fails
with it in CI (``CI=true``), which provides all of them (.ci/run runs as root, ./dev installs OpenSSH).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path


from muxhost.testing import missing  # (a failure in CI, a skip elsewhere)

SSHD = "/usr/sbin/sshd"
# the account tools live in sbin, which a scrubbed PATH (CI's, cron's) may not name
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _tool(name: str) -> str | None:
    return shutil.which(name, path=SBIN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_root() -> None:
    if os.geteuid() != 0:
        missing("the remote-host tests need root (a second local user, an sshd); CI runs as root")
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        missing("openssh-server and openssh-client are not installed (./dev test installs them as root)")
    for tool in ("useradd", "userdel", "setpriv"):
        if not _tool(tool):
            missing(f"no {tool} on this machine")


def readable_by_all(path: Path) -> None:
    """Each folder from / to ``path`` lets others in (the remote user runs this checkout's code)."""
    for p in [path, *path.parents]:
        st = p.stat()
        if not st.st_mode & stat.S_IXOTH:
            missing(f"{p} is not open to other users: the remote user could not run this checkout "
                    "(clone it, and make the venv, where others may read)")


class Sshd:
    """One sshd, started by :meth:`start`, ended by pid in :meth:`stop`."""

    def __init__(self, root: Path, user: str, client_key: Path, password_only: bool = False,
                 listen: tuple[str, ...] = ("127.0.0.1",)):
        self.root, self.user, self.port = root, user, free_port()
        self.host_key = root / "host_key"
        if not self.host_key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)], check=True)
        self.config = root / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\n" + "".join(f"ListenAddress {a}\n" for a in listen) + f"HostKey {self.host_key}\nPidFile {root}/sshd.pid\n"
            f"AuthorizedKeysFile {'.ssh/authorized_keys' if not password_only else 'none'}\nStrictModes no\nUsePAM no\n"
            f"PasswordAuthentication {'yes' if password_only else 'no'}\nKbdInteractiveAuthentication no\n"
            f"PubkeyAuthentication {'no' if password_only else 'yes'}\nAllowUsers {user}\n"
            "PermitRootLogin no\nAcceptEnv none\nMaxSessions 100\nMaxStartups 100\nLogLevel ERROR\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Sshd":
        listen = [line.split()[1] for line in self.config.read_text().splitlines() if line.startswith("ListenAddress ")]
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=open(self.root / "sshd.log", "ab"))
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                for address in listen:
                    socket.create_connection((address, self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
                time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


class RemoteUser:
    """A local user made for the test (its own HOME): the other machine's account."""

    def __init__(self, name: str, root: Path):
        self.name = name
        subprocess.run([_tool("useradd"), "--create-home", "--home-dir", str(root / name), "--shell", "/bin/sh",
                        "--no-user-group", "--gid", "nogroup", "--password", "*", name],
                       check=True, capture_output=True)  # (a locked account, "!", may not log in)
        entry = pwd.getpwnam(name)
        self.uid, self.home = entry.pw_uid, Path(entry.pw_dir)
        os.chmod(self.home, 0o700)

    def run(self, *argv: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """``argv`` as this user, in its HOME, with a login-like environment."""
        env = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "SHELL": "/bin/sh",
               "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm-256color"}
        return subprocess.run(["setpriv", f"--reuid={self.uid}", "--regid=nogroup", "--init-groups", "--",
                               *argv], env=env, cwd=str(self.home), input=input, capture_output=True, text=True,
                              timeout=timeout)

    def muxhost(self, *args: str, **kw):
        return self.run(str(self.home / "bin" / "muxhost"), *args, **kw)

    def remove(self) -> None:
        self.run("tmux", "kill-server")
        import psutil

        for p in psutil.process_iter(["uids"]):  # what this test started as that user (its agents, tmux)
            try:
                if p.info["uids"] and p.info["uids"].real == self.uid:
                    p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        subprocess.run([_tool("userdel"), "--remove", self.name], capture_output=True)


def authorized_key(user: RemoteUser, folder: Path) -> Path:
    """A key made for the test in ``folder``, which ``user`` accepts (``~/.ssh/authorized_keys``)."""
    key = folder / "client_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ssh_dir = user.home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
    for p in (ssh_dir, ssh_dir / "authorized_keys"):
        os.chown(p, user.uid, -1)
    return key


def install_muxhost(user: RemoteUser) -> Path:
    """``~/bin/muxhost`` for ``user``: this checkout's muxhost and the test venv's packages, run by a
    venv of a Python that user may run (the test venv's own may live in root's 0700 HOME): a
    ``.pth`` there adds the test venv's site-packages, editable installs included."""
    import sysconfig

    site_packages = Path(sysconfig.get_paths()["purelib"])
    readable_by_all(site_packages)
    readable_by_all(Path(__file__).resolve().parent.parent / "muxhost")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        missing(f"no {version} outside root's HOME for the remote user (the test venv's packages are built for it)")
    venv = user.home / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    (venv / "lib" / version / "site-packages" / "muxhost-test.pth").write_text(
        f"import site; site.addsitedir({str(site_packages)!r})\n")
    bin_dir = user.home / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "muxhost"
    script.write_text(f"#!/bin/sh\nexec {venv}/bin/python -m muxhost \"$@\"\n")
    os.chmod(script, 0o755)
    os.chown(bin_dir, user.uid, -1)
    return script
