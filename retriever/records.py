"""Re-export of :mod:`wikiground.records`, where it lives now (kept for code that imports it from here)."""

from wikiground.records import *  # noqa: F403
from wikiground.records import __all__  # noqa: F401
