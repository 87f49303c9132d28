"""``python -m dpjax.docs build --out site``: see ``dpjax.docs``."""

import sys

from dpjax.docs.cli import main

sys.exit(main())
