"""The process that carries rank code: kernel confinement it applies to itself (issue 16)."""

from .confine import Confinement, ConfinementWarning, announce, confine, prepared_descriptors

__all__ = ["Confinement", "ConfinementWarning", "announce", "confine", "prepared_descriptors"]
