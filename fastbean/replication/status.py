"""Each node's status in the lease bucket, for the consoles' cluster pages:
written once a second whatever the role, under the node's own key, so that
any node's console lists every node. NATS away, it is said once the link is
back: the status is for people, never for the roles."""
import asyncio
import json
import logging
import socket

from fastbean.replication.link import Quiet

STATUS_EVERY = 1.0          # seconds between this node's status writes


def console_url(config):
    """The address of this node's --console, as another node's page links it, or None."""
    if config.console_port is None:
        return None
    host = config.console_host or socket.gethostname()
    if ":" in host:
        host = "[%s]" % host
    return "%s://%s:%d/" % ("https" if config.console_tls else "http", host, config.console_port)


class StatusWriter:
    def __init__(self, link, status):
        """status(): this node's status, a dict for JSON."""
        self.link = link
        self.status = status
        self._errors = Quiet("status-write-failed", "replication: this node's status for the "
                             "consoles was not written: %(error)s")

    async def run(self):
        while True:
            await asyncio.sleep(STATUS_EVERY)
            if self.link.js is None:
                continue
            try:
                await self.link.status_write(json.dumps(self.status()).encode())
                self._errors.ok()
            except Exception as e:      # noqa: BLE001 - see the module's docstring
                self._errors.failed(logging.INFO, error=str(e) or type(e).__name__)
