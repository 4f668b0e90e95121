# Retry limits: a tube's policy, set by retry-limit (or the server's default,
# --retry-limit), buries a job, or moves it to a dead-letter tube, once its
# releases and timeouts (stats-job's counts) reach the limit. The move
# itself is queue.pxi's (job_retry_over).
#
# A policy is kept in core.policies by tube name, apart from the Tube (a
# tube with no jobs and no clients goes away; its policy stays). In the
# binlog it is an EXT_TUBE + EXT_POLICY pair, kept in a file as the other
# extension state is (ext_put): a restart, or a replica, has it.
#
# A job a limit moves remembers the tube it came from (its origin: the tube
# a console requeues it to with move-job), in core.origins by id with the
# JOB_ORIGIN flag, until it is deleted or moved again by move-job. In the
# binlog an EXT_ORIGIN record goes before each of its full records, as a
# key's EXT_KEY does (walg.pxi's wal_record), so the origin lives in the
# file that holds the job.
#
# Offers: retry_policy, retry_applies, policy_set, policy_size, origin_set,
#   origin_forget, origin_size.
# Uses: wal, walg.


cdef inline object retry_policy(Core core, Tube *t):
    # (limit, dead-letter tube or None) of t, or None (no limit)
    if (not core.policies and core.default_policy is None) or core.strict:
        return None
    p = core.policies.get(<bytes>t.name, core.default_policy)
    if p is None or not (<tuple>p)[0]:
        return None
    return p


cdef inline bint retry_applies(Core core, Job *j, object p) noexcept:
    # j's attempts have reached its tube's limit
    return j.release_ct + j.timeout_ct >= <uint32_t>(<tuple>p)[0]


cdef inline Py_ssize_t policy_size(bytes tube, object dlq) noexcept:
    # the records of a policy: EXT_TUBE, EXT_POLICY
    return (2 * (4 + sizeof(Jobrec)) + PyBytes_GET_SIZE(tube)
            + (0 if dlq is None else PyBytes_GET_SIZE(<bytes>dlq)))


cdef int policy_set(Core core, bytes tube, uint32_t limit, object dlq, bint to_default,
                    bint log) except -1:
    # The tube's own policy (to_default: none, the server's default applies).
    # log: write it (the caller checked the room); or own it in the file
    # being replayed.
    if to_default:
        core.policies.pop(tube, None)
    else:
        core.policies[tube] = (limit, dlq)
    if log or core.wal_links:
        recs = (ext_rec(EXT_TUBE, tube, 0, 0, 0, 0)
                + ext_rec(EXT_POLICY, b"" if dlq is None else dlq, 0, 0, limit, to_default))
        if log:
            ext_put(core, ("policy", tube), recs)
        else:
            ext_own(core, ("policy", tube), recs)
    return 0


cdef inline Py_ssize_t origin_size(bytes tube) noexcept:
    # the EXT_ORIGIN record before a dead letter's full record
    return 4 + PyBytes_GET_SIZE(tube) + sizeof(Jobrec)


cdef int origin_set(Core core, Job *j, bytes tube) except -1:
    # j was dead-lettered from tube (its next full record carries it)
    core.origins[j.id] = tube
    j.flags |= JOB_ORIGIN
    return 0


cdef int origin_forget(Core core, Job *j) except -1:
    if j.flags & JOB_ORIGIN:
        del core.origins[j.id]
        j.flags &= ~JOB_ORIGIN
    return 0
