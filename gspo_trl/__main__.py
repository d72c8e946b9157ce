"""`python -m gspo_trl COMMAND ...`: the `gspo-trl` command (gspo_trl.cli.main), for when the
script is not on PATH."""

import sys

from gspo_trl.cli.main import main

sys.exit(main())
