"""``python -m tidegate.cli`` is the ``tidegate`` command."""

import sys

from tidegate.cli.main import main

sys.exit(main())
