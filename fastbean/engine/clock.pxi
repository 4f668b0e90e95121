# The engine's clocks, in nanoseconds: monotonic for every deadline, wall
# time where beanstalkd shows or stores it, and the offset by which
# fastbean-clock-advance (testing.pxi) moves both.
#
# Offers: SEC, clock_offset, real_mono_ns, mono_ns, wall_ns.
# Uses: nothing.

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME

cdef int64_t SEC = 1000000000         # ns per second

# How far fastbean-clock-advance has moved the engine's clock (testing.pxi);
# always 0 without --testing.
cdef int64_t clock_offset = 0


cdef inline int64_t real_mono_ns() noexcept nogil:
    # Elapsed time that a test clock must not move (reply latency).
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline int64_t mono_ns() noexcept nogil:
    return real_mono_ns() + clock_offset


cdef inline int64_t wall_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec + clock_offset
