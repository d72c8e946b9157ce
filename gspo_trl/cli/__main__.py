"""`python -m gspo_trl.cli COMMAND ...`: the `gspo-trl` command (gspo_trl.cli.main)."""

import sys

from gspo_trl.cli.main import main

sys.exit(main())
