"""What the tests and the benchmarks share: real servers (beanstalkd, fastbean,
Redis, NATS clusters, HA nodes, HAProxy, Prometheus) started on loopback and
stopped by their PID, certificates, the console's HTTP client, and the fault
toolkit."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the checkout
