"""The engine's containers on their own: the intrusive heap (engine/heap.pxi) and the
id table (engine/table.pxi), through their test entry points (HeapProbe, TableProbe),
against plain Python models; and the debug build's check that no hook calls
back into the engine."""
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fastbean.engine import core as _core
from fastbean.engine.core import Core, HeapProbe, TableProbe
from tests.support.servers import FUZZ, EngineClient


class HeapVsModel(RuleBasedStateMachine):
    """Inserts, removals from the middle, key changes and pops, with many
    equal keys; the model is a dict of handle -> key."""

    @initialize()
    def setup(self):
        self.heap = HeapProbe()
        self.model = {}

    keys = st.integers(-5, 5) | st.integers(-2**63, 2**63 - 1)

    @rule(keys=st.lists(keys, min_size=1, max_size=40))
    def push(self, keys):
        for key in keys:
            self.model[self.heap.push(key)] = key

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data):
        h = data.draw(st.sampled_from(sorted(self.model)))
        self.heap.remove(h)
        del self.model[h]

    @precondition(lambda self: self.model)
    @rule(data=st.data(), key=keys)
    def change(self, data, key):
        h = data.draw(st.sampled_from(sorted(self.model)))
        self.heap.change(h, key)
        self.model[h] = key

    @precondition(lambda self: self.model)
    @rule()
    def pop(self):
        h = self.heap.pop()
        assert self.model[h] == min(self.model.values())
        del self.model[h]

    @invariant()
    def agrees(self):
        if not hasattr(self, "heap"):
            return
        assert len(self.heap) == len(self.model)
        assert self.heap.check()
        assert all(self.heap.in_heap(h) for h in self.model)


HeapVsModel.TestCase.settings = settings(max_examples=100 * FUZZ, stateful_step_count=50,
                                         deadline=None)
test_heap_matches_model = HeapVsModel.TestCase


def test_heap_pops_in_order_and_gives_memory_back():
    heap = HeapProbe()
    keys = [(k * 7919) % 10007 for k in range(10000)]
    for k in keys:
        heap.push(k)
    grown = heap.capacity
    assert grown >= 10000
    out = [heap.key(heap.pop()) for _ in range(len(keys))]
    assert out == sorted(keys)
    assert len(heap) == 0 and heap.capacity < grown // 8      # halved as it emptied


class TableVsModel(RuleBasedStateMachine):
    """Insertions and removals in runs long enough to grow the table past its
    first size and shrink it again, so lookups also run mid-resize."""

    @initialize()
    def setup(self):
        self.table = TableProbe()
        self.model = set()
        self.next_id = 1

    @rule(n=st.sampled_from([1, 7, 500, 5000]))
    def insert_run(self, n):
        for i in range(self.next_id, self.next_id + n):
            self.table.insert(i)
            self.model.add(i)
        self.next_id += n

    @precondition(lambda self: self.model)
    @rule(data=st.data(), fraction=st.sampled_from([0.1, 0.5, 0.95, 1.0]))
    def remove_some(self, data, fraction):
        ids = sorted(self.model)
        start = data.draw(st.integers(0, len(ids) - 1))
        gone = ids[start:] + ids[:start]
        for i in gone[:max(1, int(len(gone) * fraction))]:
            assert self.table.remove(i)
            self.model.discard(i)

    @rule(data=st.data())
    def lookups(self, data):
        probe = data.draw(st.lists(st.integers(0, self.next_id + 10), max_size=30))
        for i in probe:
            assert (i in self.table) == (i in self.model)
        assert not self.table.remove(self.next_id + 5)

    @invariant()
    def agrees(self):
        if not hasattr(self, "table"):
            return
        assert len(self.table) == len(self.model)


TableVsModel.TestCase.settings = settings(max_examples=40 * FUZZ, stateful_step_count=30,
                                          deadline=None)
test_table_matches_model = TableVsModel.TestCase


def test_table_grows_and_shrinks_a_few_buckets_at_a_time():
    table = TableProbe()
    first = table.buckets
    n = 20 * first
    seen_resizing = 0
    for i in range(1, n + 1):
        table.insert(i)
        seen_resizing += table.resizing
    # every grow was spread over many inserts (each moves a few buckets)
    assert table.buckets >= n // 2 and seen_resizing > first // 8
    assert all(i in table for i in range(1, n + 1))
    for i in range(1, n + 1):
        assert table.remove(i)
    ops = 0
    while table.buckets > first:        # the shrinks finish as operations go on
        table.insert(n + 1)
        table.remove(n + 1)
        ops += 2
        assert ops < n
    assert len(table) == 0 and table.buckets == first and not table.resizing


@pytest.mark.skipif(not _core.DEBUG, reason="compiled into debug builds only (make debug)")
def test_a_hook_that_calls_back_into_the_engine_is_caught():
    box = {}

    def end_turn_soon():                # a turn hook that ends the turn at once
        box["core"].end_turn()

    # (not the arm hook: Core() itself arms the timer, for its first idle look)
    core = box["core"] = Core(end_turn_soon=end_turn_soon)
    c = EngineClient(core)
    with pytest.raises(AssertionError, match="called back into the engine"):
        c.send(b"put 0 0 60 1\r\nx\r\n")     # the first read of a turn asks for its end
