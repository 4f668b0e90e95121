"""The producer: python -m benchmarks.workload.produce SYSTEM TASK N PORT.

Puts N jobs of TASK ("noop" or "sleep") as fast as one process can, through
the system's ordinary client API (a Tasks app's .delay(), RQ's
queue.enqueue, Celery's task.delay), each with its put time as the task's
argument. Prints a JSON line: the CPU seconds the puts took (process_time,
imports not counted) and the time of the first and last put."""
import json
import os
import sys
import time


def sender(system, task, port):
    if system.startswith("fastbean"):
        os.environ["WBENCH_PORT"] = str(port)
        from benchmarks.workload.fastbean_app import tasks
        return tasks[task].delay
    if system == "rq":
        from redis import Redis
        from rq import Queue

        from benchmarks.workload import TASKS
        queue, fn = Queue("wbench", connection=Redis("127.0.0.1", port)), TASKS[task]
        return lambda put: queue.enqueue(fn, put)
    if system == "celery":
        os.environ["WBENCH_BROKER"] = "redis://127.0.0.1:%d/0" % port
        from benchmarks.workload.celery_app import tasks
        return tasks[task].delay
    raise SystemExit("no system %r" % system)


def main():
    system, task, n, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    send = sender(system, task, port)
    now = time.time
    cpu0, first = time.process_time(), now()
    for _ in range(n):
        send(now())
    last = now()
    print(json.dumps({"cpu_s": time.process_time() - cpu0, "first_put": first, "last_put": last}))


if __name__ == "__main__":
    main()
