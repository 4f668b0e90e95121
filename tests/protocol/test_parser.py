"""The compiled parser against the byte-at-a-time reference model, over fixed
and random inputs, fed whole and in random pieces."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastbean.engine.parser import Parser
from tests.support.refparser import RefParser, parse_line
from tests.support.servers import FUZZ

MAX_JOB = 64


def accept(n):
    return n <= MAX_JOB


def compiled(chunks):
    p = Parser()
    out = []
    for c in chunks:
        out += p.parse(c, accept)
    return out


def reference(chunks):
    r = RefParser(accept)
    out = []
    for c in chunks:
        out += r.feed(c)
    return out


def splits(data, rnd, n):
    cuts = sorted(rnd.sample(range(1, len(data)), min(n, len(data) - 1))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


FIXED = [
    b"put 1 2 3 5\r\nhello\r\n",
    b"put 0 0 10 5\r\nhelloXX\r\nstats\r\n",                 # EXPECTED_CRLF, surplus is a command
    b"put 0 0 10 70\r\n" + b"x" * 72 + b"list-tubes\r\n",     # too big: swallowed, then a command
    b"put 0 0 10 70 junk\r\n" + b"x" * 72,                    # too big beats trailing garbage
    b"put 0 0 10 5 x\r\nhello\r\n",                           # garbage: body parsed as commands
    b"x" * 500 + b"\r\nlist-tube-used\r\n",                   # over-long line: one BAD_FORMAT
    b"a" * 222 + b"\r\n" + b"stats\r\n",                      # exactly 224 bytes: a line
    b"a" * 223 + b"\r\nlist-tube-used\r\nstats\r\n",          # CRLF straddles the window
    b"use a\rb\r\n" + b"y" * 300 + b"\r\nstats\r\n",          # bare CR stalls the line
    b"use a\0b\r\nuse ok\r\n",
    b"kick -1\r\nkick 1abc\r\nkick 0x5\r\nkick 4294967297\r\nkick \r\nkick abc\r\n",
    b"reserve-with-timeout -1\r\nreserve-with-timeout 4294967296\r\nreserve-with-timeout abc\r\n"
    b"reserve-with-timeout 99999999999999999999\r\nreserve-with-timeout 5 junk\r\n",
    b"pause-tubedefault 5\r\npause-tube   a    0\r\npause-tube -x 1\r\npause-tube a5\r\n",
    b"stats-job\r\nstats-tubes x\r\nstatsx\r\nstats \r\nreservex\r\nreserve \r\npeek-readyx\r\n",
    b"quitx\r\nstats\r\n",
    b"release 1  2  3\r\nput  0  0 10 1\r\nx\r\ndelete  1\r\nbury 1\r\nbury 1 x\r\n",
    b"peek 18446744073709551615\r\npeek 18446744073709551616\r\npeek -1\r\npeek +1\r\n",
    b"use " + b"a" * 200 + b"\r\nuse " + b"a" * 201 + b"\r\nuse -a\r\nuse a-\r\nuse  a\r\n",
    b"\r\n \r\nPUT 1\r\nput\r\nput \r\n",
    b"put 0 0 1 0\r\n\r\nput 0 0 1 2\r\n\r\n\r\n",
]


@pytest.mark.parametrize("data", FIXED)
def test_fixed_inputs_match_reference(data):
    want = reference([data])
    assert compiled([data]) == want
    rnd = random.Random(data)
    for _ in range(20):
        assert compiled(splits(data, rnd, rnd.randint(1, 12))) == want
    assert compiled([data[i:i + 1] for i in range(len(data))]) == want


def test_every_split_point_of_a_pipeline():
    data = b"".join(FIXED[:6])
    want = reference([data])
    for i in range(1, len(data)):
        assert compiled([data[:i], data[i:]]) == want, i


WORDS = [b"put ", b"peek ", b"peek-ready", b"peek-delayed", b"peek-buried", b"reserve",
         b"reserve-with-timeout ", b"reserve-job ", b"delete ", b"release ", b"bury ", b"kick ",
         b"kick-job ", b"touch ", b"stats", b"stats-job ", b"stats-tube ", b"use ", b"watch ",
         b"ignore ", b"list-tubes", b"list-tube-used", b"list-tubes-watched", b"pause-tube",
         b"quit", b"fastbean-stats", b"fastbean-reset", b"fastbean-clock-advance ",
         b"flush-tube ", b"flush-tube", b"flush-buried ", b"flush-buried", b"list-tube ",
         b"list-tube ready 0 ", b"list-tube delayed ", b"list-tube buried 7.3 ",
         b"list-tube reserved 0.1 1000", b"reserve-batch", b"reserve-batch ", b"reserve-batch 5 ",
         b"delete-batch", b"delete-batch ", b"delete-batch 1 ", b"move-job", b"move-job ",
         b"move-job 3 ", b"reprioritize-job", b"reprioritize-job ", b"reprioritize-job 7 ",
         b"schedule", b"schedule ", b"schedule n 0 60 fire ", b"schedule n 0 60 skip 5 ",
         b"schedule n 1 1 fire 3 every ", b"unschedule ", b"unschedule", b"list-schedules",
         b"fire-schedule ", b"pause-schedule ", b"resume-schedule ", b"resume-schedule"]
PIECES = [b"0", b"1", b"5", b"42", b"-1", b"+3", b"4294967295", b"4294967296",
          b"18446744073709551616", b" ", b"  ", b"\t", b"x", b"foo", b"-x", b"a" * 120,
          b"\r", b"\n", b"\0", b"\r\n", b".", b".5", b".123456789", b".0000000001"]

line_st = st.builds(lambda w, ps: w + b"".join(ps) + b"\r\n",
                    st.sampled_from(WORDS), st.lists(st.sampled_from(PIECES), max_size=6))
stream_st = st.lists(st.one_of(line_st, st.binary(max_size=40), line_st, line_st),
                     min_size=1, max_size=30).map(b"".join)


@settings(max_examples=300 * FUZZ, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream_st, st.randoms(use_true_random=False))
def test_random_streams_and_splits_match_reference(data, rnd):
    want = reference([data])
    assert compiled(splits(data, rnd, rnd.randint(0, 20))) == want


@settings(max_examples=300 * FUZZ, deadline=None)
@given(st.binary(max_size=600), st.randoms(use_true_random=False))
def test_random_bytes_never_raise(data, rnd):
    assert compiled(splits(data, rnd, rnd.randint(0, 10))) == reference([data])


def test_reference_parses_lines_like_beanstalkd_table():
    # a few rows of the reference notes' prefix table, to pin the oracle itself
    assert parse_line(b"put") == ("UNKNOWN_COMMAND", None)
    assert parse_line(b"put ") == ("BAD_FORMAT", None)
    assert parse_line(b"stats-job") == ("BAD_FORMAT", None)
    assert parse_line(b"quit now") == ("quit", None)
    assert parse_line(b"kick\t1") == ("UNKNOWN_COMMAND", None)
    assert parse_line(b"pause-tubedefault 5") == ("pause-tube", None, b"default", 5)


def test_schedule_lines_parse():
    # the size is read whenever the fifth word is one, so that the body of a
    # bad line is swallowed; the engine reads the other words
    data = (b"schedule n 0 60 fire 5 every 1\r\nhello\r\n"
            b"schedule n 0 60 fire 2\r\nlist-schedules\r\n"  # a body of "list", no CRLF
            b"schedule n 0 60 fire x every 1\r\nunschedule n\r\nfire-schedule -n\r\n")
    S = "schedule"
    want = [(S, None, 5, b"n 0 60 fire 5 every 1"), ("body", None, b"hello\r\n"),
            (S, "BAD_FORMAT", 2, b"n 0 60 fire 2"), ("body", "EXPECTED_CRLF", None),
            ("UNKNOWN_COMMAND", None), (S, "BAD_FORMAT", None, b"n 0 60 fire x every 1"),
            ("unschedule", None, b"n"), ("fire-schedule", "BAD_FORMAT")]
    assert compiled([data]) == want == reference([data])


def test_move_job_and_reprioritize_job_parse():
    # one space between words, an id below 2^64, a tube name as use's, a
    # priority as put's; a malformed line keeps its op (for --strict)
    name = b"t" * 200
    lines = [b"move-job 1 t", b"move-job 18446744073709551615 a-b", b"move-job 12 " + name,
             b"move-job 1 -t", b"move-job 1  t", b"move-job  1 t", b"move-job 1 t ", b"move-job 1",
             b"move-job", b"move-jobs 1 t", b"move-job 18446744073709551616 t", b"move-job x t",
             b"move-job 1 " + name + b"t",
             b"reprioritize-job 3 0", b"reprioritize-job 3 4294967295", b"reprioritize-job 3 4294967296",
             b"reprioritize-job 3 -1", b"reprioritize-job 3", b"reprioritize-job 3 1 2",
             b"reprioritize-job 3  1", b"reprioritize-jobx"]
    M, R, B = "move-job", "reprioritize-job", "BAD_FORMAT"
    want = [(M, None, 1, b"t"), (M, None, 2**64 - 1, b"a-b"), (M, None, 12, name)] + [(M, B)] * 10 + [
        (R, None, 3, 0), (R, None, 3, 2**32 - 1)] + [(R, B)] * 6
    data = b"".join(line + b"\r\n" for line in lines)
    assert compiled([data]) == want == reference([data])
    assert len(b"move-job 999999999999 " + name + b"\r\n") == 224     # the longest line


def test_test_only_commands_parse():
    # malformed ones keep their op (with BAD_FORMAT attached) so that a server
    # without --testing can answer UNKNOWN_COMMAND to them like beanstalkd
    data = (b"fastbean-clock-advance 3600\r\nfastbean-clock-advance 0.5\r\n"
            b"fastbean-clock-advance 1.000000001\r\nfastbean-clock-advance 4294967295.999999999\r\n"
            b"fastbean-clock-advance -1\r\nfastbean-clock-advance 1.\r\n"
            b"fastbean-clock-advance 1.0000000001\r\nfastbean-clock-advance 4294967296\r\n"
            b"fastbean-reset\r\nfastbean-reset now\r\nfastbean-resets\r\nfastbean-clock-advance\r\n")
    A = "fastbean-clock-advance"
    want = [(A, None, 3600 * 10**9), (A, None, 5 * 10**8), (A, None, 10**9 + 1),
            (A, None, 4294967295999999999), (A, "BAD_FORMAT"), (A, "BAD_FORMAT"),
            (A, "BAD_FORMAT"), (A, "BAD_FORMAT"), ("fastbean-reset", None),
            ("fastbean-reset", "BAD_FORMAT"), ("fastbean-reset", "BAD_FORMAT"),
            ("UNKNOWN_COMMAND", None)]
    assert compiled([data]) == want == reference([data])


# -- long batch lines (Parser.long_lines, an engine not in --strict) --------------------

def long_parse(chunks):
    p = Parser()
    p.long_lines = True
    out = []
    for c in chunks:
        out += p.parse(c, accept)
    return out


BATCH_LINES = st.one_of(
    st.builds(lambda word, n, sep: word + b" " + sep.join(b"%d" % (i + 1) for i in range(n)),
              st.sampled_from([b"delete-batch", b"delete-each"]), st.integers(1, 1100),
              st.sampled_from([b" ", b"  ", b" x "])),
    st.sampled_from([b"stats", b"delete 3", b"put 0 0 1 1\r\nx", b"x" * 300, b"delete-batch"]),
)


@settings(max_examples=200 * FUZZ, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(BATCH_LINES, min_size=1, max_size=4), rnd=st.randoms(use_true_random=False),
       n=st.integers(0, 12))
def test_long_batch_lines_parse_alike_however_they_are_cut(lines, rnd, n):
    # each batch line is one command, its ids (at most 1000) or BAD_FORMAT; the
    # commands around it are read as they would be without it
    data = b"".join(line + b"\r\n" for line in lines)
    whole = long_parse([data])
    assert long_parse(splits(data, rnd, n)) == whole
    expected = []
    for line in lines:
        if line.startswith(b"delete-") and b" " in line and line.split(b" ", 1)[0] in (
                b"delete-batch", b"delete-each"):
            words = line.split(b" ")
            ok = len(words) <= 1001 and all(w.isdigit() for w in words[1:])
            name = words[0].decode()
            expected.append((name, None, tuple(int(w) for w in words[1:])) if ok
                            else ((name, "BAD_FORMAT") if len(line) <= 12 + 1000 * 21
                                  else ("BAD_FORMAT", None)))
        else:
            expected += long_parse([line + b"\r\n"]) if not line.startswith(b"put") else \
                long_parse([line + b"\r\n"])
    assert whole == expected


def test_a_long_line_of_anything_else_is_still_dropped():
    assert long_parse([b"stats " + b"x" * 300 + b"\r\nstats\r\n"]) == [
        ("BAD_FORMAT", None), ("stats", None)]
    # beanstalkd's framing without long_lines
    assert compiled([b"delete-batch " + b"1 " * 200 + b"1\r\n"])[0] == ("BAD_FORMAT", None)
