"""Exit codes of the ``simfs`` command, shared by its subcommands."""

EXIT_UNEXPECTED = 1  # a verdict differed from its expectation, or a probe's rank failed
EXIT_USAGE = 2  # bad input: arguments, an unusable path or profile, a job whose module does not import
EXIT_STALLED = 3  # a run the watchdog had to stop
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), after the partial report is written
