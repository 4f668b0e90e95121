"""The console's pages: each a real URL, plain HTML that works without
JavaScript; console.js makes the overview and the search live."""
import asyncio
import json
import logging
import time
from urllib.parse import quote, urlencode

from aiohttp import web

from fastbean.console import actions
from fastbean.console.engine import ROW_FIELDS, STATES, TUBE_COLUMNS, parse_stats, tube_name
from fastbean.console.search import DEFAULT_MATCHES, MAX_MATCHES, BadQuery, Search
from fastbean.console.sessions import COOKIE, MONITOR
from fastbean.logs import event
from fastbean.server.protocol import peer_name

PAGE_SIZE = 100             # tubes per page of /tubes
JOBS_PAGE = 50              # jobs per page of a tube's jobs
MAX_PAGE = 1000             # the most a page may be asked to hold
HEAD_BYTES = 64             # bytes of a body shown in lists
BODY_SHOWN = 1 << 20        # bytes of a body the job page shows
MAX_STREAMS = 64            # open event streams; more get 503
MAX_REQUEUE = 10000         # dead letters one "requeue all" moves
HELD_SHOWN = 50             # reserved jobs listed per connection
PRETTY_MAX = 256 * 1024     # bytes of a body shown as indented JSON at most
TUBE_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-+/;.$_()")
MAX_PRI = (1 << 32) - 1
MAX_SECONDS = (1 << 32) - 1


def routes(app):
    r = app.router
    r.add_get("/", overview)
    r.add_get("/history.json", history)
    r.add_get("/events", events)
    r.add_get("/tubes", tubes)
    r.add_get("/tubes/{name}", tube)
    r.add_post("/tubes/{name}/{action}", tube_action)
    r.add_get("/jobs/{id}", job)
    r.add_post("/jobs/{id}/{action}", job_action)
    r.add_get("/search", search)
    r.add_get("/search.json", search_json)
    r.add_post("/search/cancel", search_cancel)
    r.add_get("/connections", connections)
    r.add_get("/schedules", schedules)
    r.add_get("/dead", dead)
    r.add_post("/dead/requeue", dead_requeue)
    r.add_get("/cluster", cluster)
    r.add_get("/signin", signin_page)
    r.add_post("/signin", signin)
    r.add_post("/signout", signout)


def _console(request):
    return request.app["console"]


def take_flash(session):
    """What the last action said, shown once on the next page."""
    flash, session.flash = session.flash, None
    return flash


def _flash(session, ok, message):
    session.flash = (ok, message)


def _see_other(where):
    return web.Response(status=303, headers={"Location": where})


# -- input ------------------------------------------------------------------------------

def _tube_arg(text, what="tube"):
    raw = text.encode("utf-8", "replace")
    if not 1 <= len(raw) <= 200 or raw[:1] == b"-" or not set(raw) <= TUBE_BYTES:
        raise web.HTTPBadRequest(text="%s: not a tube name (1 to 200 letters, digits and -+/;.$_()): %s"
                                      % (what, _short(text)))
    return raw


def _short(text):
    return text if len(text) <= 60 else text[:60] + "..."


def _int_arg(text, what, low=0, high=(1 << 63) - 1):
    if text is None or text == "":
        raise web.HTTPBadRequest(text="%s: a number is needed" % what)
    if not text.isascii() or not text.isdigit() or len(text) > 20 or not low <= int(text) <= high:
        raise web.HTTPBadRequest(text="%s: not a number from %d to %d: %s" % (what, low, high, _short(text)))
    return int(text)


def _opt_int(query, key, default, low, high):
    text = query.get(key)
    return default if text in (None, "") else _int_arg(text, key, low, high)


def _visible_tube(request, name):
    """tube name (bytes) of the URL, if the session may see it and it exists: else 404."""
    session = request["session"]
    raw = _tube_arg(name)
    if not session.sees(raw):
        raise web.HTTPNotFound(text="no tube %s" % name)
    return raw


def _visible_job(request, text):
    session = request["session"]
    job_id = _int_arg(text, "job id", 1)
    info = _console(request).reader.job(job_id)
    if info is None or not session.sees(info["tube"].encode()):
        raise web.HTTPNotFound(text="no job %d" % job_id)
    return job_id, info


def _address(request):
    return request.remote or "unix"


# -- overview ---------------------------------------------------------------------------

STAT_GROUPS = (
    ("Jobs", ("current-jobs-ready", "current-jobs-urgent", "current-jobs-delayed", "current-jobs-reserved",
              "current-jobs-buried", "total-jobs", "job-timeouts")),
    ("Commands", ("cmd-put", "cmd-reserve", "cmd-reserve-with-timeout", "cmd-delete", "cmd-release",
                  "cmd-bury", "cmd-kick", "cmd-touch", "cmd-pause-tube")),
    ("Connections", ("current-connections", "current-producers", "current-workers", "current-waiting",
                     "total-connections", "current-tubes")),
    ("Binlog", ("binlog-oldest-index", "binlog-current-index", "binlog-records-written",
                "binlog-records-migrated", "binlog-max-size")),
)


def _uptime(seconds):
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return "%dd %dh %dm" % (days, hours, minutes)
    if hours:
        return "%dh %dm %ds" % (hours, minutes, seconds)
    return "%dm %ds" % (minutes, seconds)


def _replication(server):
    if server.replicator is None:
        return None
    ready, why = server.readiness()
    out = {k[len("replication-"):]: v for k, v in parse_stats(server.replicator.stats()).items()}
    out["ready"] = ready
    out["why"] = why
    return out


async def overview(request):
    console = _console(request)
    server = console.server
    stats = console.reader.stats()
    ready, why = server.readiness()
    core = server.core
    groups = [(title, [(k, stats.get(k, "")) for k in keys]) for title, keys in STAT_GROUPS]
    binlog = None
    if server.disk is not None:
        binlog = {"dir": server.config.binlog_dir, "failing": server.disk.failing,
                  "fsync": ("every %d ms" % server.config.fsync_ms if server.config.fsync_ms else "every write")
                  if server.config.fsync else "never"}
    return console.render(
        request, "overview.html", stats=stats, groups=groups, ready=ready, why=why,
        uptime=_uptime(stats.get("uptime", 0)), binlog=binlog, replication=_replication(server),
        memory=core.mem_used, max_memory=core.max_memory, phase=server.phase)


async def history(request):
    return web.json_response(list(_console(request).sampler.samples))


async def events(request):
    """Server-sent events: one small JSON sample a second, while the page is open."""
    console = _console(request)
    if console.streams >= MAX_STREAMS:
        raise web.HTTPServiceUnavailable(text="too many open event streams")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    await response.prepare(request)
    console.streams += 1
    try:
        while True:
            sample = await asyncio.shield(console.sampler.next())
            if sample is None:
                break
            await response.write(b"data: " + json.dumps(sample).encode() + b"\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        console.streams -= 1
    return response


# -- tubes -------------------------------------------------------------------------------

def _page_link(request, **changes):
    query = dict(request.query)
    query.update({k: str(v) for k, v in changes.items() if v is not None})
    for k, v in changes.items():
        if v is None:
            query.pop(k, None)
    return request.path + ("?" + urlencode(query) if query else "")


async def tubes(request):
    console = _console(request)
    session = request["session"]
    query = request.query
    text = query.get("q", "")
    if len(text) > 200:
        raise web.HTTPBadRequest(text="a filter of at most 200 characters")
    sort = query.get("sort", "name")
    if sort != "name" and sort not in TUBE_COLUMNS:
        raise web.HTTPBadRequest(text="no column %s" % _short(sort))
    desc = query.get("dir", "asc") == "desc"
    page = _opt_int(query, "page", 1, 1, 1 << 31)
    reader = console.reader
    # the numbers a slice of tubes a loop turn; Python sorts tuples and
    # builds only the page shown
    rows = await reader.tube_rows(session.sees, text.encode("ascii", "replace"))
    rows.sort(key=lambda row: row[0], reverse=desc and sort == "name")
    if sort != "name":
        # stable: equal values stay in name order
        rows.sort(key=reader.column_key(sort), reverse=desc)
    pages = max(1, (len(rows) + PAGE_SIZE - 1) // PAGE_SIZE)
    page = min(page, pages)
    shown = [(tube_name(row[0]), reader.columns(row)) for row in rows[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]]
    sorts = {c: _page_link(request, sort=c, dir="desc" if c == sort and not desc else "asc", page=None)
             for c in ("name",) + TUBE_COLUMNS}
    return console.render(request, "tubes.html", rows=shown, count=len(rows), q=text, sort=sort, desc=desc,
                          page=page, pages=pages, columns=TUBE_COLUMNS, sorts=sorts,
                          prev=_page_link(request, page=page - 1) if page > 1 else None,
                          next=_page_link(request, page=page + 1) if page < pages else None)


def _cursor(text):
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise web.HTTPBadRequest(text="not a page cursor: %s" % _short(text)) from None


def _row(raw, holders=None):
    row = dict(zip(ROW_FIELDS, raw))
    holder = row["holder"]
    row["holder"] = _holder_name(holder, holders) if holder is not None else None
    row["head"] = _text(row["head"][:HEAD_BYTES])
    return row


def _holders(server):
    """engine Conn -> the address of its client, for the connections open now."""
    out = {}
    for proto in server.connections:
        conn = proto.engine_conn() if hasattr(proto, "engine_conn") else None
        transport = getattr(proto, "_transport", None)
        if conn is not None and transport is not None:
            out[conn] = peer_name(transport.get_extra_info("peername"))
    return out


def _holder_name(conn, holders=None):
    if holders is None:
        return "a connection"
    return holders.get(conn, "the console")


def _text(body):
    return body.decode("utf-8", "replace")


async def tube(request):
    console = _console(request)
    name = request.match_info["name"]
    raw = _visible_tube(request, name)
    info = console.reader.tube(raw)
    if info is None:
        raise web.HTTPNotFound(text="no tube %s" % name)
    state = request.query.get("state", "ready")
    if state not in STATES:
        raise web.HTTPBadRequest(text="no state %s (ready, delayed, reserved, buried)" % _short(state))
    count = _opt_int(request.query, "count", JOBS_PAGE, 1, MAX_PAGE)
    after = _cursor(request.query.get("after"))
    listing = await console.reader.listing(raw, state, after, count)
    holders = _holders(console.server) if state == "reserved" else None
    rows = [_row(r, holders) for r in listing.rows]
    more = None
    if listing.after is not None:
        more = _page_link(request, after=".".join(str(x) for x in listing.after))
    return console.render(request, "tube.html", name=name, info=info, state=state, states=STATES,
                          rows=rows, total=listing.total, more=more, first=_page_link(request, after=None),
                          paged=after is not None)


def _form_int(form, key, what, low=0, high=(1 << 63) - 1):
    return _int_arg(form.get(key, "").strip(), what, low, high)


async def _act(request, back, action, **args):
    console = _console(request)
    session = request["session"]
    try:
        reply = await actions.perform(console.server, session, _address(request), action, **args)
    except actions.ActionError as e:
        status = 403 if "may not" in str(e) else 409
        return console.error(request, status, "%s: %s" % (action, e))
    _flash(session, True, "%s: %s" % (action, reply))
    raise web.HTTPSeeOther(back)


async def tube_action(request):
    name = request.match_info["name"]
    raw = _visible_tube(request, name)
    form = request["form"]
    action = request.match_info["action"]
    back = "/tubes/" + quote(name, safe="")
    if action == "pause":
        return await _act(request, back, "pause", tube=raw, seconds=_form_int(form, "seconds", "seconds", 0,
                                                                               MAX_SECONDS))
    if action == "resume":
        return await _act(request, back, "pause", tube=raw, seconds=0)
    if action == "kick":
        return await _act(request, back, "kick", tube=raw, count=_form_int(form, "count", "count", 1, MAX_SECONDS))
    if action in ("flush-buried", "flush-tube"):
        return await _act(request, back, action, tube=raw)
    if action == "retry-limit":
        if form.get("default"):
            return await _act(request, back, "retry-limit", tube=raw, count=None)
        count = _form_int(form, "count", "retry limit", 0, MAX_SECONDS)
        dead = form.get("dead", "").strip()
        return await _act(request, back, "retry-limit", tube=raw, count=count,
                          dead=_tube_arg(dead, "dead-letter tube") if dead else None)
    raise web.HTTPNotFound(text="no action %s" % _short(action))


# -- jobs --------------------------------------------------------------------------------

def _pretty_json(body):
    if len(body) > PRETTY_MAX or body[:1] not in b"{[":
        return None         # parsing a big body would hold the loop for long
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False, sort_keys=True)
    except (ValueError, RecursionError):
        return None


def _hex(body):
    lines = []
    for i in range(0, len(body), 16):
        chunk = body[i:i + 16]
        lines.append("%08x  %-47s  %s" % (i, chunk.hex(" "), "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)))
    return "\n".join(lines)


JOB_FIELDS = ("id", "tube", "state", "pri", "age", "delay", "ttr", "time-left", "file", "reserves", "timeouts",
              "releases", "buries", "kicks", "size")


async def job(request):
    console = _console(request)
    job_id, info = _visible_job(request, request.match_info["id"])
    body = console.reader.body(job_id, BODY_SHOWN) or b""
    fields = [(k, info.get(k)) for k in JOB_FIELDS if k in info]
    holder = info.get("holder")
    origin = console.reader.origin(job_id)
    return console.render(request, "job.html", job_id=job_id, info=info, fields=fields,
                          holder=_holder_name(holder, _holders(console.server)) if holder is not None else None,
                          text=_text(body), pretty=_pretty_json(body), hexdump=_hex(body[:4096]),
                          truncated=info.get("size", len(body)) > len(body), hex_cut=len(body) > 4096,
                          origin=tube_name(origin) if origin else None)


async def job_action(request):
    console = _console(request)
    job_id, info = _visible_job(request, request.match_info["id"])
    form = request["form"]
    action = request.match_info["action"]
    back = "/jobs/%d" % job_id
    if action == "delete":
        return await _act(request, "/tubes/" + quote(info["tube"], safe=""), "delete", job=job_id)
    if action == "kick":
        return await _act(request, back, "kick-job", job=job_id)
    if action == "move":
        return await _act(request, back, "move", job=job_id, tube=_tube_arg(form.get("tube", "").strip()))
    if action == "priority":
        return await _act(request, back, "reprioritize", job=job_id,
                          pri=_form_int(form, "pri", "priority", 0, MAX_PRI))
    if action == "copy":
        target = form.get("tube", "").strip() or info["tube"]
        body = console.reader.body(job_id)
        if body is None:
            raise web.HTTPNotFound(text="no job %d" % job_id)
        try:
            reply = await actions.perform(console.server, request["session"], _address(request), "copy",
                                          tube=_tube_arg(target), pri=info["pri"], delay=0, ttr=max(info["ttr"], 1),
                                          body=body)
        except actions.ActionError as e:
            return console.error(request, 403 if "may not" in str(e) else 409, "copy: %s" % e)
        new = reply.split()[1] if len(reply.split()) > 1 else None
        _flash(request["session"], True, "copy: %s" % reply)
        raise web.HTTPSeeOther("/jobs/%s" % new if new and new.isdigit() else back)
    if action == "requeue":
        origin = console.reader.origin(job_id)
        if origin is None:
            raise web.HTTPConflict(text="job %d has no tube of origin" % job_id)
        return await _act(request, back, "move", job=job_id, tube=origin)
    raise web.HTTPNotFound(text="no action %s" % _short(action))


# -- search ------------------------------------------------------------------------------

def _search_args(request):
    query = request.query
    tube = query.get("tube", "").strip()
    states = [s for s in STATES if query.get(s) or query.get("state") == s]
    limit = _opt_int(query, "limit", DEFAULT_MATCHES, 1, MAX_MATCHES)
    return query.get("q", ""), (_tube_arg(tube) if tube else None), states, bool(query.get("regex")), limit


def _current_search(request, start):
    console = _console(request)
    session = request["session"]
    text, tube, states, regex, limit = _search_args(request)
    if not text:
        return None
    if tube is not None and not session.sees(tube):
        raise web.HTTPNotFound(text="no tube %s" % tube.decode())
    try:
        wanted = Search(console.reader, session.sees, text, tube, states, regex, limit)
    except BadQuery as e:
        raise web.HTTPBadRequest(text=str(e)) from None
    current = session.search
    if current is not None and current.key == wanted.key and not (start and request.query.get("again")):
        return current
    if not start:
        return current if current is not None and current.key == wanted.key else None
    if current is not None:
        current.cancel()
    session.search = wanted.start(console.server.loop)
    return wanted


def _results(console, found):
    rows = []
    for job_id in list(found.matches):
        info = console.reader.job(job_id)
        if info is None:
            continue
        head = console.reader.body(job_id, HEAD_BYTES) or b""
        rows.append({"id": job_id, "tube": info["tube"], "state": info["state"], "pri": info["pri"],
                     "age": info["age"], "size": info.get("size"), "head": _text(head)})
    return rows


def _summary(found):
    return {"state": found.state, "matches": len(found.matches), "scanned": found.scanned, "total": found.total,
            "elapsed": round(found.elapsed, 3), "error": found.error}


async def search(request):
    console = _console(request)
    found = _current_search(request, True)
    text, tube, states, regex, limit = _search_args(request)
    return console.render(request, "search.html", found=found, rows=_results(console, found) if found else [],
                          summary=_summary(found) if found else None, q=text,
                          tube=tube.decode() if tube else "", states=STATES, chosen=states, regex=regex,
                          limit=limit, tubes=console.reader.tube_names(request["session"].sees, 1000))


async def search_json(request):
    console = _console(request)
    found = _current_search(request, False)
    if found is None:
        raise web.HTTPNotFound(text="no such search running")
    out = _summary(found)
    out["rows"] = _results(console, found)
    return web.json_response(out)


async def search_cancel(request):
    session = request["session"]
    if session.search is not None:
        session.search.cancel()
    back = request["form"].get("back", "/search")
    raise web.HTTPSeeOther(back if back.startswith("/search") else "/search")


# -- connections ------------------------------------------------------------------------

async def connections(request):
    console = _console(request)
    session = request["session"]
    rows = []
    for number, proto in enumerate(console.server.connections, 1):
        transport = getattr(proto, "_transport", None)
        if transport is None:
            continue
        row = {"address": peer_name(transport.get_extra_info("peername")),
               "listener": _sockname(transport.get_extra_info("sockname")),
               "client": getattr(proto, "client_name", None) or "", "info": None}
        conn = proto.engine_conn() if hasattr(proto, "engine_conn") else None
        info_of = getattr(conn, "info", None)
        if info_of is not None:
            info = info_of()
            watch = [t for t in info["watch"] if session.sees(t)]
            use = info["use"] if session.sees(info["use"]) else None
            held = []
            for job_id, left in info["reserved"]:
                tube_of = console.server.core.job_tube(job_id)
                if tube_of is not None and session.sees(tube_of):
                    held.append((job_id, round(left, 1)))
            if not session.roles.admin and use is None and not watch and not held:
                continue
            wait_left = info.get("wait_left")
            more = max(len(held) - HELD_SHOWN, 0)       # a batch worker may hold thousands
            held = held[:HELD_SHOWN]
            row["info"] = {"id": number, "use": tube_name(use) if use is not None else "(hidden)",
                           "watch": [tube_name(t) for t in watch], "held": held, "more": more,
                           "waiting": info["waiting"],
                           "wait_left": round(wait_left, 1) if wait_left is not None else None,
                           "producer": info.get("producer"), "worker": info.get("worker")}
        elif not session.roles.admin:
            continue
        rows.append(row)
    rows.sort(key=lambda r: (not (r["info"] and r["info"]["held"]), r["address"]))
    return console.render(request, "connections.html", rows=rows)


def _when(ns):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ns // 1000000000)) if ns else None


async def schedules(request):
    """Every schedule in a tube the session sees: enabled or paused, next and
    last firing (protocol-extensions.md "Schedules")."""
    console = _console(request)
    session = request["session"]
    rows = [{"name": s["name"].decode("ascii", "replace"), "tube": tube_name(s["tube"]),
             "spec": s["spec"].decode("ascii", "replace"), "misfire": s["misfire"],
             "paused": s["paused"], "next": _when(s["next"]), "last": _when(s["last"]),
             "fires": s["fires"], "runs": s["runs"]}
            for s in console.server.core.schedule_info() if session.sees(s["tube"])]
    return console.render(request, "schedules.html", rows=rows)


def _sockname(name):
    return peer_name(name) if isinstance(name, tuple) else ("unix:" + name if name else "unix")


# -- dead letters ------------------------------------------------------------------------

def _dead_tubes(console, session):
    """The dead-letter tubes: --dead-letter-tube's, and those of the tubes' retry limits."""
    tubes = set()
    default = console.server.config.dead_letter_tube
    if default:
        tubes.add(default.encode())
    core = console.server.core
    for name in core.tube_names():
        info = core.tube_info(name)
        dead = info.get("dead-letter-tube") if info is not None else None
        if dead:
            tubes.add(dead if isinstance(dead, bytes) else dead.encode())
    return sorted(tube_name(t) for t in tubes if session.sees(t))


async def dead(request):
    console = _console(request)
    session = request["session"]
    chosen = request.query.get("tube", "")
    tubes = _dead_tubes(console, session)
    name = chosen or (tubes[0] if tubes else "")
    rows, total, more = [], 0, None
    if name:
        raw = _visible_tube(request, name)
        if console.reader.tube(raw) is not None:
            after = _cursor(request.query.get("after"))
            listing = await console.reader.listing(raw, "ready", after, JOBS_PAGE)
            total = listing.total
            for r in listing.rows:
                row = _row(r)
                origin = console.reader.origin(row["id"])
                row["origin"] = tube_name(origin) if origin else None
                rows.append(row)
            if listing.after is not None:
                more = _page_link(request, after=".".join(str(x) for x in listing.after))
    return console.render(request, "dead.html", tubes=tubes, name=name, rows=rows, total=total, more=more)


async def dead_requeue(request):
    console = _console(request)
    session = request["session"]
    form = request["form"]
    name = form.get("tube", "")
    raw = _visible_tube(request, name)
    if form.get("all"):
        ids = []
        after = None
        while len(ids) < MAX_REQUEUE:
            listing = await console.reader.listing(raw, "ready", after, MAX_PAGE)
            ids.extend(r[0] for r in listing.rows)
            after = listing.after
            if after is None:
                break
        ids = ids[:MAX_REQUEUE]
    else:
        ids = [_int_arg(v, "job id", 1) for v in form.getall("job", [])]
    moves, skipped = [], 0
    for job_id in ids:
        origin = console.reader.origin(job_id)
        if origin is None or console.server.core.job_tube(job_id) != raw or not session.sees(origin):
            skipped += 1
        else:
            moves.append((job_id, origin))
    moved = 0
    if moves:
        try:
            reply = await actions.perform(console.server, session, _address(request), "requeue", tube=raw,
                                          moves=moves)
        except actions.ActionError as e:
            return console.error(request, 403 if "may not" in str(e) else 409, "requeue: %s" % e)
        moved = int(reply.split()[1])
        skipped += len(moves) - moved
    _flash(session, True, "requeued %d job%s%s" % (moved, "" if moved == 1 else "s",
                                                   ", skipped %d" % skipped if skipped else ""))
    raise web.HTTPSeeOther("/dead?tube=" + quote(name, safe=""))


# -- cluster -----------------------------------------------------------------------------

async def cluster(request):
    console = _console(request)
    server = console.server
    replication = _replication(server)
    lease = None
    nodes = []
    if server.replicator is not None:
        rep = server.replicator
        lease = {"held": rep.lease.held, "ttl": rep.lease.ttl,
                 "left": max(rep.lease.valid_until - time.monotonic(), 0.0), "holder": None, "error": None}
        try:
            _, value = await asyncio.wait_for(rep.link.lease_read(), 2.0)
            lease["holder"] = value.decode("utf-8", "replace").split(" ", 1)[0] if value else None
            _, last, _ = await asyncio.wait_for(rep.link.last_seq(), 2.0)
            # how far this node's engine is behind the stream, in messages
            replication["stream-last"] = last
            replication["lag"] = max(last - rep.log.applied, 0)
            nodes = _nodes(await asyncio.wait_for(rep.link.status_read(), 2.0), last, lease["holder"])
        except Exception as e:  # noqa: BLE001 - NATS away: said on the page
            lease["error"] = str(e) or type(e).__name__
    return console.render(request, "cluster.html", replication=replication, lease=lease, nodes=nodes,
                          nats=getattr(getattr(server.replicator, "link", None), "servers", None))


def _nodes(statuses, last, holder):
    """Every node's last status (replication/__init__.py's status()), with
    its lag behind the stream and how long ago it wrote."""
    now = time.time()
    nodes = []
    for name, data in statuses.items():
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        doc["name"] = name
        doc["lag"] = max(last - int(doc.get("applied") or 0), 0)
        doc["seen"] = max(now - float(doc.get("at") or now), 0.0)
        doc["holder"] = name == holder
        url = doc.get("console")
        doc["console"] = url if isinstance(url, str) and url.startswith(("http://", "https://")) else None
        nodes.append(doc)
    return nodes


# -- sign-in -----------------------------------------------------------------------------

def _next(text):
    # a path of this site only: "//host" and "/\\host" are other sites to a browser
    return text if text.startswith("/") and not text.startswith(("//", "/\\")) and len(text) < 2048 else "/"


async def signin_page(request):
    console = _console(request)
    if console.auth is None:
        raise web.HTTPSeeOther("/")
    return console.render(request, "signin.html", next=_next(request.query.get("next", "/")), failed=None)


async def signin(request):
    console = _console(request)
    if console.auth is None:
        raise web.HTTPSeeOther("/")
    form = await request.post()
    nxt = _next(form.get("next", "/"))
    address = _address(request)
    auth = console.auth
    if auth.limited(address):
        return console.render(request, "signin.html", status=429, next=nxt,
                              failed="too many failed attempts from your address: wait a minute")
    token = form.get("token", "").strip().encode()
    found = auth.check(token, address) if token else None
    if found is None:
        event(logging.WARNING, "auth-failed", "%(address)s sent the console a token that is not in %(path)s",
              address=address, path=auth.path)
        return console.render(request, "signin.html", status=401, next=nxt, failed="that token is not known")
    name, roles = found
    if not roles.admin and MONITOR not in roles.globs:
        return console.render(request, "signin.html", status=403, next=nxt,
                              failed="the console wants a monitor's or an admin's token")
    old = request.get("session")
    if old is not None:
        console.sessions.end(old.id)
    session = console.sessions.new(name, roles)
    event(logging.INFO, "console-signin", "%(client)s (%(address)s) signed in to the console as %(roles)s",
          client=name, address=address, roles=str(roles))
    response = _see_other(nxt)
    console.set_cookie(response, session)
    return response


async def signout(request):
    console = _console(request)
    session = request["session"]
    console.sessions.end(session.id)
    response = _see_other("/signin" if console.auth is not None else "/")
    response.del_cookie(COOKIE, path="/")
    return response
