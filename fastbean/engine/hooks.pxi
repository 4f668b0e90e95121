# Calls into Python (the hooks Core was given, a connection's transport
# callables) and the rule that keeps the engine simple to reason about: no
# hook calls back into the engine before it returns. Every such call goes
# through hook0/1/2; in debug builds (FASTBEAN_DEBUG=1), every entry point
# (enter()) asserts that no hook is running.
#
# Offers: DEBUG_BUILD, hook0, hook1, hook2, enter.
# Python: DEBUG.
# Uses: nothing.

cdef extern from *:
    """
    #ifndef FASTBEAN_DEBUG
    #define FASTBEAN_DEBUG 0
    #endif
    """
    bint DEBUG_BUILD "FASTBEAN_DEBUG"    # setup.py: FASTBEAN_DEBUG=1 checks every structure after every command


DEBUG = bool(DEBUG_BUILD)


cdef object _guarded(Core core, object fn, tuple args):
    core.in_hook += 1
    try:
        return fn(*args)
    finally:
        core.in_hook -= 1


cdef inline object hook0(Core core, object fn):
    if DEBUG_BUILD:
        return _guarded(core, fn, ())
    return fn()


cdef inline object hook1(Core core, object fn, object a):
    if DEBUG_BUILD:
        return _guarded(core, fn, (a,))
    return fn(a)


cdef inline object hook2(Core core, object fn, object a, object b):
    if DEBUG_BUILD:
        return _guarded(core, fn, (a, b))
    return fn(a, b)


cdef inline int enter(Core core) except -1:
    # at every entry point of the Python-facing API
    if DEBUG_BUILD and core.in_hook:
        raise AssertionError("a hook called back into the engine before it returned")
    return 0
