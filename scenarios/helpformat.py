"""The ``simfs`` command's --help: argparse's defaults shown once per option."""

from __future__ import annotations

import argparse


class OneDefault(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: ...)" only where an option's own help does not say its default
    already and there is one to say (not None, not a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)
