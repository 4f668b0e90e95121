"""/metrics: the server's state in Prometheus' text format (exposition()).

A scrape reads the engine's state where it lives, between two loop turns
(http.py serves it); per-tube series exist only for the --metrics-tubes
tubes holding the most jobs, found in one pass in compiled code.
"""
import bisect
import logging
import os
import platform
import time

from fastbean import __version__
from fastbean.engine.core import (
    JOB_OVERHEAD_BYTES,
    TUBE_KEYS,
    TUBE_SUMMED,
    latency_histograms,
    stats_text,
    tube_rows,
)
from fastbean.logs import event

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# `*` cannot appear in a tube name, so this label value never names a real tube.
OTHER_TUBES = "*other*"
# stats keys that are not numbers (fastbean_build_info has the version), or
# not about the queue; the beanstalkd exporter leaves out pid, id and hostname too.
SKIPPED_STATS = frozenset({"pid", "version", "id", "hostname", "os", "platform"})

STATS_HELP = {
    "current-jobs-urgent": "Ready jobs with priority < 1024.",
    "current-jobs-ready": "Jobs in the ready queues.",
    "current-jobs-reserved": "Jobs reserved by some client.",
    "current-jobs-delayed": "Delayed jobs.",
    "current-jobs-buried": "Buried jobs.",
    "job-timeouts": "Reservations that ended because their TTR ran out.",
    "total-jobs": "Jobs created since start.",
    "max-job-size": "Largest job body accepted, in bytes (-z).",
    "current-tubes": "Tubes that exist.",
    "current-connections": "Open client connections.",
    "current-producers": "Open connections that have sent a put.",
    "current-workers": "Open connections that have sent a reserve.",
    "current-waiting": "Connections blocked in a reserve.",
    "total-connections": "Connections accepted since start.",
    "rusage-utime": "User CPU time of the process, in seconds.",
    "rusage-stime": "System CPU time of the process, in seconds.",
    "uptime": "Seconds since the server started.",
    "binlog-oldest-index": "Number of the oldest binlog file in use.",
    "binlog-current-index": "Number of the binlog file being written.",
    "binlog-records-migrated": "Binlog records rewritten by compaction.",
    "binlog-records-written": "Binlog records written.",
    "binlog-max-size": "Size of each binlog file, in bytes (-s).",
    "draining": "1 while in drain mode (SIGUSR1): puts are refused.",
}
TUBE_HELP = {
    "current-jobs-urgent": "Ready jobs with priority < 1024 in the tube.",
    "current-jobs-ready": "Ready jobs in the tube.",
    "current-jobs-reserved": "Reserved jobs of the tube.",
    "current-jobs-delayed": "Delayed jobs in the tube.",
    "current-jobs-buried": "Buried jobs in the tube.",
    "total-jobs": "Jobs created in the tube since start.",
    "current-using": "Connections using the tube.",
    "current-watching": "Connections watching the tube.",
    "current-waiting": "Connections blocked in a reserve on the tube.",
    "cmd-delete": "delete commands run on the tube's jobs.",
    "cmd-pause-tube": "pause-tube commands run on the tube.",
    "pause": "Seconds of the tube's current pause; 0 when not paused.",
    "pause-time-left": "Seconds left in the tube's pause.",
}


# Seconds a schedule's job was made after its occurrence (the timer's delay,
# a busy loop, an outage's one misfire firing).
LAG_BOUNDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 300.0, 3600.0)


class ScheduleLags:
    """The lag of every firing since the server started, for /metrics
    (the engine counts the firings; this keeps their lag)."""

    def __init__(self):
        self.counts = [0] * (len(LAG_BOUNDS) + 1)
        self.total = 0.0
        self.last = {}          # schedule name -> lag of its last firing, seconds

    def add(self, name, lag, manual):
        if manual:
            return              # fire-schedule: no occurrence to be late for
        lag = max(lag, 0.0)
        self.counts[bisect.bisect_left(LAG_BOUNDS, lag)] += 1
        self.total += lag
        self.last[name] = lag

    def fired(self, fired):
        """The engine's on_fire hook: a schedule made a job. Its lag is kept,
        and a log event says it."""
        name, tube, jid, occurrence, lag_ns, manual = fired
        self.add(name, lag_ns / 1e9, manual)
        event(logging.INFO, "schedule-fired",
              "schedule %(schedule)s put job %(id)d in %(tube)s" + (
                  " (fire-schedule)" if manual else " for %(occurrence)s, %(lag).3f s after it"),
              schedule=name.decode("latin-1"), tube=tube.decode("latin-1"), id=jid,
              occurrence=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(occurrence // 1000000000)),
              lag=round(lag_ns / 1e9, 6), manual=manual)


def _schedules(out, server):
    core = server.core
    info = core.schedule_info()
    names = ['{schedule="%s"}' % _label(s["name"].decode("latin-1")) for s in info]
    _metric(out, "fastbean_schedule_fires_total", "counter",
            "Occurrences each schedule has fired since it was defined (kept across restarts).",
            [(n, s["fires"]) for n, s in zip(names, info)])
    _metric(out, "fastbean_schedule_runs_total", "counter",
            "Extra jobs fire-schedule made of each schedule since it was defined.",
            [(n, s["runs"]) for n, s in zip(names, info)])
    _metric(out, "fastbean_schedule_paused", "gauge", "1 while the schedule is paused.",
            [(n, int(s["paused"])) for n, s in zip(names, info)])
    _metric(out, "fastbean_schedule_next_fire_timestamp_seconds", "gauge",
            "When each schedule fires next (Unix time; 0: paused or never).",
            [(n, (s["next"] or 0) / 1e9) for n, s in zip(names, info)])
    _metric(out, "fastbean_schedule_last_fire_timestamp_seconds", "gauge",
            "The occurrence each schedule fired last (Unix time; 0: none yet).",
            [(n, (s["last"] or 0) / 1e9) for n, s in zip(names, info)])
    lags = server.schedule_lags
    _metric(out, "fastbean_schedule_last_lag_seconds", "gauge",
            "How long after its occurrence the schedule's last job was made (since the server started).",
            [(n, lags.last[s["name"]]) for n, s in zip(names, info) if s["name"] in lags.last])
    _metric(out, "fastbean_schedule_misfires_total", "counter",
            "Occurrences that fell while no node served and were skipped or folded into one firing.",
            [("", core.sched_misfires)])
    _histogram(out, "fastbean_schedule_lag_seconds",
               "How long after its occurrence each schedule's job was made.",
               LAG_BOUNDS, [("", lags.counts, lags.total)])


# -- the exposition --------------------------------------------------------------

def _label(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _num(v):
    if isinstance(v, float):
        return repr(v) if v == v and abs(v) != float("inf") else ("+Inf" if v > 0 else "NaN")
    return str(v)


def _metric(out, name, kind, help_text, samples):
    """One metric family: HELP, TYPE, then `name{labels} value` per sample."""
    out.append("# HELP %s %s\n# TYPE %s %s\n" % (name, _help(help_text), name, kind))
    for labels, value in samples:
        out.append("%s%s %s\n" % (name, labels, _num(value)))


def _histogram(out, name, help_text, bounds, series):
    """series: (label text without braces, per-bucket counts with +Inf last, sum)."""
    out.append("# HELP %s %s\n# TYPE %s histogram\n" % (name, _help(help_text), name))
    les = ['le="%s"' % _num(b) for b in bounds] + ['le="+Inf"']
    for labels, counts, total in series:
        pre = labels + "," if labels else ""
        cum = 0
        for le, n in zip(les, counts):
            cum += n
            out.append("%s_bucket{%s%s} %d\n" % (name, pre, le, cum))
        tail = "{%s}" % labels if labels else ""
        out.append("%s_sum%s %s\n%s_count%s %d\n" % (name, tail, _num(total), name, tail, cum))


def _resident_bytes():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def exposition(server):
    """The /metrics document for server, as bytes."""
    core, out = server.core, []

    # Every number `stats` shows, named as the beanstalkd exporter names them. Not
    # fastbean.client.parse_dict: this is the engine's own text, and each value goes
    # out as written (a number parsed and printed again would change its digits).
    for line in stats_text(core).decode("utf-8", "replace").split("\n")[1:]:
        key, _, value = line.partition(": ")
        if not key or key in SKIPPED_STATS:
            continue
        if key == "draining":
            value = 1 if value == "true" else 0
        help_text = STATS_HELP.get(key) or "%s commands run." % key[4:]
        _metric(out, key.replace("-", "_"), "gauge", help_text, [("", value)])

    # stats-tube per tube, for the tubes holding the most jobs; the rest summed.
    rows, rest = tube_rows(core, server.config.metrics_tubes)
    tubes = ['{tube="%s"}' % _label(row[0].decode("latin-1")) for row in rows]
    for i, key in enumerate(TUBE_KEYS):
        samples = [(tube, row[i + 1]) for tube, row in zip(tubes, rows)]
        if rest[0] and i < TUBE_SUMMED:
            samples.append(('{tube="%s"}' % OTHER_TUBES, rest[i + 1]))
        _metric(out, "tube_" + key.replace("-", "_"), "gauge", TUBE_HELP[key], samples)
    _metric(out, "fastbean_tubes_folded", "gauge",
            "Tubes beyond --metrics-tubes, summed in the tube=\"%s\" series." % OTHER_TUBES,
            [("", rest[0])])

    # What only the server knows.
    loop = type(server.loop).__module__.split(".")[0]
    _metric(out, "fastbean_build_info", "gauge", "Version of the server; always 1.",
            [('{version="%s",python="%s",loop="%s"}' % (
                _label(__version__), _label(platform.python_version()), _label(loop)), 1)])
    ready, _ = server.readiness()
    _metric(out, "fastbean_ready", "gauge", "1 when /readyz answers 200.", [("", int(ready))])
    _metric(out, "fastbean_memory_used_bytes", "gauge",
            "Memory held by jobs, as --max-memory counts it (body + %d bytes per job)." % JOB_OVERHEAD_BYTES,
            [("", core.mem_used)])
    _metric(out, "fastbean_memory_max_bytes", "gauge", "The --max-memory cap; 0 when there is none.",
            [("", core.max_memory)])
    rss = _resident_bytes()
    if rss is not None:
        _metric(out, "fastbean_resident_memory_bytes", "gauge", "Resident set size of the process.",
                [("", rss)])
    _metric(out, "fastbean_puts_refused_memory_total", "counter",
            "Puts answered OUT_OF_MEMORY because of --max-memory.", [("", core.mem_refused)])
    # The protocol extensions' counters: never in `stats`, whose keys stay beanstalkd's.
    _metric(out, "fastbean_cmd_flush_tube_total", "counter", "flush-tube commands run.",
            [("", core.flush_tube_ct)])
    _metric(out, "fastbean_cmd_flush_buried_total", "counter", "flush-buried commands run.",
            [("", core.flush_buried_ct)])
    _metric(out, "fastbean_jobs_flushed_total", "counter",
            "Jobs deleted by flush-tube and flush-buried.", [("", core.jobs_flushed)])
    _metric(out, "fastbean_cmd_list_tube_total", "counter", "list-tube commands run.",
            [("", core.list_tube_ct)])
    _metric(out, "fastbean_cmd_reserve_batch_total", "counter", "reserve-batch commands run.",
            [("", core.reserve_batch_ct)])
    _metric(out, "fastbean_jobs_batch_reserved_total", "counter",
            "Jobs reserved by reserve-batch commands.", [("", core.jobs_batch_reserved)])
    _metric(out, "fastbean_cmd_delete_batch_total", "counter", "delete-batch commands run.",
            [("", core.delete_batch_ct)])
    _metric(out, "fastbean_jobs_batch_deleted_total", "counter",
            "Jobs deleted by delete-batch commands.", [("", core.jobs_batch_deleted)])
    _metric(out, "fastbean_cmd_retry_limit_total", "counter", "retry-limit commands run.",
            [("", core.retry_limit_ct)])
    _metric(out, "fastbean_jobs_retry_buried_total", "counter",
            "Jobs buried because they reached their tube's retry limit.", [("", core.retry_buried)])
    _metric(out, "fastbean_jobs_dead_lettered_total", "counter",
            "Jobs moved to a dead-letter tube because they reached their tube's retry limit.",
            [("", core.dead_lettered)])
    _metric(out, "fastbean_cmd_move_job_total", "counter", "move-job commands run.",
            [("", core.move_job_ct)])
    _metric(out, "fastbean_cmd_reprioritize_job_total", "counter", "reprioritize-job commands run.",
            [("", core.reprioritize_job_ct)])
    _metric(out, "fastbean_put_key_hits_total", "counter",
            "Puts with an idempotency key answered with the job already holding it.",
            [("", core.key_hits)])
    _metric(out, "fastbean_keys", "gauge", "Idempotency keys held by live jobs.",
            [("", core.current_keys)])
    _metric(out, "fastbean_keys_cooling", "gauge",
            "Idempotency keys of deleted jobs still in their cooldown.",
            [("", core.cooling_keys)])
    _metric(out, "fastbean_connections_refused_total", "counter",
            "Connections refused because of --max-connections.", [("", server.connections.refused)])
    _metric(out, "fastbean_connections_unauthenticated", "gauge",
            "Connections to TLS listeners still in their handshake or before auth.",
            [("", server.connections.unauthenticated)])
    _metric(out, "fastbean_connections_refused_unauthenticated_total", "counter",
            "Connections refused because of --max-unauthenticated-per-address.",
            [("", server.connections.refused_unauthenticated)])
    _metric(out, "fastbean_busy_poll_seconds_total", "counter",
            "Time the loop spent busy polling without a read arriving (--busy-poll).",
            [("", server.busy_poll.idle_ns / 1e9 if server.busy_poll is not None else 0.0)])
    _metric(out, "fastbean_busy_poll_backoffs_total", "counter",
            "Times busy polling paused because the loop's core was shared (--busy-poll).",
            [("", server.busy_poll.backoffs if server.busy_poll is not None else 0)])
    _schedules(out, server)
    bounds, families = latency_histograms(core)
    _histogram(out, "fastbean_reply_latency_seconds",
               "From the read that carried a command to the write of its reply, per command "
               "family (a reserve's wait for a job is not counted).",
               bounds, [('family="%s"' % name, counts, total) for name, counts, total in families])

    if server.replicator is not None:
        _replication(out, server.replicator)
    binlog = server.disk
    if binlog is not None:
        _metric(out, "fastbean_binlog_disk_bytes", "gauge",
                "Bytes of binlog files on disk (the current file as preallocated).",
                [("", binlog.disk_bytes)])
        _metric(out, "fastbean_binlog_files", "gauge", "Binlog files on disk.",
                [("", len(binlog.files))])
        _metric(out, "fastbean_binlog_errors_total", "counter",
                "Failed binlog writes, fsyncs and file creations.", [("", binlog.errors)])
        _metric(out, "fastbean_binlog_failing", "gauge",
                "1 while the disk refuses new binlog files, and from a failed write or fsync "
                "until the queue is rebuilt from the disk.", [("", int(binlog.failing))])
        _metric(out, "fastbean_binlog_failstops_total", "counter",
                "Failed binlog writes or fsyncs that made the server stop serving from memory "
                "and rebuild its queue from the disk.", [("", server.recovery.count)])
        hist = binlog.histograms()
        if hist is not None:
            b, counts, total = hist["fsync"]
            _histogram(out, "fastbean_binlog_fsync_seconds", "Duration of each binlog fdatasync.",
                       b, [("", counts, total)])
            b, counts, total = hist["group"]
            _histogram(out, "fastbean_binlog_group_commit_records",
                       "Binlog records each fdatasync made durable.", b, [("", counts, total)])
    return "".join(out).encode()


def _replication(out, replicator):
    # --replicate: where this node is in the stream, what it published.
    publisher, follower = replicator.publisher, replicator.follower
    for name, kind, text, value in (
        ("primary", "gauge", "1 while this node is the primary and serves.",
         int(replicator.role.value == "primary")),
        ("stream_sequence", "gauge",
         "Stream sequence of the last message this node applied (standby) or had stored (primary).",
         replicator.log.applied),
        ("pending_messages", "gauge",
         "Standby: messages the stream held after the last one applied, as it was sent.",
         follower.pending if follower.following else 0),
        ("lag_seconds", "gauge",
         "Standby: age of the last message applied while more followed it (0 when caught up); "
         "by the stream leader's clock.", round(follower.lag(), 6)),
        ("publishes_total", "counter", "Messages this node had stored.", publisher.published),
        ("retries_total", "counter", "Publishes tried again after no answer or a refusal.",
         publisher.retries),
        ("in_flight", "gauge", "Messages published and not yet acknowledged.", publisher.in_flight),
        ("orphans_total", "counter",
         "Messages found in the stream that do not follow the chain (a deposed writer's), skipped.",
         replicator.log.orphans + publisher.orphans),
        ("takeovers_total", "counter", "Times this node became the primary.", replicator.takeovers),
        ("suspensions_total", "counter",
         "Times this node stopped serving as primary (no quorum stored its changes, or its lease "
         "was not renewed in time).", replicator.suspensions),
    ):
        _metric(out, "fastbean_replication_" + name, kind, text, [("", value)])
