"""`simfs list`: the built-in scenarios as plain text (one a paragraph, grep-able by name), a header
naming the columns, every line within WIDTH columns, and the scenarios whose libraries are not
installed here marked with the extra that installs them."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from simfs.extras import extra_for, install_command

from .registry import Scenario

WIDTH = 100  # columns every line fits, read in a terminal or a CI log (`simfs run`'s table is wider)
_GAP = "  "
_INDENT = "    "  # the description's and the marks' lines
_CRASHES = {False: "", True: " crashes", "exhaustive": " crash states"}


def _cluster(sc: Scenario) -> str:
    return f"{sc.nodes}x{sc.ranks_per_node}{_CRASHES[sc.crashes]}"


def _verdicts(sc: Scenario, width: int) -> list[str]:
    """'fail: nfs beegfs' and 'pass: local', each wrapped to ``width``."""
    lines = []
    for verdict in ("fail", "pass"):
        profiles = [profile for profile, expected in sc.expect.items() if expected == verdict]
        if profiles:
            lines += textwrap.wrap(f"{verdict}: {' '.join(profiles)}", width, subsequent_indent=" " * 6)
    return lines


def _how(libraries: Sequence[str]) -> str:
    """The install commands of the extras that bring ``libraries``."""
    extras = sorted({extra for extra in map(extra_for, libraries) if extra is not None})
    return "; ".join(map(install_command, extras)) or "no extra of simfs installs them"


def lines(scenarios: Sequence[Scenario]) -> list[str]:
    """What `simfs list` prints for ``scenarios``."""
    name_w = max([len("scenario"), *(len(sc.name) for sc in scenarios)])
    family_w = max([len("family"), *(len(sc.family) for sc in scenarios)])
    cluster_w = max([len("cluster"), *(len(_cluster(sc)) for sc in scenarios)])
    left = name_w + family_w + cluster_w + 3 * len(_GAP)
    out = [f"{'scenario':{name_w}}{_GAP}{'family':{family_w}}{_GAP}{'cluster':{cluster_w}}{_GAP}expected verdicts",
           f"{_INDENT}what it does"]
    missing = 0
    for sc in scenarios:
        first, *more = _verdicts(sc, max(WIDTH - left, 20))
        out.append(f"{sc.name:{name_w}}{_GAP}{sc.family:{family_w}}{_GAP}{_cluster(sc):{cluster_w}}{_GAP}{first}")
        out += [" " * left + line for line in more]
        out += textwrap.wrap(sc.doc, WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT)
        needs = sc.missing()
        if needs:
            missing += 1
            out += textwrap.wrap(f"NOT INSTALLED: {', '.join(needs)} ({_how(needs)}); `simfs run` leaves it out",
                                 WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT)
    if missing:
        out.append(f"{missing} of {len(scenarios)} scenarios need libraries not installed here (NOT INSTALLED)")
    return out
