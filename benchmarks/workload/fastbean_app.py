"""The workload as a fastbean.Tasks app: `fastbean-worker benchmarks.workload.fastbean_app:app`.
$WBENCH_PORT names the server's port on 127.0.0.1 (the worker gets -l and -p too)."""
import os

import fastbean
from benchmarks.workload import nap, noop

TUBE = "wbench"
_port = os.environ.get("WBENCH_PORT")
app = fastbean.Tasks(("127.0.0.1", int(_port)) if _port else None, tube=TUBE)
tasks = {"noop": app.task(noop, name="noop"), "sleep": app.task(nap, name="sleep")}
