"""Re-export of :mod:`wikiground.errors`, where it lives now (kept for code that imports it from here)."""

from wikiground.errors import *  # noqa: F403
from wikiground.errors import __all__  # noqa: F401
