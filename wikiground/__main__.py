"""``python -m wikiground``: the ``wikiground`` command."""

import sys

from wikiground.cli import main

sys.exit(main())
