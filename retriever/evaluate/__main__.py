"""``python -m retriever.evaluate`` is ``wikiground eval``."""

import sys

from retriever.evaluate import main

sys.exit(main())
