"""scenarios: running simfs jobs from the command line and reporting on them."""

from .demo import fixed_makedirs, naive_makedirs

__all__ = ["fixed_makedirs", "naive_makedirs"]
