"""--auth-by-certificate: a client certificate that names a line of
--auth-tokens stands for its token, so a library that cannot send `auth`
(greenstalk here, behind a real client-side stunnel holding its certificate)
gets that line's roles. Real server processes, real TLS."""
import hashlib
import signal
import subprocess

import greenstalk
import pytest

from fastbean.server.authgate import certificate_names
from tests.security.test_tls import STUNNEL, client_context, start_fails, tls_connect, tls_server, wait_for_log
from tests.support.certs import Pki
from tests.support.servers import HOST, free_port, wait_listening

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(str(tmp_path_factory.mktemp("pki")))
    # CN "worker" (tests/support/certs.py) and, here, a certificate named only by a DNS SAN
    p.by_san = p.ca.issue("anonymous", server=False, hosts=("reader.svc.example",))
    return p


def tokens(path, lines):
    path.write_text("".join("%s %s %s\n" % (name, hashlib.sha256(name.encode() + b"-secret").hexdigest(),
                                            roles) for name, roles in lines))
    return str(path)


@pytest.fixture
def server(pki, tmp_path):
    path = tokens(tmp_path / "tokens", [("worker", "producer:jobs-* worker:jobs-*"),
                                        ("reader.svc.example", "monitor")])
    s = tls_server(pki.server, "--auth-tokens", path, "--auth-by-certificate", "-V", ca=pki.ca.cert)
    s.tokens = path
    yield s
    s.stop()


def stunnel(pki, tmp_path, port, cert_key):
    """A client-side stunnel on a local port, to the server's TLS port, showing cert_key."""
    local = free_port()
    conf = tmp_path / ("stunnel-%d.conf" % local)
    conf.write_text("foreground = yes\npid =\n[beanstalk]\nclient = yes\naccept = %s:%d\n"
                    "connect = %s:%d\nverifyChain = yes\ncheckHost = localhost\nCAfile = %s\n"
                    "cert = %s\nkey = %s\nsslVersionMin = TLSv1.2\n"
                    % (HOST, local, HOST, port, pki.ca.cert, cert_key[0], cert_key[1]))
    tunnel = subprocess.Popen([STUNNEL, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_listening(local, tunnel)
    return tunnel, local


def ask(sock, line):
    sock.sendall(line + b"\r\n")
    return sock.recv(4096)


def mutual_context(pki, cert_key):
    ctx = client_context(pki.ca.cert)
    ctx.load_cert_chain(*cert_key)
    return ctx


def test_greenstalk_through_stunnel_gets_the_roles_its_certificate_names(pki, tmp_path, server):
    tunnel, local = stunnel(pki, tmp_path, server.tls_port, pki.client)
    try:
        with greenstalk.Client((HOST, local), use="jobs-a", watch="jobs-a") as g:
            ids = [g.put("job %d" % i) for i in range(20)]
            for job_id in ids:
                job = g.reserve(timeout=5)
                assert job.id == job_id
                g.delete(job)
            # its roles hold: a tube outside its patterns is refused
            with pytest.raises(greenstalk.UnknownResponseError) as refused:
                g.use("payroll")
            assert refused.value.status == b"NOT_PERMITTED"
            with pytest.raises(greenstalk.UnknownResponseError):
                g.kick(1)                   # admin's only
        wait_for_log(server, "authenticated as worker by certificate", 1)
    finally:
        tunnel.terminate()
        tunnel.wait(10)


def test_a_subject_alt_name_can_name_the_line(pki, server):
    with tls_connect(server.tls_port, mutual_context(pki, pki.by_san)) as t:
        assert ask(t, b"stats-tube default").startswith(b"OK ")      # a monitor, no auth sent
        assert ask(t, b"pause-tube default 1") == b"NOT_PERMITTED\r\n"


def test_a_certificate_that_names_no_line_still_needs_a_token(pki, tmp_path):
    path = tokens(tmp_path / "tokens", [("someone-else", "")])
    s = tls_server(pki.server, "--auth-tokens", path, "--auth-by-certificate", ca=pki.ca.cert)
    try:
        with tls_connect(s.tls_port, mutual_context(pki, pki.client)) as t:
            assert ask(t, b"stats") == b"NOT_AUTHENTICATED\r\n"
            assert ask(t, b"auth someone-else-secret") == b"AUTHENTICATED\r\n"
            assert ask(t, b"list-tube-used") == b"USING default\r\n"
    finally:
        s.stop()


def test_without_the_flag_a_certificate_is_not_a_token(pki, tmp_path):
    path = tokens(tmp_path / "tokens", [("worker", "")])
    s = tls_server(pki.server, "--auth-tokens", path, ca=pki.ca.cert)
    try:
        with tls_connect(s.tls_port, mutual_context(pki, pki.client)) as t:
            assert ask(t, b"list-tube-used") == b"NOT_AUTHENTICATED\r\n"
    finally:
        s.stop()


def test_a_line_taken_out_on_sighup_no_longer_lets_its_certificate_in(pki, tmp_path, server):
    with tls_connect(server.tls_port, mutual_context(pki, pki.client)) as before:
        assert ask(before, b"list-tube-used") == b"USING default\r\n"
        tokens(tmp_path / "tokens", [("reader.svc.example", "monitor")])
        server.proc.send_signal(signal.SIGHUP)
        wait_for_log(server, "tokens reloaded", 1)
        with tls_connect(server.tls_port, mutual_context(pki, pki.client)) as after:
            assert ask(after, b"list-tube-used") == b"NOT_AUTHENTICATED\r\n"
        # a connection already in stays in, as with tokens
        assert ask(before, b"list-tube-used") == b"USING default\r\n"


@pytest.mark.parametrize("args", [
    ["--auth-by-certificate"],
    ["--auth-by-certificate", "--tls-listen", "127.0.0.1:1", "--tls-cert", "c.pem", "--auth-tokens", "t"],
    ["--auth-by-certificate", "--tls-listen", "127.0.0.1:1", "--tls-cert", "c.pem", "--tls-ca", "ca.pem"],
    ["--auth-by-certificate=yes"],
])
def test_the_flag_needs_tokens_and_a_ca(args):
    status, err = start_fails(*args)
    assert status == 5 and err.startswith("fastbean: --auth-by-certificate"), err
    assert "Traceback" not in err


def test_the_names_a_certificate_offers_in_order():
    cert = {"subject": ((("organizationName", "Acme"),), (("commonName", "cn-name"),)),
            "subjectAltName": (("DNS", "dns-name"), ("IP Address", "127.0.0.1"),
                               ("email", "ops@example.com"), ("URI", "spiffe://x/y"))}
    assert certificate_names(cert) == ["cn-name", "dns-name", "ops@example.com"]
    assert certificate_names(None) == [] and certificate_names({}) == []
