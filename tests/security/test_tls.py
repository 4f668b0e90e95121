"""TLS on the beanstalk listeners (--tls-listen, --tls-cert, --tls-key, --tls-ca):
real server processes, real TLS clients (Python's ssl, openssl s_client,
stunnel in front of greenstalk), certificates made by tests/support/certs.py."""
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

import greenstalk
import pytest

from tests.support.certs import Pki
from tests.support.servers import HOST, Server, client, free_port, wait_listening

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")]

OPENSSL = shutil.which("openssl")
STUNNEL = shutil.which("stunnel4") or "/usr/bin/stunnel4"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


def tls_server(cert_key, *args, ca=None, **kwargs):
    """fastbean with its plain -p port (the readiness check's) and a TLS
    listener on another; .tls_port is it. kwargs go to Server."""
    cert, key = cert_key
    port = free_port()
    flags = ["--tls-listen", "%s:%d" % (HOST, port), "--tls-cert", cert, "--tls-key", key]
    if ca is not None:
        flags += ["--tls-ca", ca]
    s = Server("fastbean", *flags, *args, **kwargs).start()
    s.tls_port = port
    return s


def client_context(ca, cert_key=None):
    ctx = ssl.create_default_context(cafile=ca)
    if cert_key is not None:
        ctx.load_cert_chain(*cert_key)
    return ctx


def tls_connect(port, ctx, host="localhost"):
    sock = socket.create_connection((HOST, port), timeout=5)
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def hang_up(t, how):
    """Close a TLS client: with its close_notify first ("close-notify"), or
    with a bare FIN."""
    if how == "close-notify":
        try:
            t.unwrap()
        except (OSError, ssl.SSLError):
            pass
    t.close()


def ask(sock, data, end=b"\r\n"):
    """Send data; the reply, read until it ends with end."""
    sock.sendall(data)
    reply = b""
    while not reply.endswith(end):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed after %r" % reply)
        reply += chunk
    return reply


def current_connections(server):
    with client(server.port) as c:
        return c.stats()["current-connections"]


def test_put_reserve_delete_over_tls(pki):
    s = tls_server(pki.server)
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert)) as t:
            assert t.version() in ("TLSv1.2", "TLSv1.3")
            assert ask(t, b"use jobs\r\nput 5 0 60 5\r\nhello\r\n") == b"USING jobs\r\nINSERTED 1\r\n"
            assert ask(t, b"watch jobs\r\nreserve-with-timeout 0\r\n", b"hello\r\n") == \
                b"WATCHING 2\r\nRESERVED 1 5\r\nhello\r\n"
            assert ask(t, b"delete 1\r\n") == b"DELETED\r\n"
            # the plain listener serves the same queue
            with client(s.port) as c:
                assert c.stats()["cmd-delete"] == 1
    finally:
        s.stop()
    assert "listening on %s:%d (TLS)" % (HOST, s.tls_port) in s.log


def test_big_bodies_and_pipelines_cross_tls_intact(pki):
    # records larger than TLS's 16 KiB, and many replies in one write
    s = tls_server(pki.server, "-z", 1 << 20)
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert)) as t:
            body = os.urandom(300_000)
            assert ask(t, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)) == b"INSERTED 1\r\n"
            reply = ask(t, b"reserve\r\n", body + b"\r\n")
            assert reply == b"RESERVED 1 %d\r\n%s\r\n" % (len(body), body)
            many = b"".join(b"put 0 0 60 1\r\nx\r\n" for _ in range(500))
            reply = ask(t, many, b"INSERTED 501\r\n")
            assert reply.count(b"INSERTED") == 500
    finally:
        s.stop()


def test_openssl_s_client_connects_with_tls_12_and_13(pki):
    s = tls_server(pki.server)
    try:
        for version in ("-tls1_2", "-tls1_3"):
            p = subprocess.run([OPENSSL, "s_client", "-connect", "%s:%d" % (HOST, s.tls_port), version,
                                "-CAfile", pki.ca.cert, "-verify_return_error", "-servername", "localhost",
                                "-ign_eof"],
                               input=b"list-tube-used\r\nquit\r\n", capture_output=True, timeout=20)
            assert p.returncode == 0, p.stderr
            assert b"USING default" in p.stdout
            assert b"Verify return code: 0 (ok)" in p.stdout
    finally:
        s.stop()


@pytest.mark.parametrize("version", ["-tls1", "-tls1_1"])
def test_tls_10_and_11_are_refused(pki, version):
    s = tls_server(pki.server)
    try:
        # SECLEVEL=0 lets the client offer the old version at all
        p = subprocess.run([OPENSSL, "s_client", "-connect", "%s:%d" % (HOST, s.tls_port), version,
                            "-cipher", "DEFAULT@SECLEVEL=0"],
                           input=b"", capture_output=True, timeout=20)
        assert p.returncode != 0
        assert b"Cipher is (NONE)" in p.stdout or b"no peer certificate available" in p.stdout
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError):
            tls_connect(s.tls_port, ctx).close()
        assert current_connections(s) == 1
    finally:
        s.stop()


def test_plain_text_on_the_tls_port_is_dropped_and_harms_no_one(pki):
    s = tls_server(pki.server)
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert)) as good:
            assert ask(good, b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
            with socket.create_connection((HOST, s.tls_port), timeout=5) as plain:
                plain.sendall(b"put 0 0 60 2\r\nhi\r\nstats\r\n")
                data = plain.recv(4096)
                while data and b"INSERTED" not in data:
                    data = plain.recv(4096)
                assert b"INSERTED" not in data         # closed, after an alert at most
            assert ask(good, b"peek 1\r\n", b"hi\r\n") == b"FOUND 1 2\r\nhi\r\n"
            # a failed handshake never reached the engine: only good and this one count
            assert current_connections(s) == 2
    finally:
        s.stop()


def test_a_verifying_client_rejects_a_self_signed_or_foreign_certificate(pki):
    s = tls_server(pki.self_signed)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            tls_connect(s.tls_port, client_context(pki.ca.cert))
    finally:
        s.stop()
    s = tls_server(pki.server)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            tls_connect(s.tls_port, client_context(pki.other_ca.cert))
        with pytest.raises(ssl.SSLCertVerificationError):       # the name is not in the certificate
            tls_connect(s.tls_port, client_context(pki.ca.cert), host="queue.example.com")
        assert current_connections(s) == 1
    finally:
        s.stop()


def test_an_expired_certificate_is_refused_on_either_side(pki):
    s = tls_server(pki.expired)
    try:
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
            tls_connect(s.tls_port, client_context(pki.ca.cert))
    finally:
        s.stop()
    s = tls_server(pki.server, ca=pki.ca.cert)
    try:
        assert refused(s.tls_port, client_context(pki.ca.cert, pki.expired_client))
        assert current_connections(s) == 1
    finally:
        s.stop()


def refused(port, ctx):
    """True if the server ends a connection made with ctx: at the handshake
    (TLS 1.2), or at the first read (TLS 1.3 checks the client after it)."""
    try:
        with tls_connect(port, ctx) as t:
            ask(t, b"list-tube-used\r\n")
    except (ssl.SSLError, ConnectionError):
        return True
    return False


def test_mutual_tls_wants_a_client_certificate_from_the_ca(pki):
    s = tls_server(pki.server, ca=pki.ca.cert)
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert, pki.client)) as t:
            assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
        assert refused(s.tls_port, client_context(pki.ca.cert))
        assert refused(s.tls_port, client_context(pki.ca.cert, pki.foreign_client))
        assert current_connections(s) == 1
    finally:
        s.stop()
    assert "(TLS)" in s.log


def test_traced_tls_connections_log_their_reads(pki):
    s = tls_server(pki.server, "-VV")
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert)) as t:
            assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        s.stop()
    assert "'list-tube-used\\r\\n'" in s.log and "'USING default\\r\\n'" in s.log, s.log


def test_only_tls_when_no_plain_listener_is_asked_for(pki):
    port = free_port()
    cmd = [sys.executable, "-m", "fastbean", "--tls-listen", "localhost:%d" % port,
           "--tls-cert", pki.server[0], "--tls-key", pki.server[1]]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    try:
        wait_listening(port, p)
        with tls_connect(port, client_context(pki.ca.cert)) as t:
            assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        p.terminate()
        p.wait(10)
    log = p.stderr.read().decode()
    assert log.count("listening on") == 1, log


def start_fails(*args):
    p = subprocess.run([sys.executable, "-m", "fastbean", *map(str, args)], capture_output=True,
                       text=True, timeout=30)
    return p.returncode, p.stderr


def test_unusable_certificates_stop_the_start_with_one_line(pki, tmp_path):
    tls = ["--tls-listen", "%s:%d" % (HOST, free_port())]
    missing = str(tmp_path / "missing.pem")
    unreadable = tmp_path / "unreadable.pem"
    unreadable.write_bytes(open(pki.server[1], "rb").read())
    unreadable.chmod(0)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        (["--tls-cert", missing], "--tls-cert %s: No such file or directory" % missing),
        (["--tls-cert", pki.server[0], "--tls-key", missing], "--tls-key %s: No such" % missing),
        (["--tls-cert", garbage], "not a PEM certificate and its private key"),
        (["--tls-cert", pki.server[0], "--tls-key", pki.client[1]], "not a PEM certificate and its private key"),
        (["--tls-cert", pki.server[0], "--tls-key", pki.server[1], "--tls-ca", garbage],
         "--tls-ca %s: no PEM certificate in it" % garbage),
    ]
    if os.geteuid() != 0:           # root reads it anyway
        cases.append((["--tls-cert", pki.server[0], "--tls-key", unreadable], "Permission denied"))
    for flags, message in cases:
        status, err = start_fails(*tls, *flags)
        assert status == 78, (flags, err)
        lines = err.strip().splitlines()
        assert len(lines) == 2 and "starting" in lines[0] and message in lines[1], (flags, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--tls-listen", "127.0.0.1:1"], "--tls-listen needs --tls-cert"),
    (["--tls-ca", "x.pem"], "--tls-ca needs --tls-cert"),
    (["--tls-listen", "11300"], "invalid --tls-listen address"),
    (["--tls-listen", "[::1]11300"], "invalid --tls-listen address"),
    (["--tls-listen", "unix:"], "--tls-listen: no path"),
])
def test_tls_flag_mistakes_are_usage_errors(args, message):
    status, err = start_fails(*args)
    assert status == 5 and err.startswith("fastbean: " + message), err


def test_a_certificate_no_listener_uses_is_refused(pki):
    status, err = start_fails("-p", free_port(), "--tls-cert", pki.server[0], "--tls-key", pki.server[1])
    assert status == 5 and "--tls-cert: no listener speaks TLS" in err, err


def test_greenstalk_through_stunnel(pki, tmp_path):
    """An existing client library reaches a TLS listener as its users would:
    through a client-side stunnel that verifies the server and shows a client
    certificate (mutual TLS)."""
    s = tls_server(pki.server, ca=pki.ca.cert)
    local = free_port()
    conf = tmp_path / "stunnel.conf"
    conf.write_text("foreground = yes\npid =\n[beanstalk]\nclient = yes\naccept = %s:%d\n"
                    "connect = %s:%d\nverifyChain = yes\ncheckHost = localhost\nCAfile = %s\n"
                    "cert = %s\nkey = %s\nsslVersionMin = TLSv1.2\n"
                    % (HOST, local, HOST, s.tls_port, pki.ca.cert, pki.client[0], pki.client[1]))
    tunnel = subprocess.Popen([STUNNEL, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(local, tunnel)
        with greenstalk.Client((HOST, local), use="jobs", watch="jobs") as g:
            ids = [g.put("job %d" % i) for i in range(100)]
            for i, job_id in enumerate(ids):
                job = g.reserve(timeout=5)
                assert (job.id, job.body) == (job_id, "job %d" % i)
                g.delete(job)
            assert g.stats_tube("jobs")["total-jobs"] == 100
        deadline = time.monotonic() + 5
        while current_connections(s) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert current_connections(s) == 1
    finally:
        tunnel.terminate()
        tunnel.wait(10)
        s.stop()


def test_socket_activation_names_the_tls_socket(pki):
    # systemd passes two sockets; FileDescriptorName=tls marks the second
    plain, secure = socket.socket(), socket.socket()
    for s in (plain, secure):
        s.bind((HOST, 0))
        s.listen(16)
    ports = plain.getsockname()[1], secure.getsockname()[1]
    code = ("import os, sys; os.dup2(%d, 3); os.dup2(%d, 4); os.environ['LISTEN_FDS'] = '2'; "
            "os.environ['LISTEN_FDNAMES'] = 'beanstalk:tls'; os.environ['LISTEN_PID'] = str(os.getpid()); "
            "os.execv(sys.executable, [sys.executable, '-m', 'fastbean', '--tls-cert', %r, '--tls-key', %r])"
            % (plain.fileno(), secure.fileno(), pki.server[0], pki.server[1]))
    p = subprocess.Popen([sys.executable, "-c", code], pass_fds=[plain.fileno(), secure.fileno()],
                         stderr=subprocess.PIPE)
    plain.close()
    secure.close()
    try:
        with client(ports[0]) as c:
            assert c.cmd(b"list-tube-used") == b"USING default"
        with tls_connect(ports[1], client_context(pki.ca.cert)) as t:
            assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        p.terminate()
        p.wait(10)
    log = p.stderr.read().decode()
    assert "listening on %s:%d (TLS) (socket activation)" % (HOST, ports[1]) in log, log


def test_an_inherited_tls_socket_without_a_certificate_stops_the_start():
    secure = socket.socket()
    secure.bind((HOST, 0))
    secure.listen(16)
    code = ("import os, sys; os.dup2(%d, 3); os.environ['LISTEN_FDS'] = '1'; "
            "os.environ['LISTEN_FDNAMES'] = 'tls'; os.environ['LISTEN_PID'] = str(os.getpid()); "
            "os.execv(sys.executable, [sys.executable, '-m', 'fastbean'])" % secure.fileno())
    p = subprocess.run([sys.executable, "-c", code], pass_fds=[secure.fileno()], capture_output=True,
                       text=True, timeout=30)
    secure.close()
    assert p.returncode == 5 and 'named "tls": it needs --tls-cert' in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_the_context_refuses_tls_below_12(pki):
    from fastbean.server.tls import Certificates
    context = Certificates(*pki.server).context
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    assert Certificates(*pki.server, ca=pki.ca.cert).context.verify_mode == ssl.CERT_REQUIRED


def served_serial(port, ctx, host="localhost"):
    with tls_connect(port, ctx, host) as t:
        der = t.getpeercert(binary_form=True)
    from cryptography import x509
    return x509.load_der_x509_certificate(der).serial_number


def test_sighup_reloads_the_certificate_and_keeps_connections(pki, tmp_path):
    from tests.support.certs import serial_of
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    s = tls_server((cert, key))
    ctx = client_context(pki.ca.cert)
    try:
        assert served_serial(s.tls_port, ctx) == serial_of(pki.server[0])
        with tls_connect(s.tls_port, ctx) as old:
            assert ask(old, b"put 0 0 60 3\r\none\r\n") == b"INSERTED 1\r\n"
            shutil.copy(pki.server2[0], cert)
            shutil.copy(pki.server2[1], key)
            s.signal(signal.SIGHUP)
            wait_for_log(s, "TLS certificate reloaded", 1)
            # the open connection goes on; a new one gets the new certificate
            assert ask(old, b"reserve\r\n", b"one\r\n") == b"RESERVED 1 3\r\none\r\n"
            assert served_serial(s.tls_port, ctx) == serial_of(pki.server2[0])
            # files that cannot be used leave the last good ones serving
            with open(key, "w") as f:
                f.write("garbage\n")
            s.signal(signal.SIGHUP)
            wait_for_log(s, "TLS certificates not reloaded", 1)
            assert served_serial(s.tls_port, ctx) == serial_of(pki.server2[0])
            shutil.copy(pki.server[1], key)          # the first key, the second certificate
            s.signal(signal.SIGHUP)
            wait_for_log(s, "TLS certificates not reloaded", 2)
            assert served_serial(s.tls_port, ctx) == serial_of(pki.server2[0])
            assert ask(old, b"delete 1\r\n") == b"DELETED\r\n"
        assert s.running
    finally:
        s.stop()


def test_sighup_takes_a_ca_out_of_the_trust_store(pki, tmp_path):
    cas = tmp_path / "cas.pem"
    cas.write_text(open(pki.ca.cert).read() + open(pki.other_ca.cert).read())
    s = tls_server(pki.server, ca=str(cas))
    foreign = client_context(pki.ca.cert, pki.foreign_client)
    try:
        with tls_connect(s.tls_port, foreign) as kept:
            assert ask(kept, b"list-tube-used\r\n") == b"USING default\r\n"
            shutil.copy(pki.ca.cert, cas)           # the other CA taken out
            s.signal(signal.SIGHUP)
            wait_for_log(s, "TLS certificate reloaded", 1)
            assert refused(s.tls_port, foreign)
            with tls_connect(s.tls_port, client_context(pki.ca.cert, pki.client)) as t:
                assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
            assert ask(kept, b"list-tube-used\r\n") == b"USING default\r\n"     # open ones stay
    finally:
        s.stop()


def test_a_client_without_a_server_name_gets_the_reloaded_certificate(pki, tmp_path):
    from tests.support.certs import serial_of
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    s = tls_server((cert, key))
    bare = client_context(pki.ca.cert)
    bare.check_hostname = False
    try:
        assert served_serial(s.tls_port, bare, host=None) == serial_of(pki.server[0])
        shutil.copy(pki.server2[0], cert)
        shutil.copy(pki.server2[1], key)
        s.signal(signal.SIGHUP)
        wait_for_log(s, "TLS certificate reloaded", 1)
        assert served_serial(s.tls_port, bare, host=None) == serial_of(pki.server2[0])
    finally:
        s.stop()


def test_reloads_under_load_drop_nothing(pki, tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    s = tls_server((cert, key))
    ctx = client_context(pki.ca.cert)
    errors, done = [], threading.Event()

    def worker(n):
        try:
            while not done.is_set():
                with tls_connect(s.tls_port, ctx) as t:      # new handshakes all along
                    ask(t, b"use w%d\r\nwatch w%d\r\nignore default\r\n" % (n, n), b"WATCHING 1\r\n")
                    for _ in range(20):
                        reply = ask(t, b"put 0 0 60 2\r\nxx\r\n")
                        job = int(reply.split()[1])
                        assert ask(t, b"reserve\r\n", b"xx\r\n") == b"RESERVED %d 2\r\nxx\r\n" % job
                        assert ask(t, b"delete %d\r\n" % job) == b"DELETED\r\n"
        except Exception as e:     # noqa: BLE001 - reported by the test
            errors.append((n, repr(e)))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(10):
            pair = pki.server2 if i % 2 == 0 else pki.server
            shutil.copy(pair[0], cert)
            shutil.copy(pair[1], key)
            s.signal(signal.SIGHUP)
            wait_for_log(s, "TLS certificate reloaded", i + 1)
            time.sleep(0.05)
    finally:
        done.set()
        for t in threads:
            t.join(30)
        s.stop()
    assert errors == []
    assert "not reloaded" not in s.log


def wait_for_log(server, text, count, timeout=10.0):
    deadline = time.monotonic() + timeout
    while server.log.count(text) < count:
        assert time.monotonic() < deadline, server.log
        time.sleep(0.02)


def test_without_tls_sighup_ends_the_server_as_it_ends_beanstalkd():
    # under nohup the suite ignores SIGHUP, and a child would inherit that:
    # the server starts with SIGHUP's default action, as from a shell
    ignored = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        s = Server("fastbean").start()
    finally:
        signal.signal(signal.SIGHUP, ignored)
    s.signal(signal.SIGHUP)
    assert s.wait(10) == -signal.SIGHUP


def test_stalled_handshakes_are_closed_and_harm_no_one(pki):
    """Slowloris at the handshake: connections that send nothing, or half a
    ClientHello, are closed after the handshake timeout, and are never counted
    as clients meanwhile."""
    from fastbean.config import TLS_HANDSHAKE_TIMEOUT
    s = tls_server(pki.server)
    stalled = []
    try:
        with tls_connect(s.tls_port, client_context(pki.ca.cert)) as good:
            start = time.monotonic()
            for i in range(40):
                sock = socket.create_connection((HOST, s.tls_port), timeout=TLS_HANDSHAKE_TIMEOUT + 10)
                if i % 2:
                    sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")   # a ClientHello's start
                stalled.append(sock)
            assert ask(good, b"put 0 0 60 2\r\nok\r\n") == b"INSERTED 1\r\n"
            assert current_connections(s) == 2
            for sock in stalled:
                assert sock.recv(4096) == b""       # closed by the server, nothing sent
            waited = time.monotonic() - start
            assert TLS_HANDSHAKE_TIMEOUT - 1 < waited < TLS_HANDSHAKE_TIMEOUT + 5, waited
            assert ask(good, b"peek 1\r\n", b"ok\r\n") == b"FOUND 1 2\r\nok\r\n"
    finally:
        for sock in stalled:
            sock.close()
        s.stop()


@pytest.mark.timeout(600)
def test_many_idle_tls_connections(pki):
    """Idle TLS clients cost memory, not loop time: ten thousand stay open and
    answer; the memory each takes is reported."""
    n = 10000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 1000:         # for this process, and the server it starts
        assert hard >= n + 1000, "RLIMIT_NOFILE's hard limit %d is below %d" % (hard, n + 1000)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 1000, hard))
    s = tls_server(pki.server)
    ctx = client_context(pki.ca.cert)
    conns = []
    try:
        before = s.rss()
        for _ in range(n):
            conns.append(tls_connect(s.tls_port, ctx))
        assert current_connections(s) == n + 1
        after = s.rss()
        print("\n%d idle TLS connections: %.1f KiB of server RSS each" % (n, (after - before) / 1024 / n))
        for t in conns[::1000]:
            assert ask(t, b"list-tube-used\r\n") == b"USING default\r\n"
    finally:
        for t in conns:
            t.close()
        s.stop()


@pytest.mark.parametrize("how", ["close", "close-notify"])
def test_commands_behind_a_blocked_reserve_do_not_run_after_the_client_goes(pki, how):
    # Issue 35, defect 4, on TLS: the TLS layer closes the connection when
    # the client's stream ends (close_notify, or a bare FIN), so nothing can
    # be answered after it and nothing queued behind the reserve runs.
    s = tls_server(pki.server)
    try:
        t = tls_connect(s.tls_port, client_context(pki.ca.cert))
        assert ask(t, b"watch emptyq\r\nignore default\r\nreserve\r\nuse zz\r\nput 0 0 60 1\r\nx\r\n") == \
            b"WATCHING 2\r\nWATCHING 1\r\n"
        hang_up(t, how)
        deadline = time.monotonic() + 10
        while current_connections(s) != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with client(s.port) as c:
            assert c.cmd(b"stats-tube zz") == b"NOT_FOUND"
            assert c.stats()["total-jobs"] == 0
    finally:
        s.stop()
