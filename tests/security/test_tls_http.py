"""TLS on the HTTP endpoint (--metrics-tls): /metrics, /healthz and /readyz
over https, with client certificates under --tls-ca, scraped by a real
Prometheus; real server processes."""
import http.client
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from tests.security.test_tls import client_context, start_fails, wait_for_log
from tests.support.certs import Pki, serial_of
from tests.support.prometheus import Prometheus
from tests.support.servers import HOST, Server, free_port, wait_listening

pytestmark = pytest.mark.timeout(120)



@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


def https_server(cert_key, ca=None):
    """fastbean with a plain beanstalk port and its HTTP endpoint over TLS only."""
    mport = free_port()
    flags = ["--metrics", "%s:%d" % (HOST, mport), "--metrics-tls", "--tls-cert", cert_key[0],
             "--tls-key", cert_key[1]]
    if ca is not None:
        flags += ["--tls-ca", ca]
    s = Server("fastbean", *flags).start()
    s.mport = mport
    wait_listening(mport, s.proc, lambda: s.log)
    return s


def get(port, path, ctx):
    conn = http.client.HTTPSConnection("localhost", port, timeout=10, context=ctx)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read(), conn.sock.getpeercert(binary_form=True)
    finally:
        conn.close()


def test_the_endpoints_answer_over_https_only(pki):
    s = https_server(pki.server)
    try:
        ctx = client_context(pki.ca.cert)
        status, body, _ = get(s.mport, "/metrics", ctx)
        assert status == 200 and b"\ncurrent_jobs_ready 0\n" in body
        assert get(s.mport, "/healthz", ctx)[:2] == (200, b"ok\n")
        assert get(s.mport, "/readyz", ctx)[:2] == (200, b"ready\n")
        # plain HTTP gets no answer, only a closed connection
        with socket.create_connection((HOST, s.mport), timeout=5) as plain:
            plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            data = plain.recv(4096)
            while data and b"200" not in data:
                data = plain.recv(4096)
            assert b"HTTP/1.1 200" not in data
        with pytest.raises(ssl.SSLCertVerificationError):
            get(s.mport, "/healthz", client_context(pki.other_ca.cert))
    finally:
        s.stop()
    assert "metrics and health endpoints on https://%s:%d/" % (HOST, s.mport) in s.log


def test_client_certificates_are_required_with_tls_ca(pki):
    s = https_server(pki.server, ca=pki.ca.cert)
    try:
        assert get(s.mport, "/healthz", client_context(pki.ca.cert, pki.client))[:2] == (200, b"ok\n")
        for ctx in (client_context(pki.ca.cert), client_context(pki.ca.cert, pki.foreign_client)):
            with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
                get(s.mport, "/healthz", ctx)
    finally:
        s.stop()


def test_sighup_renews_the_endpoint_s_certificate_too(pki, tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    s = https_server((cert, key))
    try:
        ctx = client_context(pki.ca.cert)
        from cryptography import x509
        assert x509.load_der_x509_certificate(get(s.mport, "/healthz", ctx)[2]).serial_number == \
            serial_of(pki.server[0])
        shutil.copy(pki.server2[0], cert)
        shutil.copy(pki.server2[1], key)
        s.signal(signal.SIGHUP)
        wait_for_log(s, "TLS certificate reloaded", 1)
        assert x509.load_der_x509_certificate(get(s.mport, "/healthz", ctx)[2]).serial_number == \
            serial_of(pki.server2[0])
    finally:
        s.stop()


@pytest.mark.parametrize("args, message", [
    (["--metrics-tls"], "--metrics-tls needs --metrics"),
    (["--metrics", "1", "--metrics-tls"], "--metrics-tls needs --tls-cert"),
    (["--metrics-tls=yes"], "--metrics-tls takes no value"),
])
def test_metrics_tls_mistakes_are_usage_errors(args, message):
    status, err = start_fails(*args)
    assert status == 5 and err.startswith("fastbean: " + message), err


def test_a_real_prometheus_scrapes_over_mutual_tls(pki, tmp_path):
    s = https_server(pki.server, ca=pki.ca.cert)
    try:
        with s.client() as c:
            for i in range(3):
                c.put(b"job %d" % i)
        job = ("    scheme: https\n    tls_config:\n      ca_file: %s\n      cert_file: %s\n"
               "      key_file: %s\n      server_name: localhost\n" % (pki.ca.cert, *pki.client))
        with Prometheus(tmp_path, s.mport, job) as prom:
            prom.until("current_jobs_ready", lambda r: r[0]["value"][1] == "3")
    finally:
        s.stop()


def test_haproxy_checks_readyz_over_mutual_tls(pki, tmp_path):
    """The example config's TLS check line, as docs/tls.md gives it: HAProxy
    marks the node up only through an https /readyz with its client certificate."""
    from tests.support.hanodes import EXAMPLE, HAPROXY
    s = https_server(pki.server, ca=pki.ca.cert)
    combined = tmp_path / "haproxy.pem"
    combined.write_bytes(open(pki.client[0], "rb").read() + open(pki.client[1], "rb").read())
    with open(EXAMPLE) as f:
        example = [line for line in f if not line.lstrip().startswith("server ")]
    tls_line = [line for line in example if "check-ssl" in line][0].replace("#", "", 1)
    port = free_port()
    conf = "".join(example).replace("bind :11300", "bind 127.0.0.1:%d" % port)
    conf = conf.replace("maxconn 20000", "maxconn 200")
    conf += (tls_line.replace("10.0.0.1:11300", "127.0.0.1:%d" % s.port).replace("11301", str(s.mport))
             .replace("/etc/haproxy/queue-ca.pem", pki.ca.cert).rstrip()
             + " crt %s\n" % combined)
    (tmp_path / "haproxy.cfg").write_text(conf)
    proxy = subprocess.Popen([HAPROXY, "-f", str(tmp_path / "haproxy.cfg"), "-db", "-q"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proxy)
        time.sleep(1)           # checks every 250 ms, down at the first failure: several have run
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection((HOST, port), timeout=2) as c:
                    c.sendall(b"list-tube-used\r\n")
                    if c.recv(100) == b"USING default\r\n":
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "HAProxy never marked the node up"
            time.sleep(0.1)
    finally:
        proxy.terminate()
        proxy.wait(10)
        s.stop()
