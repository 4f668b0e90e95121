"""Running a node: flags, start-up and shutdown, logs, metrics, the console, systemd, limits."""
