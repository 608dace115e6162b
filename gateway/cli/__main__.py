"""`python -m gateway.cli ...` = the `switchyard` command (used by the service files)."""

import sys

from gateway.cli import main

sys.exit(main())
