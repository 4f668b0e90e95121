"""A real Prometheus on loopback for the tests that scrape fastbean: one
scrape job every second, started on a free port, asked until what it
scraped is what the test expects, stopped by its PID."""
import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

from tests.support.servers import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class Prometheus:
    def __init__(self, tmp_path, target_port, job=""):
        """Scrapes 127.0.0.1:target_port; job: more YAML of the scrape job
        (scheme, tls_config, authorization), each line indented 4 spaces."""
        self.tmp_path = tmp_path
        self.port = free_port()
        self.log = tmp_path / "prometheus.log"
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          "scrape_configs:\n  - job_name: fastbean\n" + job
                          + "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % target_port)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([PROMETHEUS, "--config.file=%s" % config,
                                          "--storage.tsdb.path=%s" % (tmp_path / "prometheus-data"),
                                          "--web.listen-address=127.0.0.1:%d" % self.port],
                                         stdout=log, stderr=subprocess.STDOUT)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def query(self, q):
        """The result of an instant query; [] while Prometheus does not answer yet."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port, urllib.parse.urlencode({"query": q}))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)["data"]["result"]
        except OSError:
            return []

    def until(self, q, check, timeout=60):
        """Ask q (a scrape a second) until its result passes check; the result.
        Fails with Prometheus's log if it exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(q)
            if result and check(result):
                return result
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, (q, result, self.log.read_text()[-3000:])
            time.sleep(0.3)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
