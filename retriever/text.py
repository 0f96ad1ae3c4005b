"""Re-export of :mod:`wikiground.text`, where it lives now (kept for code that imports it from here)."""

from wikiground.text import *  # noqa: F403
from wikiground.text import __all__  # noqa: F401
