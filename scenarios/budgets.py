"""What a search may spend: how long a failing one shrinks its counterexample, and how many
examples `simfs run --quick` gives each search. A shrink's budget is wall time after the first
failure; the finding says when shrinking stopped at it (its replay string reproduces it all the
same, and `simfs run NAME --shrink-time S` shrinks it further)."""

SHRINK_TIME = 10.0  # a search on its own: explore(), the pytest plugin, `simfs run NAME` or a job
# each search of `simfs run` over the library or a family: a process scenario's examples take
# 0.15-1 s, so 10 s of shrinking on every expected failure was a third of the main job's time
SWEEP_SHRINK_TIME = 3.0
# ...and where the scenario expects that profile to fail: the verdict is the news a sweep brings
# (a regression is a pass that fails, which keeps the 3 s), and the example found first already
# reproduces the known bug; its shrinking was ~30 of the main job's ~390 search-seconds at 3 s
EXPECTED_FAILURE_SHRINK_TIME = 1.0
QUICK_SHARE = 3  # `simfs run --quick`: a third of each scenario's examples...
QUICK_LEAST = 5  # ...and at least these
