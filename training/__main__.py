"""`python -m training STEP [options]`: see training/cli.py."""

from training.cli import main

raise SystemExit(main())
