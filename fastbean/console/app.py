"""The console's aiohttp application: its routes, the middlewares that sign
people in, check CSRF tokens and turn errors into short pages, the headers
every response carries, and its start and stop on the node's loop."""
import logging
import os
from urllib.parse import quote

import jinja2
from aiohttp import web

from fastbean import __version__
from fastbean.console import pages
from fastbean.console.engine import Reader
from fastbean.console.history import Sampler
from fastbean.console.sessions import COOKIE, LOCAL, Sessions
from fastbean.logs import event
from fastbean.sockets import describe

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_QUERY_STRING = 4096         # bytes of a query string; longer ones get 414
MAX_BODY = 64 * 1024            # bytes of a form
OPEN_PATHS = ("/signin", "/static/")      # served without a session
DATA_PATHS = ("/events", "/history.json", "/search.json")     # what scripts fetch, not pages
# Every response: no script, style or frame from anywhere but here, none inline.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Console:
    """The console of one server: its application, sessions and history."""

    def __init__(self, server):
        self.server = server
        self.auth = server.auth                 # tokens.TokenAuth with --auth-tokens: sign-in wants one
        self.reader = Reader(server)
        self.sessions = Sessions()
        self.sampler = Sampler(server.loop, self.reader)
        self.streams = 0                        # open event streams
        self.tls = False
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
            autoescape=True, undefined=jinja2.StrictUndefined)
        self.templates.filters["quote"] = lambda s: quote(s, safe="")
        self.app = self._app()
        self._runner = None

    def _app(self):
        app = web.Application(middlewares=[self._errors, self._session], client_max_size=MAX_BODY)
        app["console"] = self
        app.on_response_prepare.append(_secure)
        pages.routes(app)
        app.router.add_static("/static/", os.path.join(HERE, "static"))
        return app

    async def start(self, sock, tls=None):
        self.tls = tls is not None
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, ssl_context=tls, shutdown_timeout=1.0).start()
        self.sampler.start()
        event(logging.INFO, "console", "web console on %(scheme)s://%(address)s/" +
              (" (sign in with a token of %(tokens)s)" if self.auth is not None else ""),
              scheme="https" if tls is not None else "http", address=describe(sock),
              tokens=self.auth.path if self.auth is not None else None)

    async def close(self):
        self.sampler.stop()
        self.sessions.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def render(self, request, template, status=200, **values):
        session = request.get("session")
        text = self.templates.get_template(template).render(
            session=session, server=self.server, path=request.path, request=request,
            signin=self.auth is not None, flash=request.get("flash"), version=__version__, **values)
        return web.Response(text=text, status=status, content_type="text/html")

    def error(self, request, status, reason):
        return self.render(request, "error.html", status=status, status_code=status, reason=reason)

    # -- middlewares -----------------------------------------------------------------

    @web.middleware
    async def _errors(self, request, handler):
        if len(request.query_string) > MAX_QUERY_STRING:
            return self.error(request, 414, "a query string of at most %d bytes" % MAX_QUERY_STRING)
        try:
            return await handler(request)
        except web.HTTPRedirection:
            raise
        except web.HTTPException as e:
            if e.status < 400:
                raise
            reason = e.text if e.text and not e.text.startswith("%d:" % e.status) else e.reason
            return self.error(request, e.status, reason)
        except Exception as e:  # noqa: BLE001 - a page's fault is logged and answered, never shown
            event(logging.ERROR, "console-error", "console: %(method)s %(path)s failed: %(error)s",
                  exc_info=True, method=request.method, path=request.path, error=repr(e))
            return self.error(request, 500, "internal error (the node's log says more)")

    @web.middleware
    async def _session(self, request, handler):
        session = self.sessions.get(request.cookies.get(COOKIE))
        fresh = False
        if session is None and self.auth is None:
            # without tokens the console listens on loopback only: all there are admins
            session = self.sessions.new(LOCAL)
            fresh = True
        request["session"] = session
        if session is not None and request.path not in DATA_PATHS and not request.path.startswith("/static/"):
            request["flash"] = pages.take_flash(session)        # for the page, not a script's fetch
        if session is None and not request.path.startswith(OPEN_PATHS):
            if request.method == "GET" and request.path not in DATA_PATHS:
                raise web.HTTPSeeOther("/signin?next=" + quote(request.path_qs, safe=""))
            return self.error(request, 401, "sign in first")
        if request.method == "POST" and request.path != "/signin":
            origin = request.headers.get("Origin")
            if origin is not None and origin not in ("null",) and origin.split("://", 1)[-1] != request.host:
                return self.error(request, 403, "a form from another site")
            form = await request.post()
            request["form"] = form
            if session is None or not session.csrf_ok(form.get("csrf")):
                return self.error(request, 403, "missing or wrong CSRF token: reload the page and try again")
        response = await handler(request)
        if fresh:
            self.set_cookie(response, session)
        return response

    def set_cookie(self, response, session):
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="Strict", secure=self.tls, path="/")


async def _secure(request, response):
    for name, value in SECURITY_HEADERS.items():
        if name == "Cache-Control" and request.path.startswith("/static/"):
            continue
        response.headers.setdefault(name, value)
