"""When an agent last heard from the network: the seconds since a TCP connection of its processes
last received a byte in answer (the kernel's ``tcp_info`` ``tcpi_last_data_recv`` and
``tcpi_last_data_sent``, read over Linux's sock_diag netlink, as ``ss -ti`` shows them:
``lastrcv``, ``lastsnd``). A reply that streams keeps it small; a model that holds its reply open
without a byte lets it grow. No state between calls; elsewhere than Linux, or when it cannot be
read: None (no evidence)."""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from typing import Iterable

__all__ = ["quiet_for", "stalled"]

_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_INET_DIAG_INFO = 2
_ESTABLISHED_OR_CLOSE_WAIT = (1 << 1) | (1 << 8)
_MSG = struct.Struct("=BBBB HH 16s16s I 8s IIIII")  # inet_diag_msg (72 bytes)
_LAST_DATA_SENT = 44  # offset of tcpi_last_data_sent (ms) in struct tcp_info; tcpi_last_data_recv follows
                      # tcpi_last_ack_sent


def _inodes(pids: Iterable[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in names:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(int(link[8:-1]))
    return out


def _dump(family: int) -> dict[int, tuple[bytes, bytes, int, int]]:
    """inode -> (local end, remote end, ms since the last byte sent, ms since the last byte
    received) of every TCP socket of ``family`` the kernel lists (an end: its address and port)."""
    req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 1 << (_INET_DIAG_INFO - 1), 0,
                      _ESTABLISHED_OR_CLOSE_WAIT) + bytes(48)
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + req
    out: dict[int, tuple[bytes, bytes, int, int]] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4) as s:  # NETLINK_SOCK_DIAG
        s.settimeout(1.0)
        s.sendto(msg, (0, 0))
        while True:
            data, pos = s.recv(1 << 16), 0
            while pos + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, pos)
                if kind in (_NLMSG_DONE, _NLMSG_ERROR) or length < 16:
                    return out
                body = data[pos + 16:pos + length]
                if len(body) >= _MSG.size:
                    fields = _MSG.unpack_from(body)
                    inode, attrs = fields[-1], body[_MSG.size:]
                    ends = (fields[6] + struct.pack("=H", fields[4]), fields[7] + struct.pack("=H", fields[5]))
                    while len(attrs) >= 4:
                        alen, atype = struct.unpack_from("=HH", attrs)
                        if alen < 4:
                            break
                        if atype == _INET_DIAG_INFO and alen >= 4 + _LAST_DATA_SENT + 12:
                            sent, _ack, got = struct.unpack_from("=III", attrs, 4 + _LAST_DATA_SENT)
                            out[inode] = (*ends, sent, got)
                        attrs = attrs[(alen + 3) & ~3:]
                pos += (length + 3) & ~3


def quiet_for(pids: Iterable[int]) -> float | None:
    """Seconds since a byte last came in answer over any established TCP connection of ``pids``:
    the smallest over them (one that streams a reply makes it small). A connection counts only
    while nothing was sent on it since its last byte came in: one that was answered (a keep-alive
    ping and its reply) or that carries a request with no byte back yet shows no progress
    (``inf``), and one between two of their own sockets (a TUI and its in-process server) does not
    count at all. None when they have no connection, or it cannot be read (not Linux)."""
    inodes = _inodes(pids)
    if not inodes or not hasattr(socket, "AF_NETLINK"):
        return None
    mine: list[tuple[bytes, bytes, int, int]] = []
    try:
        for family in (socket.AF_INET, socket.AF_INET6):
            mine += [v for inode, v in _dump(family).items() if inode in inodes]
    except OSError:
        return None
    ours = {local for local, *_ in mine}
    theirs = [(sent, got) for _, remote, sent, got in mine if remote not in ours]
    if not theirs:
        return None
    return min((got / 1000 if sent > got else math.inf) for sent, got in theirs)


def stalled(ctx, changed: float | None, source: str, now: float | None = None):
    """An :class:`~muxhost.agent.Activity` ``stalled`` when a turn waits on the model and nothing
    came: ``source`` (what the plugin reads: ``"transcript"``, ``"rollout"``, ``"database"``) last
    changed at ``changed`` (epoch seconds), ``ctx.stall_after`` or longer ago, and no TCP connection
    of ``ctx.pids`` received a byte for as long (a reply that streams without writing a line keeps
    it working). Else None: no evidence of a stall. Only for a turn that waits on the model — a tool
    that runs long and quietly is not a stall."""
    from muxhost.agent import Activity

    now = time.time() if now is None else now
    if changed is None or now - changed < ctx.stall_after:
        return None
    quiet = quiet_for(ctx.pids)
    if quiet is None or quiet < ctx.stall_after:
        return None
    heard = "nothing came back since its last request" if math.isinf(quiet) else f"no byte came in for {quiet:.0f} s"
    return Activity("stalled", f"{source}: no change for {now - changed:.0f} s while a reply is awaited; "
                               f"network: {heard}")
