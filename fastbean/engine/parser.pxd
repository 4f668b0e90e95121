# Incremental beanstalk command parser: bytes in, Cmd structs out.
#
# One Parser per connection. feed() hands it whatever one read returned; the
# engine then pulls commands with next() until it returns 0 (need more bytes).
# Client mistakes come back as opcodes (OP_BAD_FORMAT, ...), never as Python
# exceptions. The framing rules are beanstalkd 1.12's (reference notes §1.1):
# a line is complete at the first CR if an LF follows it, and a line with no
# usable CRLF in its first 224 bytes is dropped up to the next CRLF, which is
# then answered with a single BAD_FORMAT. With long_lines (an engine not in
# --strict), a delete-batch or delete-each line may run to LONG_LINE_MAX
# bytes (tuber takes 1000 ids in one line).

cimport cython

from fastbean.engine.wire cimport Cmd, LINE_MAX


@cython.final
cdef class Parser:
    # Input not yet parsed: the chunk being read, then further chunks.
    cdef object cur               # bytes being parsed (owned)
    cdef const char *cbuf         # its data
    cdef Py_ssize_t cpos, cend
    cdef list queue               # later chunks, oldest first
    cdef Py_ssize_t qhead
    cdef Py_ssize_t queued        # bytes held in queue[qhead:]

    # The current line when it straddles chunks (at most LINE_MAX bytes).
    cdef char lbuf[LINE_MAX]
    cdef Py_ssize_t llen

    cdef int state
    cdef bint skipping_line       # dropping an over-long line up to its CRLF

    # A long line of a batch command (S_LONG), gathered here; once parsed, its
    # bytes, which the Cmd's name points into until the next call.
    cdef public bint long_lines   # take them (the engine sets it unless --strict)
    cdef bytearray long
    cdef bytes long_line
    cdef bint skip_cr             # S_LONG_SKIP: the last byte dropped was a CR

    # Body of a put in progress, or bytes being swallowed.
    cdef char *body               # nbytes + 2 bytes the caller owns, filled in place
    cdef Py_ssize_t need          # bytes still to come into body / to discard
    cdef Py_ssize_t filled
    cdef int skip_err
    cdef object owner             # parse(): the bytes a body is read into

    cpdef feed(self, data)
    cdef Py_ssize_t buffered(self) noexcept
    cdef int next(self, Cmd *cmd) except -1
    cdef void accept_body(self, char *dest, Py_ssize_t n) noexcept
    cdef Py_ssize_t body_room(self, char **dest) noexcept
    cdef void body_filled(self, Py_ssize_t n) noexcept
    cdef void reject_body(self, Py_ssize_t n, int err) noexcept
    cdef void no_body(self) noexcept
    cdef void discard_input(self) noexcept
    cdef int _advance(self) except -1
    cdef bint _long_line(self, Cmd *cmd) except -1
