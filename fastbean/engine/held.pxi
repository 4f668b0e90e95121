# Replies held until durable: a reply that confirms binlog records waits in
# core.held (flush, conn.pxi) until binlog.py says the records are as
# durable as -f asks (Core.set_durable), or is dropped with its connection
# when they never will be (Core.set_failed).
#
# Offers: release_held, fail_held.
# Uses: hooks, conn.


cdef int release_held(Core core) except -1:
    # Let out the replies whose records are now durable, in order per connection.
    cdef Conn c
    if not core.held:
        return 0
    held = core.held
    core.held = []
    for c in held:
        if c.wal_need > core.durable_seq:
            core.held.append(c)
            continue
        c.held = False
        flush(c)
        if c.state == CONN_CLOSING:
            c.state = CONN_CLOSED
            hook0(core, c.close_cb)
        elif c.lost or c.state == CONN_EOF or c.careful:
            conn_touched(core, c)       # it quits, or runs its next command (conn_run)
    return 0


cdef int fail_held(Core core, uint64_t seq) except -1:
    # Records up to seq will never be known durable: hang up on the
    # connections whose replies wait on them, without those replies. They
    # do not become durable by this, so every other reply keeps waiting
    # behind them: the node stops serving from this engine (server.py).
    cdef Conn c
    held = core.held
    core.held = []
    for c in held:
        if c.wal_need > seq:
            core.held.append(c)
            continue
        c.held = False
        c.lost = True               # this output and any later goes nowhere
        out_drop(c)
        if c.state == CONN_CLOSING:
            c.state = CONN_CLOSED
        hook0(core, c.close_cb)
    return 0
