"""What the console's tests share: a node with its console on a free port,
jobs in every state, and a plain HTTP client that keeps its cookie and
posts forms with the page's CSRF token."""
import hashlib
import http.cookiejar
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.support.certs import self_signed
from tests.support.servers import HOST, Server, client, free_port

# name -> (token, roles) of the tokens file of the signed-in tests
TOKENS = {"boss": ("a-console-boss-0a1b2c", "admin"),
          "mon": ("m-console-mon-5e7f9a", "monitor:emails,jobs-*"),
          "prod": ("p-console-prod-3c4d5e", "producer:emails")}
CSRF = re.compile(r'name="csrf(?:" value|-token" content)="([^"]+)"')


def write_tokens(path):
    path.write_text("".join("%s %s %s\n" % (name, hashlib.sha256(token.encode()).hexdigest(), roles)
                            for name, (token, roles) in TOKENS.items()))
    return str(path)


class Node:
    """A fastbean process with --console, its console's URL, and clients of its own."""

    def __init__(self, *args, tokens_dir=None, tls=False):
        self.console_port = free_port()
        extra = ["--console", "%s:%d" % (HOST, self.console_port)]
        self.cert = None
        if tokens_dir is not None or tls:
            cert, key = self_signed(str(tokens_dir), "node")
            self.cert = cert
            extra += ["--tls-cert", cert, "--tls-key", key]
            if tls:
                extra.append("--console-tls")
            if tokens_dir is not None:
                extra += ["--auth-tokens", write_tokens(tokens_dir / "tokens"),
                          "--tls-listen", "%s:%d" % (HOST, free_port())]
        self.scheme = "https" if tls else "http"
        self.server = Server("fastbean", *args, *extra, "--log-format", "json")
        self.holders = []       # connections kept open: they hold reserved jobs

    def start(self):
        self.server.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                self.http().get("/static/console.css")
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self):
        for c in self.holders:
            c.close()
        self.server.cleanup()

    @property
    def url(self):
        return "%s://%s:%d" % (self.scheme, HOST, self.console_port)

    def client(self):
        return client(self.server.port)

    def http(self):
        return Http(self.url, self.cert)

    def log(self):
        return self.server.log

    def fill(self, tube="emails"):
        """Jobs in every state in tube: ids by state."""
        c = self.client()
        c.use(tube)
        c.watch(tube)
        c.cmd(b"ignore default")
        ids = {"ready": [c.put(b'{"to": "ann@example.com", "n": %d}' % i, pri=10 + i) for i in range(3)]}
        ids["delayed"] = [c.put(b"later", delay=3600)]
        buried = c.put(b"bad job")
        reserved_id, _ = c.job(b"reserve-job %d" % buried)
        c.cmd(b"bury %d 5" % reserved_id, b"BURIED")
        ids["buried"] = [buried]
        held = c.put(b"in progress", pri=0)
        c.job(b"reserve-job %d" % held)
        ids["reserved"] = [held]
        self.holders.append(c)          # keeps its job reserved
        return ids


class Response:
    def __init__(self, status, headers, body, url):
        self.status = status
        self.headers = headers
        self.body = body
        self.url = url

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def csrf(self):
        found = CSRF.search(self.text)
        assert found, "no CSRF token in the page"
        return found.group(1)


class Http:
    """A browser without JavaScript: cookies, redirects, forms."""

    def __init__(self, base, cert=None):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        handlers = [urllib.request.HTTPCookieProcessor(self.jar)]
        if cert is not None:
            context = ssl.create_default_context(cafile=cert)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self.opener = urllib.request.build_opener(*handlers)

    def _open(self, request, timeout=10):
        try:
            with self.opener.open(request, timeout=timeout) as r:
                return Response(r.status, r.headers, r.read(), r.url)
        except urllib.error.HTTPError as e:
            return Response(e.code, e.headers, e.read(), e.url)

    def get(self, path, timeout=10):
        return self._open(urllib.request.Request(self.base + path), timeout)

    def post(self, path, fields=(), csrf=True, headers=None):
        fields = dict(fields)
        if csrf is True:
            fields["csrf"] = self.get("/").csrf()
        elif csrf:
            fields["csrf"] = csrf
        data = urllib.parse.urlencode(fields, doseq=True).encode()
        return self._open(urllib.request.Request(self.base + path, data=data, headers=headers or {}))

    def signin(self, name):
        return self.post("/signin", {"token": TOKENS[name][0], "next": "/"}, csrf=False)


def wait_for(condition, timeout=20.0, what="the condition"):
    """condition()'s first true value, polled until timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)
