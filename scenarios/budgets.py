"""What a search may spend: how long a failing one shrinks its counterexample, and how many
examples `simfs run --quick` gives each search. A shrink's budget is wall time after the first
failure; the finding says when shrinking stopped at it (its replay string reproduces it all the
same, and `simfs run NAME --shrink-time S` shrinks it further)."""

SHRINK_TIME = 10.0  # a search on its own: explore(), the pytest plugin, `simfs run NAME` or a job
# each search of `simfs run` over the library or a family: a process scenario's examples take
# 0.15-1 s, so 10 s of shrinking on every expected failure was a third of the main job's time
SWEEP_SHRINK_TIME = 3.0
QUICK_SHARE = 3  # `simfs run --quick`: a third of each scenario's examples...
QUICK_LEAST = 5  # ...and at least these
