"""python -m fastbean.ctl: fastbean-ctl."""
import sys

from fastbean.ctl import main

sys.exit(main())
