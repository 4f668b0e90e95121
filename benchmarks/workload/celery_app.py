"""The workload as a Celery app with the Redis broker at $WBENCH_BROKER:
`celery -A benchmarks.workload.celery_app worker`. No result backend, and
task results ignored: a fastbean job has no result to store either."""
import os

from celery import Celery

from benchmarks.workload import nap, noop

QUEUE = "wbench"
app = Celery("wbench", broker=os.environ.get("WBENCH_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(task_ignore_result=True, task_default_queue=QUEUE, broker_connection_retry_on_startup=True)
tasks = {"noop": app.task(name="noop")(noop), "sleep": app.task(name="sleep")(nap)}
