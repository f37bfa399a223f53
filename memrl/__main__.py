"""`python -m memrl` is the same as the `memrl` command."""

import sys

from memrl.cli import main

sys.exit(main())
