"""The Textual dashboard itself: the table, the preview, the status line, the keys and their forms.

Nothing here calls the host on Textual's own thread: the feed runs in a thread of its own, each
action in a worker thread (:mod:`muxhost.ui.ops` says what each does), and what they find comes
back through ``call_from_thread``. So a stop of many, a purge or a slow tmux never freezes the keys.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Label, Select, Static

from muxhost.errors import MuxhostError
from muxhost.ui import ops
from muxhost.ui.rows import STYLE, SYMBOL, Row, counts, ordered, short_conversation

#: the keys, as the footer and ``?`` show them (the footer shows the first ones that fit)
KEYS = [
    ("enter", "go to the agent's pane (inside tmux: switch to it; outside: attach)"),
    ("i", "type a line into the agent (as `muxhost send`)"),
    ("n", "launch an agent (agent, folder, name, worktree)"),
    ("s", "stop: the whole stop ladder"),
    ("z", "sleep: stop it, keep its pane (Enter there or w wakes it)"),
    ("w", "wake an asleep agent"),
    ("r", "resume a stopped or exited agent's conversation"),
    ("p", "purge its conversation: the plan first, then y/n (stops it first)"),
    ("d", "rm: forget a stopped record and remove its worktree"),
    ("g", "git diff --stat of its worktree"),
    ("/", "filter by name, agent, folder, branch or state (Esc clears)"),
    ("?", "this help"),
    ("q", "quit"),
]
COLUMNS = ("status", "name", "agent", "conv", "where")
#: with remote hosts: HOST in the conversation's place (the row still fits 80 columns)
HOST_COLUMNS = ("status", "name", "agent", "host", "where")
#: below this width the preview goes under the table, not beside it
WIDE = 140
PREVIEW_LINES = 200
#: the cells a name and an agent take at most (a name may be 64 characters: the rest of the row must fit 80)
NAME_CELLS, AGENT_CELLS = 18, 9
#: seconds the cursor rests on a row before its screen is read
PREVIEW_REST = 0.15


def fit(text: str, cells: int, left: bool = False) -> str:
    """``text`` in at most ``cells`` terminal cells (a wide character takes two), cut with ``…`` at
    the end (``left``: at the start, keeping a folder's last part)."""
    if cell_len(text) <= cells:
        return text
    if left:
        return "…" + set_cell_size(text[::-1], cells - 1)[::-1]
    return set_cell_size(text, cells - 1) + "…"


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,enter", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        keys = Text()
        for key, what in KEYS:
            keys.append(f"{key:>7}  ", style="bold yellow")
            keys.append(what + "\n")
        keys.append("\nStatus: ", style="bold")
        for s in ("waiting", "working", "stalled", "idle", "asleep", "exited", "stopped"):
            keys.append(f"{SYMBOL[s]} {s}", style=STYLE[s])
            keys.append("  ")
        with Vertical(id="dialog"):
            yield Label("muxhost ui — keys", id="title")
            yield Static(keys)
            yield Label("Esc or ? closes", classes="hint")

    def action_dismiss(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A question with what it would do; ``y`` answers yes, ``n`` or Esc no."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, title: str, lines: list[str], refused: str | None = None):
        super().__init__()
        self.title_text, self.lines, self.refused = title, lines, refused

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            # (as Text, never markup: a plan's `[child conversation …]`, a refusal quoting an argv's `[/]`)
            yield Label(Text(self.title_text), id="title")
            with VerticalScroll(id="plan"):
                yield Static(Text("\n".join(self.lines) or "(nothing)"))
            if self.refused:
                yield Label(Text(f"refused now: {self.refused}"), classes="refused")
            yield Label("y: do it   n/Esc: cancel", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class LineScreen(ModalScreen[str | None]):
    """One line of text (``i``: what to type into the agent)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str):
        super().__init__()
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(self.title_text), id="title")
            yield Input(placeholder="Enter sends it, Esc cancels", id="line")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class LaunchScreen(ModalScreen[dict | None]):
    """The launch form: the installed agents to choose from, the folder, a name, a worktree."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, agents: list[str], cwd: str):
        super().__init__()
        self.agents, self.cwd = agents, cwd

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("launch an agent", id="title")
            # (above the inputs: below them it is cut off in 80×23, a tmux window with its status line)
            yield Label("Enter launches, Tab moves, Esc cancels", classes="hint")
            yield Select([(a, a) for a in self.agents], value=self.agents[0], allow_blank=False, id="agent")
            yield Input(self.cwd, placeholder="folder", id="cwd")
            yield Input(placeholder="name (optional)", id="name")
            yield Input(placeholder="worktree: new branch name (optional)", id="worktree")

    def on_mount(self) -> None:
        self.query_one("#cwd", Input).focus()

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.dismiss({"agent": self.query_one("#agent", Select).value,
                      **{k: self.query_one(f"#{k}", Input).value.strip() for k in ("cwd", "name", "worktree")}})

    def action_cancel(self) -> None:
        self.dismiss(None)


class Dashboard(App):
    """``muxhost ui``."""

    TITLE = "muxhost"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #top { height: 1; background: $panel; color: $text; padding: 0 1; }
    #body { height: 1fr; layout: vertical; }
    #body.wide { layout: horizontal; }
    #table { height: 1fr; width: 1fr; border: none; }
    #body.wide #table { width: 3fr; }
    #preview { height: 40%; border: round $primary-darken-2; padding: 0 1; }
    #body.wide #preview { height: 1fr; width: 2fr; }
    #preview-text { width: 1fr; }
    #status { height: 1; padding: 0 1; background: $boost; }
    #status.error { color: $error; text-style: bold; }
    #filter { display: none; height: 3; }
    #filter.on { display: block; }
    ModalScreen { align: center middle; }
    #dialog { width: 90%; max-width: 110; height: auto; max-height: 90%; border: thick $primary;
              background: $surface; padding: 0 1; }
    #dialog #title { text-style: bold; width: 1fr; background: $primary-darken-2; padding: 0 1; margin-bottom: 1; }
    #dialog #plan { height: auto; max-height: 16; }
    #dialog .hint { color: $text-muted; margin-top: 1; }
    #dialog .refused { color: $error; text-style: bold; margin-top: 1; }
    #dialog Input, #dialog Select { margin-bottom: 1; }
    """
    BINDINGS = [
        Binding("i", "send", "type"), Binding("n", "launch", "new"), Binding("s", "simple('stop')", "stop"),
        Binding("z", "simple('sleep')", "sleep"), Binding("w", "simple('wake')", "wake"),
        Binding("r", "simple('resume')", "resume"),
        Binding("p", "purge", "purge"), Binding("d", "rm", "rm"), Binding("g", "diff", "diff", show=False),
        Binding("slash", "filter", "filter"), Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"), Binding("escape", "clear_filter", show=False),
        Binding("j", "cursor(1)", show=False), Binding("k", "cursor(-1)", show=False),
    ]

    def __init__(self, make_host: Callable[[], Any], *, popup: bool = False, where: str = "",
                 env: dict[str, str] | None = None, cwd: str | None = None,
                 feed: ops.Feed | None = None, first: Callable[[], ops.Look] | None = None):
        super().__init__()
        self.feed = feed or ops.Feed(ops.Hosts(make_host))
        self.hosts = self.feed.hosts
        self.popup, self.where = popup, where
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd or os.getcwd()
        self.rows: list[Row] = []
        self.shown: list[Row] = []
        self.filter_text = ""
        self.selected: str | None = None
        self.notes: list[str] = []
        self.looked_at = 0.0
        self.pending: dict[int, str] = {}  # action number -> what it is doing
        self._n = 0
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="muxhost-ui")
        self._wake = threading.Event()  # the feed's thread: look at the preview (and the probe) now
        self._look_now = False  # ... and take a full look (an action ended)
        self._quit = threading.Event()
        self.feed_marks: dict[str, tuple] = {}  # the last look's marks (ops.Look.marks)
        self._preview_of: tuple | None = None  # (record id, its pane's marks) the preview shows
        self._extra: str | None = None  # what a key put into the preview (the diff stat)
        self.attach_argv: list[str] | None = None  # Enter outside tmux: exec'd after the dashboard ends
        self.looks = 0
        self._drawn_keys: list[str] = []
        self._drawn: list[tuple] = []
        self._selected_at = 0.0
        self._top = ""
        self._short: tuple[tuple, dict[str, str]] = ((), {})
        self._first = first  # the first look, started before Textual was (see muxhost.ui.run)
        self.columns = COLUMNS if self.feed.follower is None else HOST_COLUMNS

    # -- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="top")
        with Container(id="body"):
            yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="preview"):
                yield Static(id="preview-text")
        yield Input(placeholder="filter: name, agent, folder, branch, state — Enter keeps it, Esc clears", id="filter")
        yield Static("starting…", id="status")
        yield Footer(compact=True)  # (every key fits 80 columns: `? help` and `q quit` were cut off)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        labels = {"status": "STATUS", "name": "NAME", "agent": "AGENT", "conv": "CONVERSATION", "host": "HOST",
                  "where": "FOLDER / BRANCH"}
        for key in self.columns:
            table.add_column(labels[key], key=key)
        table.focus()
        self.install_screen(HelpScreen(), name="help")  # (made once: ? opens it at once)
        self._layout(self.size.width)
        self._header()
        threading.Thread(target=self._feed_loop, name="muxhost-ui-feed", daemon=True).start()

    def on_resize(self, event) -> None:
        self._layout(event.size.width)
        self._render_rows()

    def _layout(self, width: int) -> None:
        self.query_one("#body").set_class(width >= WIDE, "wide")

    def _where_width(self) -> int:
        table_width = self.size.width * 3 // 5 if self.size.width >= WIDE else self.size.width
        return max(12, table_width - 14 - NAME_CELLS - AGENT_CELLS - 11 - 10)

    # -- the feed ------------------------------------------------------------------------------
    def _feed_loop(self) -> None:
        force = self._first is None
        while not self._quit.is_set():
            try:
                if self._first is not None:
                    look, self._first = self._first(), None
                    self.looks += 1
                    self._call(self._show_look, look)
                elif self.feed.due(force):
                    look = self.feed.look()
                    self.looks += 1
                    self._call(self._show_look, look)
                self._refresh_preview()
            except MuxhostError as e:
                self._call(self._status, f"muxhost: {e}", True)
            except Exception as e:  # never a traceback: the dashboard goes on, and says why it could not look
                self._call(self._status, f"muxhost: internal error: {type(e).__name__}: {e}", True)
            self._wake.wait(PREVIEW_REST if self._preview_due() else ops.PROBE_EVERY)
            self._wake.clear()
            force, self._look_now = self._look_now, False

    def _call(self, fn, *args) -> None:
        if self._quit.is_set():
            return
        try:
            self.call_from_thread(fn, *args)
        except RuntimeError:  # the app is closing
            pass

    def _preview_due(self) -> bool:
        """The preview shows another record, or its pane printed since (and no diff is shown)."""
        rid = self.selected
        return rid is not None and self._extra is None and (rid, self.feed_marks.get(rid)) != self._preview_of

    def _refresh_preview(self) -> None:
        """The selected agent's screen again, when due and once the cursor rested a moment (moving
        down ten rows reads one screen, not ten)."""
        rid = self.selected
        if not self._preview_due() or time.monotonic() - self._selected_at < PREVIEW_REST:
            return
        self._preview_of = (rid, self.feed_marks.get(rid))
        try:
            text = ops.preview(self.hosts.get(), rid, PREVIEW_LINES)
        except MuxhostError as e:
            text = f"({e})"
        self._call(self._show_preview, rid, text)

    def _show_look(self, look: ops.Look) -> None:
        self.rows, self.looked_at, self.feed_marks = look.rows, look.at, look.marks
        self.notes = look.notes
        self._render_rows()
        self._header()
        if look.notes and not self.pending:
            self._status("muxhost: " + look.notes[0])
        elif self.query_one("#status", Static).content == "starting…":
            self._status(f"{len(look.rows)} record(s) · ? shows the keys")

    def _cells(self, r: Row, now: float, short: dict[str, str], width: int) -> tuple:
        """A row's cells as (text, style) pairs: compared with what the table shows, then drawn."""
        return ((f"{SYMBOL.get(r.status, ' ')} {r.how_long(now)}", STYLE.get(r.status, "")),
                (fit(r.name, NAME_CELLS), "bold" if r.status == "waiting" else ""), (fit(r.agent, AGENT_CELLS), ""),
                (fit(r.host or "local", 11), "bold red" if r.status == "offline" else "") if "host" in self.columns else
                (short.get(r.conversation or "", "-"), "" if r.resumable or r.state == "running" else "dim"),
                (fit(r.where(width), width, left=not r.branch and r.status != "offline"), "magenta" if r.branch else ""))

    def _render_rows(self) -> None:
        """The table from :attr:`rows`: in place, cell by cell, while the same rows stay in the same
        order (a look that changed one status redraws one cell); else built again."""
        table = self.query_one(DataTable)
        self.shown = ordered(self.rows, self.filter_text)
        now = time.time()
        ids = tuple(r.conversation for r in self.rows if r.conversation)
        if ids != self._short[0]:  # (each id against every other: once per set of ids, not per redraw)
            self._short = (ids, {c: short_conversation(c, ids) for c in ids})
        width = self._where_width()
        cells = [self._cells(r, now, self._short[1], width) for r in self.shown]
        keys = [r.id for r in self.shown]
        if keys == self._drawn_keys:
            with self.batch_update():  # (one repaint for them all)
                for key, new, old in zip(keys, cells, self._drawn):
                    for column, a, b in zip(self.columns, new, old):
                        if a != b:
                            # (the column widens when a cell grows: `idle 9s` -> `asleep 12s` is not cut)
                            table.update_cell(key, column, Text(a[0], style=a[1]), update_width=True)
        else:
            keep = self.selected
            table.clear()
            for key, row in zip(keys, cells):
                table.add_row(*(Text(text, style=style) for text, style in row), key=key)
            index = next((i for i, r in enumerate(self.shown) if r.id == keep), None)
            if index is not None:
                table.move_cursor(row=index, animate=False)
            elif self.shown:
                table.move_cursor(row=min(table.cursor_row, len(self.shown) - 1), animate=False)
                self._select(self.shown[table.cursor_row].id)
            else:
                self._select(None)
        self._drawn_keys, self._drawn = keys, cells

    def _header(self) -> None:
        top = Text()
        top.append(" muxhost ", style="bold reverse")
        top.append("  ")
        top.append(counts(self.rows), style="bold")
        if self.filter_text:
            top.append(f"   filter: {self.filter_text} ({len(self.shown)} of {len(self.rows)})", style="yellow")
        at = time.strftime('%H:%M', time.localtime(self.looked_at)) if self.looked_at else ""
        # (the server's name gives way to the time of the last look when the counts need the room)
        room = self.size.width - 3 - len(top.plain)
        right = next((r for r in (f"{self.where}  {at}".strip(), at) if len(r) <= room), "")
        pad = max(1, self.size.width - 2 - len(top.plain) - len(right))
        top.append(" " * pad + right, style="dim")
        if top.plain != self._top:  # (a repaint only when it reads otherwise)
            self._top = top.plain
            self.query_one("#top", Static).update(top)

    def _show_preview(self, rid: str, text: str) -> None:
        if rid != self.selected:
            return
        self._title(rid)
        box = self.query_one("#preview-text", Static)
        if str(box.content) != text:
            box.update(Text(text))
            self.query_one("#preview", VerticalScroll).scroll_end(animate=False)

    def _title(self, rid: str | None) -> None:
        row = next((r for r in self.rows if r.id == rid), None)
        box = self.query_one("#preview", VerticalScroll)
        box.border_title = (f"{row.name} · {row.pane or 'no pane'}" if row else rid) if rid else ""
        box.border_subtitle = "g: git diff --stat" if row and row.worktree else ""

    def _select(self, rid: str | None) -> None:
        if rid != self.selected:
            self.selected = rid
            self._selected_at = time.monotonic()
            self._extra = None
            self._preview_of = None
            self._title(rid)  # (at once; its screen follows from the feed's thread)
            if rid is None:
                self.query_one("#preview-text", Static).update("")
            self._wake.set()

    @on(DataTable.RowHighlighted)
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._select(event.row_key.value)

    # -- status and workers --------------------------------------------------------------------
    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.set_class(error, "error")
        if str(status.content) != text:
            status.update(Text(text))

    def _run(self, doing: str, fn: Callable[..., Any], *args, then: Callable[[Any], None] | None = None) -> None:
        """``fn(host, *args)`` in a worker thread; its message (or error) into the status line."""
        self._n += 1
        n = self._n
        self.pending[n] = doing
        self._status(f"… {'; '.join(self.pending.values())}")

        def job():
            try:
                result = fn(self.hosts.get(), *args)
            except MuxhostError as e:
                self._call(self._done, n, f"muxhost: {e}", True, None, None)
            except Exception as e:
                self._call(self._done, n, f"muxhost: internal error: {type(e).__name__}: {e}", True, None, None)
            else:
                self._call(self._done, n, result if isinstance(result, str) else None, False, then, result)

        self._pool.submit(job)

    def _done(self, n: int, text: str | None, error: bool, then, result) -> None:
        self.pending.pop(n, None)
        if text is not None:
            self._status(text, error)
        elif not self.pending:
            self._status("")
        if then is not None:
            then(result)
        self._look_now = True  # look again now
        self._wake.set()

    def _current(self) -> Row | None:
        return next((r for r in self.shown if r.id == self.selected), None)

    def _need(self) -> Row | None:
        row = self._current()
        if row is None:
            self._status("no agent selected" + (" (n launches one)" if not self.rows else ""), True)
        return row

    # -- the keys ------------------------------------------------------------------------------
    def action_cursor(self, step: int) -> None:
        table = self.query_one(DataTable)
        table.action_cursor_down() if step > 0 else table.action_cursor_up()

    @on(DataTable.RowSelected)
    def enter(self, event: DataTable.RowSelected) -> None:
        row = self._need()
        if row is None:
            return

        def went(argv):
            if argv:  # outside tmux: this terminal attaches once the dashboard is gone
                self.attach_argv = argv
                self.exit()
            elif self.popup:  # the popup closes: the client is on the agent's pane now
                self.exit()
            else:
                self._status(f"switched to {row.name} ({row.pane})")

        self._run(f"going to {row.name}", ops.attach, row.id, self.env, then=went)

    def action_send(self) -> None:
        row = self._need()
        if row is not None:
            self.push_screen(LineScreen(f"type a line into {row.name}"),
                             lambda text: text and self._run(f"typing into {row.name}", ops.send, row.id, text))

    def action_launch(self) -> None:
        def form(names):
            self.push_screen(LaunchScreen(names, self.cwd), lambda got: got and self._run(
                f"launching {got['agent']}", ops.launch, got["agent"], got["cwd"], got["name"], got["worktree"]))

        self._run("listing the agents", ops.agents, then=form)

    #: the keys that run one host method on the selected record: what the status line says meanwhile
    SIMPLE = {"stop": ("stopping {}", ops.stop), "sleep": ("putting {} to sleep", ops.sleep),
              "wake": ("waking {}", ops.wake), "resume": ("resuming {}", ops.resume)}

    def action_simple(self, verb: str) -> None:
        row = self._need()
        if row is not None:
            doing, fn = self.SIMPLE[verb]
            self._run(doing.format(row.name), fn, row.id)

    def action_purge(self) -> None:
        row = self._need()
        if row is None:
            return

        def ask(report):
            lines = [*report.plan, *(f"note: {n}" for n in report.notes)]
            title = f"purge {report.agent} conversation {report.conversation_id} of {row.name} for good?"
            self.push_screen(ConfirmScreen(title, lines, report.refused), lambda yes: self._purge_answer(
                yes, row, report.conversation_id))

        self._run(f"planning the purge of {row.name}", ops.purge_plan, row.id, then=ask)

    def _purge_answer(self, yes: bool, row: Row, conversation_id: str) -> None:
        if not yes:
            self._status("purge cancelled: nothing changed")
            return
        self._run(f"purging {conversation_id}", ops.purge, row.id, conversation_id)

    def action_rm(self) -> None:
        row = self._need()
        if row is None:
            return

        def ask(lines):
            self.push_screen(ConfirmScreen(f"rm {row.name}?", lines), lambda yes: self._run(
                f"removing {row.name}", ops.rm, row.id) if yes else self._status("rm cancelled: nothing changed"))

        self._run(f"looking at {row.name}", ops.rm_plan, row.id, then=ask)

    def action_diff(self) -> None:
        row = self._need()
        if row is None:
            return

        def show(text):
            self._extra = text
            self._show_preview(row.id, text)

        self._run(f"git diff of {row.name}", ops.diff_stat, row.id, then=show)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("on")
        box.value = self.filter_text
        box.focus()

    @on(Input.Changed, "#filter")
    def filtering(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._render_rows()
        self._header()

    @on(Input.Submitted, "#filter")
    def filtered(self) -> None:
        self.query_one("#filter", Input).remove_class("on")
        self.query_one(DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_class("on") or self.filter_text:
            box.value = ""
            self.filter_text = ""
            box.remove_class("on")
            self.query_one(DataTable).focus()
            self._render_rows()
            self._header()
        elif self._extra is not None:  # back from the diff to the screen
            self._extra = None
            self._preview_of = None
            self._wake.set()

    def action_help(self) -> None:
        self.push_screen("help")

    def check_action(self, action: str, parameters) -> bool | None:
        """The dashboard's keys act on the table only: not under a form or a question (their own
        keys answer there: an `s` typed into the purge question stops nothing), nor while the
        filter box takes the letters."""
        if action not in self._OWN:
            return True
        if len(self.screen_stack) > 1:
            return False
        return not (self.is_mounted and isinstance(self.focused, Input))

    _OWN = {"send", "launch", "simple", "purge", "rm", "diff", "filter", "help", "quit", "cursor"}

    async def action_quit(self) -> None:
        self.exit()

    def on_unmount(self) -> None:
        self._quit.set()
        self._wake.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def settle(self) -> None:
        """After the dashboard ended: wait for the actions still under way (an exec of the attach
        would cut a stop's ladder or a purge short, where the interpreter's exit waits for them)."""
        if self.pending:
            print(f"muxhost: waiting for: {'; '.join(self.pending.values())}", file=sys.stderr, flush=True)
        self._pool.shutdown(wait=True)
