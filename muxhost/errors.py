"""Errors that reach the user as one line and an exit code (CONTRACT §4)."""

from __future__ import annotations

OK = 0
FAILED = 1
USAGE = 2
NOT_FOUND = 3
REFUSED = 4
INCOMPLETE = 5


class MuxhostError(Exception):
    """An error with the exit code the CLI returns for it.

    The message is printed as ``muxhost: <message>`` on one line, never with a traceback.
    """

    exit_code = FAILED

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(MuxhostError):
    exit_code = USAGE


class ConfigError(UsageError):
    """A config file problem: the message names the file, ``line N`` and the key."""


class NotFound(MuxhostError):
    exit_code = NOT_FOUND


class Refused(MuxhostError):
    exit_code = REFUSED


class PurgeIncomplete(MuxhostError):
    exit_code = INCOMPLETE
