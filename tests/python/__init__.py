"""The Python side: the client, the worker, the task API, the pytest plugin."""
