# The YAML documents: stats, stats-job, stats-tube, list-tubes,
# list-tubes-watched and fastbean-stats, in beanstalkd's key order.
#
# Offers: STATE_NAMES, CMD_KEYS, stats_yaml, job_yaml, tube_yaml, list_tubes_yaml,
#   list_watched_yaml, ext_yaml.
# Uses: clock, hooks, table.

STATE_NAMES = {JOB_READY: b"ready", JOB_RESERVED: b"reserved", JOB_BURIED: b"buried",
               JOB_DELAYED: b"delayed", JOB_INVALID: b"invalid"}

# stats keys for the command counters, in beanstalkd's order (op 1..22).
CMD_KEYS = [b"cmd-put", b"cmd-peek", b"cmd-peek-ready", b"cmd-peek-delayed",
            b"cmd-peek-buried", b"cmd-reserve", b"cmd-reserve-with-timeout", b"cmd-delete",
            b"cmd-release", b"cmd-use", b"cmd-watch", b"cmd-ignore", b"cmd-bury", b"cmd-kick",
            b"cmd-touch", b"cmd-stats", b"cmd-stats-job", b"cmd-stats-tube", b"cmd-list-tubes",
            b"cmd-list-tube-used", b"cmd-list-tubes-watched", b"cmd-pause-tube"]


cdef inline bytes _sec(int64_t ns):
    # whole seconds, truncated toward zero as C division does
    cdef int64_t s = ns // SEC if ns >= 0 else -((-ns) // SEC)
    return b"%d" % s


cdef bytes stats_yaml(Core core):
    cdef rusage ru
    cdef int i
    getrusage(RUSAGE_SELF, &ru)
    lines = [
        b"---",
        b"current-jobs-urgent: %d" % core.urgent_ct,
        b"current-jobs-ready: %d" % core.ready_ct,
        b"current-jobs-reserved: %d" % core.reserved_ct,
        b"current-jobs-delayed: %d" % core.delayed_ct,
        b"current-jobs-buried: %d" % core.buried_ct,
    ]
    for i in range(22):
        lines.append(b"%s: %d" % (CMD_KEYS[i], core.cmd_ct[i + 1]))
    lines += [
        b"job-timeouts: %d" % core.job_timeouts,
        b"total-jobs: %d" % core.total_jobs,
        b"max-job-size: %d" % core.max_job_size,
        b"current-tubes: %d" % core.ntubes,
        b"current-connections: %d" % core.conn_ct,
        b"current-producers: %d" % core.producer_ct,
        b"current-workers: %d" % core.worker_ct,
        b"current-waiting: %d" % core.waiting_ct,
        b"total-connections: %d" % core.total_conns,
        b"pid: %d" % os.getpid(),
        b'version: "%s"' % core.version,
        b"rusage-utime: %d.%06d" % (ru.ru_utime.tv_sec, ru.ru_utime.tv_usec),
        b"rusage-stime: %d.%06d" % (ru.ru_stime.tv_sec, ru.ru_stime.tv_usec),
        b"uptime: %d" % ((mono_ns() - core.started_mono) // SEC),
        b"binlog-oldest-index: %d" % (core.wfiles[0].seq if core.nwfiles else 0),
        b"binlog-current-index: %d" % (core.wfiles[core.nwfiles - 1].seq if core.nwfiles else 0),
        b"binlog-records-migrated: %d" % core.wal_migrated,
        b"binlog-records-written: %d" % core.wal_written,
        b"binlog-max-size: %d" % core.binlog_max_size,
        b"draining: %s" % (b"true" if core.drain_mode else b"false"),
        b"id: %s" % core.instance_id,
        b"hostname: %s" % core.hostname,
        b"os: %s" % core.os_version,
        b"platform: %s" % core.machine,
    ]
    lines.append(b"")
    return b"\n".join(lines)


cdef bytes job_yaml(Job *j):
    cdef int64_t now = mono_ns()
    cdef int64_t left = 0
    if j.state == JOB_RESERVED or j.state == JOB_DELAYED:
        left = j.deadline - now
    return b"".join([
        b"---\nid: %d\ntube: " % j.id, <bytes>j.tube.name,
        b"\nstate: ", STATE_NAMES[j.state],
        b"\npri: %d\nage: " % j.pri, _sec(wall_ns() - j.created_wall),
        b"\ndelay: ", _sec(j.delay_ns),
        b"\nttr: ", _sec(j.ttr_ns),
        b"\ntime-left: ", _sec(left),
        b"\nfile: %d\nreserves: %d\ntimeouts: %d\nreleases: %d\nburies: %d\nkicks: %d\n" % (
            j.wal_file, j.reserve_ct, j.timeout_ct, j.release_ct, j.bury_ct, j.kick_ct),
    ])


cdef bytes tube_yaml(Tube *t):
    cdef int64_t left = 0
    if t.pause_ns:
        left = t.unpause_at - mono_ns()
    return b"".join([
        b"---\nname: ", <bytes>t.name,
        b"\ncurrent-jobs-urgent: %d\ncurrent-jobs-ready: %d\ncurrent-jobs-reserved: %d\n"
        b"current-jobs-delayed: %d\ncurrent-jobs-buried: %d\ntotal-jobs: %d\n"
        b"current-using: %d\ncurrent-watching: %d\ncurrent-waiting: %d\n"
        b"cmd-delete: %d\ncmd-pause-tube: %d\npause: " % (
            t.urgent_ct, t.ready.len, t.reserved_ct, t.delay.len, t.buried_ct,
            t.total_jobs, t.using_ct, t.watching_ct, t.nwaiting, t.cmd_delete,
            t.cmd_pause),
        _sec(t.pause_ns), b"\npause-time-left: ", _sec(left), b"\n",
    ])


cdef bytes _name_list(list names):
    return b"---\n" + b"".join([b"- " + name + b"\n" for name in names])


cdef bytes list_tubes_yaml(Core core):
    cdef Py_ssize_t i
    names = []
    for i in range(core.ntubes):
        names.append(<bytes>core.tubes[i].name)
    return _name_list(names)


cdef bytes list_watched_yaml(Conn c):
    cdef Py_ssize_t i
    names = []
    for i in range(c.nwatch):
        names.append(<bytes>c.watch[i].tube.name)
    return _name_list(names)


cdef bytes ext_yaml(Core core):
    return b"".join([
        b"---\n",
        b"max-memory: %d\n" % core.max_memory,
        b"memory-used: %d\n" % core.mem_used,
        b"current-jobs: %d\n" % core.jobs.count,
        b"job-table-buckets: %d\n" % table_buckets(&core.jobs),
        b"cmd-flush-tube: %d\n" % core.flush_tube_ct,
        b"cmd-flush-buried: %d\n" % core.flush_buried_ct,
        b"jobs-flushed: %d\n" % core.jobs_flushed,
        b"cmd-list-tube: %d\n" % core.list_tube_ct,
        b"cmd-reserve-batch: %d\n" % core.reserve_batch_ct,
        b"jobs-batch-reserved: %d\n" % core.jobs_batch_reserved,
        b"cmd-delete-batch: %d\n" % core.delete_batch_ct,
        b"jobs-batch-deleted: %d\n" % core.jobs_batch_deleted,
        b"cmd-retry-limit: %d\n" % core.retry_limit_ct,
        b"jobs-retry-buried: %d\n" % core.retry_buried,
        b"jobs-dead-lettered: %d\n" % core.dead_lettered,
        b"retry-limited-tubes: %d\n" % len(core.policies),
        b"cmd-move-job: %d\n" % core.move_job_ct,
        b"cmd-reprioritize-job: %d\n" % core.reprioritize_job_ct,
        b"dead-letter-origins: %d\n" % len(core.origins),
        b"put-key-hits: %d\n" % core.key_hits,
        b"current-keys: %d\n" % len(core.job_keys),
        b"current-keys-cooling: %d\n" % len(core.gone),
        b"schedules: %d\n" % len(core.schedules),
        b"schedule-fires: %d\n" % core.sched_fires,
        b"schedule-runs: %d\n" % core.sched_runs,
        b"schedule-misfires: %d\n" % core.sched_misfires,
        b"" if core.ext_stats is None else hook0(core, core.ext_stats),
    ])
