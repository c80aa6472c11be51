"""Notifications from the watch: what changed, sent through apprise to every ``notify.urls`` channel.

The watch's pass hands each pass's changes to :meth:`Notifier.saw`, which judges the events the
user asked for (``notify.events``: ``waiting``, ``done`` — idle after working at least
``notify.done_after`` —, ``stalled``, ``failed`` — its agent exited with a non-zero status), makes
ONE message of all of a pass's events and puts it on a queue: the pass never waits on a channel.
One worker thread delivers it, one :class:`apprise.Apprise` per channel, so a channel that fails is
retried alone, with backoff (:data:`BACKOFF` seconds doubling to :data:`BACKOFF_MAX`), its pending
messages coalesced into one; after :data:`TRIES` failed tries it gives up on them with a warning.
A URL can hold a token: a channel is only ever named by its number, scheme and host
(:func:`channel_name`). apprise is the ``notify`` extra: without it, the watch warns once and runs on.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

from muxhost.config import NOTIFY_EVENTS as EVENTS

#: seconds before the first retry of a channel that failed; each next one waits twice as long, at most BACKOFF_MAX
BACKOFF = 5.0
BACKOFF_MAX = 300.0
#: failed tries after which a channel's pending messages are given up (with a warning line)
TRIES = 10
#: the most agents one message lists (a pass with more: "… and N more")
LISTED = 20
#: the lines of a waiting agent's screen a message quotes (the question it asks)
SCREEN_LINES = 6
INSTALL = "apprise is not installed: pip install 'muxhost[notify]' (the notify extra)"


class Event(NamedTuple):
    """One thing to tell: ``kind`` (one of :data:`EVENTS`), the record, the host it runs on, when
    the state began and how long the spell it ends or reports lasted (seconds), what more it says."""

    kind: str
    record: str
    name: str
    agent: str
    host: str
    since: float
    seconds: float
    detail: str = ""          # failed: "status 3"
    screen: tuple[str, ...] = ()  # waiting: the last lines of its screen


def channel_name(index: int, url: str) -> str:
    """A channel as messages may name it: its number in ``notify.urls`` (from 1), its scheme, and its
    host when that looks like a host name (``#2 json 127.0.0.1``); never a path, a user or a token
    (a Slack or Telegram URL's "host" is a token: shown only when it has a dot, or is localhost)."""
    scheme, _, rest = url.partition("://")
    host = re.split(r"[/?#]", rest.rpartition("@")[2], maxsplit=1)[0].rsplit(":", 1)[0] if rest else ""
    shown = host if "." in host or host == "localhost" else ""
    return f"#{index} {scheme or '?'}{' ' + shown if shown else ''}"


def scrub(text: str, url: str) -> str:
    """``text`` with every longer piece of ``url`` but its scheme and host put as ``****`` (an error
    from a channel may quote its URL, and the URL its token)."""
    scheme, _, rest = url.partition("://")
    for piece in sorted(set(re.split(r"[/:@?&=#,]", rest)), key=len, reverse=True):
        if len(piece) >= 4 and "." not in piece and piece != "localhost":
            text = text.replace(piece, "****")
    return text.replace(url, "****")


def span(seconds: float) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min``: how long, as a message says it."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def line_of(ev: Event) -> str:
    """The event in one line: the agent, its record, the host, the state and for how long."""
    who = f"{ev.name} ({ev.agent}, record {ev.record}) on {ev.host}"
    if ev.kind == "waiting":
        return f"{who} is waiting for you, since {_clock(ev.since)}"
    if ev.kind == "done":
        return f"{who} is done: idle since {_clock(ev.since)} after working {span(ev.seconds)}"
    if ev.kind == "stalled":
        return f"{who} is stalled: working, but no output and no CPU for {span(ev.seconds)}"
    return f"{who} failed: exited with {ev.detail} at {_clock(ev.since)}, after {span(ev.seconds)}"


def message(events: list[Event]) -> tuple[str, str]:
    """One message (title, body) for a pass's events (or a channel's pending ones): one event says
    it all; many are counted in the title and listed in the body (at most :data:`LISTED`)."""
    if len(events) == 1:
        ev = events[0]
        state = {"waiting": "is waiting for you", "done": "is done", "stalled": "is stalled",
                 "failed": f"failed ({ev.detail})"}[ev.kind]
        body = line_of(ev) + ("\n\n" + "\n".join(ev.screen) if ev.screen else "")
        return f"muxhost: {ev.name} {state}", body
    counts: dict[str, int] = {}
    for ev in events:
        counts[ev.kind] = counts.get(ev.kind, 0) + 1
    title = f"muxhost: {len(events)} agents: " + ", ".join(f"{counts[k]} {k}" for k in EVENTS if k in counts)
    lines = []
    for ev in events[:LISTED]:
        lines.append("- " + line_of(ev))
        lines.extend("    " + s for s in ev.screen[-3:])
    if len(events) > LISTED:
        lines.append(f"… and {len(events) - LISTED} more")
    return title, "\n".join(lines)


def last_lines(screen: str | None, n: int = SCREEN_LINES) -> tuple[str, ...]:
    """The last ``n`` lines of a screen that are not blank, right-stripped."""
    lines = [ln.rstrip() for ln in (screen or "").splitlines() if ln.strip()]
    return tuple(lines[-n:])


def with_screens(events: list[Event], changes, screens: Callable[[list[str]], dict[str, str]]) -> list[Event]:
    """The waiting ones of ``events`` with the last lines of their screens (the question), all
    captured in one ``screens(panes)`` call."""
    panes = {c.live.rec.id: c.live.pane.pane_id for c in changes if c.live.pane is not None}
    got = screens([panes[ev.record] for ev in events if ev.kind == "waiting" and ev.record in panes])
    return [ev._replace(screen=last_lines(got.get(panes.get(ev.record, "")))) if ev.kind == "waiting" else ev
            for ev in events]


def load_apprise():
    """The apprise module, or None when the notify extra is not installed."""
    try:
        import apprise
    except ImportError:
        return None
    import logging

    # (its own lines would reach stderr through logging's last resort: each failure is one line of
    # ours, its reason taken from apprise's log of that call, its URL's secrets scrubbed)
    logging.getLogger("apprise").addHandler(logging.NullHandler())
    return apprise


class Channel:
    """One URL, its own apprise object, what waits to be delivered there, and its backoff."""

    def __init__(self, index: int, url: str, apprise_mod):
        self.url, self.name = url, channel_name(index, url)
        self.pending: list[list[Event]] = []  # the passes' events not delivered yet
        self.tries = 0
        self.due = 0.0  # monotonic time of the next try
        try:  # the call in this thread, bounded by the channel's own socket timeouts (apprise 2.x would
            # run it in a process-wide pool of threads that outlives the call: service_timeout=0)
            asset = apprise_mod.AppriseAsset(app_id="muxhost", service_timeout=0)
        except TypeError:  # (an apprise before service_timeout)
            asset = apprise_mod.AppriseAsset(app_id="muxhost")
        self.apprise = apprise_mod.Apprise(asset=asset)
        self.known = bool(self.apprise.add(url))

    def send(self, title: str, body: str) -> str | None:
        """Deliver one message; None when it went, else why not (scrubbed of the URL's secrets)."""
        if not self.known:
            return "not a URL apprise knows (see https://github.com/caronc/apprise/wiki)"
        logs: list[str] = []

        def log(entry, plugin=None) -> None:
            if getattr(entry, "level", "") in ("WARNING", "ERROR"):
                logs.append(str(getattr(entry, "message", entry)))

        try:
            ok = self.apprise.notify(body=body, title=title, log_callback=log)
        except TypeError:  # (an apprise before log_callback)
            ok = self.apprise.notify(body=body, title=title)
        except Exception as e:
            return scrub(f"{type(e).__name__}: {e}", self.url)
        return None if ok else scrub("; ".join(logs) or "the channel refused it", self.url)


def send_test(urls: list[str]) -> list[tuple[str, str | None]]:
    """``muxhost notify test``: one message to every channel now; each channel's name and error (None: ok)."""
    apprise_mod = load_apprise()
    host = socket.gethostname()
    title = "muxhost: a test message"
    body = f"muxhost on {host} can reach this channel: the watch's notifications come here."
    out = []
    for i, url in enumerate(urls, 1):
        ch = Channel(i, url, apprise_mod)
        out.append((ch.name, ch.send(title, body)))
    return out


class Notifier:
    """The watch's notifications: :meth:`saw` judges a pass's changes and enqueues one message;
    a worker thread delivers it to each channel (see the module). ``warn(line)`` gets each warning
    as a dict (``notify``: ``failed``, ``gave up``, ``unknown`` or ``missing``; ``channel``, ``error``, …)."""

    def __init__(self, urls: list[str], events: list[str], done_after: float, stall_after: float,
                 warn: Callable[[dict[str, Any]], None], host: str | None = None):
        self.events, self.done_after, self.stall_after, self.warn = set(events), done_after, stall_after, warn
        self.host = host or socket.gethostname()
        self.busy_since: dict[str, float] = {}  # record -> when its working spell began
        self.queue: queue.Queue = queue.Queue()
        self.channels: list[Channel] = []
        apprise_mod = load_apprise()
        if apprise_mod is None:
            warn({"notify": "missing", "error": INSTALL + ": notifications are off"})
            self.thread = None
            return
        channels = [Channel(i, url, apprise_mod) for i, url in enumerate(urls, 1)]
        for ch in channels:
            if not ch.known:  # (no try would ever deliver there: said once, left out)
                warn({"notify": "unknown", "channel": ch.name, "error": ch.send("", "")})
        self.channels = [ch for ch in channels if ch.known]
        self.thread = threading.Thread(target=self._deliver, name="muxhost-notify", daemon=True)
        self.thread.start()

    # -- the pass: judge and enqueue ------------------------------------------------------------
    def saw(self, changes, now: float, screens: Callable[[list[str]], dict[str, str]],
            statuses: Callable[[], dict[str, Any]]) -> list[Event]:
        """The events of a pass's ``changes`` (:class:`muxhost.passes.Change`), enqueued as one
        message; ``screens(panes)`` gives the screens of waiting agents, ``statuses()`` the pane
        snapshot by pane id (asked only when an agent left: its exit status)."""
        events: list[Event] = []
        snapshot: list[dict[str, Any]] = []

        def once() -> dict[str, Any]:  # (one snapshot a pass, however many agents left in it)
            if not snapshot:
                snapshot.append(statuses())
            return snapshot[0]

        for change in changes:
            ev = self._event(change, now, once)
            if ev is not None and ev.kind in self.events:
                events.append(ev)
        if any(ev.kind == "waiting" for ev in events):
            events = with_screens(events, changes, screens)
        if events and self.thread is not None:
            self.queue.put(events)
        return events

    def _event(self, change, now: float, statuses) -> Event | None:
        """The event one change makes (None: nothing to tell), and what the notifier remembers."""
        rec, old, new = change.live.rec, change.old, change.new

        def event(kind: str, seconds: float, detail: str = "") -> Event:
            return Event(kind, rec.id, rec.name, rec.agent, self.host, change.since, seconds, detail)

        if new is None:
            self.busy_since.pop(rec.id, None)
            status = self._failed(change, statuses)
            return event("failed", now - rec.launched_at, detail=status) if status else None
        if new in ("working", "stalled"):  # (a turn: from its first work to idle, a question in it included)
            self.busy_since.setdefault(rec.id, change.since)
        busy = self.busy_since.pop(rec.id, None) if new == "idle" else None
        if not change.alert:  # (the first pass sets the scene: what holds already is no news)
            return None
        if new == "waiting":
            return event("waiting", now - change.since)
        if new == "stalled":
            return event("stalled", now - change.since + self.stall_after)
        if new == "idle" and busy is not None and change.since - busy >= self.done_after:
            return event("done", change.since - busy)
        return None

    @staticmethod
    def _failed(change, statuses) -> str | None:
        """``status N`` (or ``signal S``) when the record left because its agent exited and failed."""
        if change.live.state != "exited" or change.note or change.live.pane is None:
            return None
        pane = statuses().get(change.live.pane.pane_id)
        if pane is None or not pane.dead:
            return None
        if pane.dead_status not in (None, 0):
            return f"status {pane.dead_status}"
        signal_name = (pane.extra or {}).get("dead_signal")
        return f"signal {signal_name}" if signal_name else None

    # -- the worker: deliver, retry, give up ----------------------------------------------------
    def _deliver(self) -> None:
        while True:
            due = [ch.due for ch in self.channels if ch.pending]
            wait = max(0.0, min(due) - time.monotonic()) if due else None
            try:
                events = self.queue.get(timeout=wait)
            except queue.Empty:
                events = []
            if events is None:
                return
            if events:
                for ch in self.channels:
                    ch.pending.append(events)
            for ch in self.channels:
                if ch.pending and ch.due <= time.monotonic():
                    try:
                        self._try(ch)
                    except Exception:  # (a warning nobody can read any more: the worker goes on)
                        ch.due = time.monotonic() + BACKOFF

    def _try(self, ch: Channel) -> None:
        """Send a channel's pending events as one message; on failure, a warning and the next try later."""
        events = [ev for batch in ch.pending for ev in batch]
        error = ch.send(*message(events))
        if error is None:
            ch.pending, ch.tries = [], 0
            return
        ch.tries += 1
        if ch.tries >= TRIES:
            self.warn({"notify": "gave up", "channel": ch.name, "error": error, "tries": ch.tries,
                       "dropped": len(events)})
            ch.pending, ch.tries = [], 0
            return
        delay = min(BACKOFF * 2 ** (ch.tries - 1), BACKOFF_MAX)
        ch.due = time.monotonic() + delay
        self.warn({"notify": "failed", "channel": ch.name, "error": error, "retry_in": delay,
                   "pending": len(events)})

    def close(self, timeout: float = 2.0) -> None:
        """End the worker: what was queued before is tried first (``timeout`` seconds at most; a
        channel waiting out its backoff is not tried again)."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join(timeout)


def guard_config(config) -> str | None:
    """The config file that holds ``notify.urls`` (tokens, and where the screens of waiting agents
    go) keeps the state folder's rules: refused (exit 1) when it is not yours or others can write it
    (its symbolic links followed); a warning (returned) when others can read it."""
    if not config.path or not os.path.exists(config.path):
        return None
    from muxhost.store import check_private

    real = os.path.realpath(config.path)
    check_private(real)
    if os.stat(real).st_mode & 0o044:
        return (f"muxhost: warning: {config.path} holds notify.urls (which may hold tokens) and others can "
                f"read it: chmod go-r {real}")
    return None


def for_watch(config, stall_after: float, warn: Callable[[dict[str, Any]], None]) -> Notifier | None:
    """The watch's notifier from ``notify:`` in the config; None when no URL is set."""
    urls = config.notify("urls")
    if not urls:
        return None
    readable = guard_config(config)
    if readable:
        print(readable, file=sys.stderr, flush=True)
    return Notifier(list(urls), list(config.notify("events")), float(config.notify("done_after")),
                    stall_after, warn)


def warning_line(w: dict[str, Any]) -> str:
    """A notifier warning as the line the watch prints on stderr."""
    if w["notify"] in ("missing", "error"):
        return f"muxhost: warning: notify: {w['error']}"
    if w["notify"] == "unknown":
        return f"muxhost: warning: notify: channel {w['channel']}: {w['error']}: left out"
    if w["notify"] == "gave up":
        return (f"muxhost: warning: notify: channel {w['channel']}: gave up after {w['tries']} tries: "
                f"{w['dropped']} notification(s) not delivered ({w['error']})")
    return (f"muxhost: warning: notify: channel {w['channel']} failed: {w['error']} "
            f"(trying again in {w['retry_in']:g} s)")
