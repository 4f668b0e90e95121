"""High availability on NATS JetStream, and the faults (disk, process, NATS) each ending in an exact audit."""
