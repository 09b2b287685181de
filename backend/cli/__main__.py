"""`python -m backend.cli ...`."""

import sys

from backend.cli.main import main

sys.exit(main())
