"""`python -m fastbean`: the same as the `fastbean` console script."""
import sys

from fastbean.cli import main

sys.exit(main())
