"""fastbean-ctl's defaults, the exit statuses it documents, and how it writes a count."""
from fastbean.config import DEFAULT_PORT

PROG = "fastbean-ctl"
ADDR = "127.0.0.1"                 # -l when not given
PORT = int(DEFAULT_PORT)           # -p when not given
TIMEOUT_S = 5.0                    # --timeout: connecting, and waiting for each reply
TOP_INTERVAL_S = 1.0               # top --interval: seconds between refreshes
PUT_PRI = 1024                     # put --pri
PUT_TTR_S = 60                     # put --ttr
CLEAR_MAX_MISSES = 1000            # clear gives up after this many deletes in a row
                                   # lose a race with other clients for the job
PROGRESS_EVERY_S = 0.1             # redraw the clear progress bar at most this often
RECOUNT_EVERY_S = 0.5              # and ask the server how many jobs remain this often
LIST_PAGE = 1000                   # jobs: list-tube's largest page
JOBS_LIMIT = 100                   # jobs --limit: jobs shown

# exit statuses (documented in the --help epilog)
EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3
EXIT_SERVER_ERROR = 4
EXIT_PROTOCOL = 5
EXIT_NOT_EMPTIED = 6
EXIT_INTERRUPTED = 130


def count(n, noun):
    """`1 job`, `2 jobs`: a count and its noun, in good English."""
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")
