"""Text that came from rank code, made safe to show on a terminal: every control character but
newline and tab (C0, DEL, C1: escape sequences that retitle, clear or feed a terminal) and the
bidirectional overrides that reorder what is read ("Trojan Source", CVE-2021-42574) are shown as
Python escapes (``\\x1b``), never sent to the terminal as they are; a lone surrogate (a name
decoded with surrogateescape) as its escape, so that the text always encodes as UTF-8. Rank text
of more than one line is framed, so that none of its lines passes for one of simfs's own."""

from __future__ import annotations

import codecs

_HIDDEN = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
_TABLE = {code: f"\\x{code:02x}" for code in _HIDDEN if code not in (0x09, 0x0A)}
_TABLE.update({code: f"\\u{code:04x}" for code in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                                   *range(0xD800, 0xE000))})
FRAME = "| "  # what begins each further line of rank text inside simfs's own output


def visible(text: str) -> str:
    """``text`` with its control and direction characters written out as escapes."""
    return text.translate(_TABLE)


def framed(text: str, margin: str = "    ") -> str:
    """Rank text shown inside simfs's own lines: each line after the first begins with
    ``margin`` and FRAME, so that a line the rank wrote (a forged ``replay:``) cannot pass for one
    of simfs's."""
    return text.replace("\n", f"\n{margin}{FRAME}")


class VisibleDecoder:
    """Bytes a process wrote, in pieces, as visible text (UTF-8; a character split between two
    pieces waits for the rest, bytes that are not UTF-8 show as U+FFFD)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return visible(self._decoder.decode(data, final))
