"""What a probe could not measure within its ``--timeout``, and the command line that would: a
verdict, and the last thing ``simfs probe`` prints when any figure is a lower bound."""

from __future__ import annotations

import shlex

from .calibrate import lower_bounds
from .report import AttrLifetimes, ProbeReport, Verdict
from .settings import MAX_LINKS, rerun_timeout


def stopped_by_timeout(chain: AttrLifetimes) -> bool:
    """The chain of attribute lifetimes ended short of its cap because of the timeout: a lifetime
    outlived it, or the next change would have come after it (not after MAX_LINKS revalidations)."""
    return not chain.capped and (chain.next_at_least is not None or len(chain.periods) <= MAX_LINKS)


def outlived(report: ProbeReport) -> list[str]:
    """The measurements a trial of which was not seen within the timeout (their figures are lower
    bounds), and the attribute chains it stopped."""
    out = [f"{lag.op} ({lag.mode})" for lag in report.visibility if lag.lag.not_seen]
    if report.caches is not None:
        out += [f"{chain.kind} attributes" for chain in (report.caches.file, report.caches.dir)
                if chain is not None and stopped_by_timeout(chain)]
    return out


def _is_timeout_option(word: str) -> bool:
    """``--timeout`` as argparse reads it: also ``--timeout=S`` and an unambiguous prefix (``--ti``)."""
    name = word.split("=", 1)[0]
    return len(name) >= len("--ti") and "--timeout".startswith(name)


def rerun_command(report: ProbeReport) -> str:
    """The report's ``simfs probe`` command line with ``--timeout`` raised to measure what
    outlived it (rebuilt from the report's settings when the probe ran as a library call)."""
    words = shlex.split(report.command) if report.command else [
        "simfs", "probe", report.path, *(["--paths", ",".join(report.paths)] if len(set(report.paths)) > 1 else []),
        *(["--quick"] if report.quick else [])]
    kept: list[str] = []
    value_follows = False
    for word in words:
        if value_follows:
            value_follows = False
        elif _is_timeout_option(word):
            value_follows = "=" not in word
        else:
            kept.append(word)
    return shlex.join([*kept, "--timeout", f"{rerun_timeout(report.timeout):g}"])


def verdict(report: ProbeReport) -> Verdict | None:
    """A warning naming what outlived the timeout and the command to rerun (None: nothing did)."""
    missed = outlived(report)
    if not missed:
        return None
    bounded = lower_bounds(report.profile.get("sources", {}))
    profile = f", and the profile's {', '.join(bounded)}," if bounded else ""
    where = " (on every rank, under the same launcher)" if report.world_size > 1 else ""
    return Verdict("warn", "timeout", f"stopped short: not seen within --timeout {report.timeout:g} s: "
                   f"{', '.join(missed)}; their figures{profile} are lower bounds ('at least {report.timeout:g} s')",
                   f"to measure them, rerun{where}: {rerun_command(report)}")


def advice(report: ProbeReport) -> str | None:
    """The closing line of ``simfs probe`` when it stopped short (None: it did not)."""
    found = verdict(report)
    return None if found is None else f"simfs probe {found.text}; {found.recommendation}"
