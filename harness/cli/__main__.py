"""``python -m harness.cli``: the ``tokxfer`` command line."""

import sys

from harness.cli.main import main

sys.exit(main())
