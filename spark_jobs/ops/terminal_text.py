"""Record content made safe to show: on a terminal, a control character (an ESC sequence in
a payload, a device id or a key) is shown as its escape, never sent to the terminal to run."""

from __future__ import annotations

import re
from typing import TextIO

# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a line shows
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def terminal(text: object, keep_newlines: bool = False) -> str:
    """``text`` as a terminal shows it without acting on it: ``\\x1b``, ``\\u202e``, and
    ``\\n`` too unless ``keep_newlines``."""
    return (_CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL).sub(_escaped, str(text))


class TerminalStream:
    """A text stream that writes lines with every control character but the newline escaped:
    what the CLI prints, whatever record content the lines carry."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(terminal(text, keep_newlines=True))
        return len(text)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding, ...
        return getattr(self._stream, name)
