"""Stateful tests of the paged allocator: thousands of random operations, invariants after each.

The machine keeps a model of what every sequence should read back, and after
every step checks that

- every physical block is exactly one of: free (empty), cached (ref 0, hashed),
  or used with a reference count equal to the number of block-table entries
  holding it;
- every sequence reads back exactly its own tokens (copy-on-write never lets
  one sequence's append change another's);
- the counters (tokens stored, blocks used/free/cached) match the blocks;
- a cached block's hash is the chained hash of the prefix it stores;

and that a failed operation (out of blocks, or bad input) changes nothing, and
that freeing every sequence returns every block.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from servebook import paging
from servebook.paging import OutOfBlocks, PagedAllocator

BLOCK_SIZE = 3
NUM_BLOCKS = 10
TOKENS = st.integers(0, 2)  # a tiny vocabulary, so prompts share prefixes and hit the cache often


def snapshot(kv: PagedAllocator):
    pool = kv.pool
    return (
        tuple((b.ref_count, b.block_hash, tuple(b.tokens)) for b in pool.blocks),
        tuple(pool.free_block_ids()), tuple(pool.cached_block_ids()), kv.usage(),
        tuple((s, tuple(kv.block_table(s)), kv.num_tokens(s)) for s in kv.sequences),
    )


class AllocatorMachine(RuleBasedStateMachine):
    seqs = Bundle("seqs")

    def __init__(self) -> None:
        super().__init__()
        self.kv = PagedAllocator(NUM_BLOCKS, BLOCK_SIZE, prefix_caching=True)
        self.expected: dict[int, list[int]] = {}
        self.next_id = 0
        self.freed: list[int] = []

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    # -- operations
    @initialize(target=seqs, prompt=st.lists(TOKENS, min_size=1, max_size=2 * BLOCK_SIZE))
    def first_sequence(self, prompt):
        return self._allocate(prompt)

    @rule(target=seqs, prompt=st.lists(TOKENS, min_size=1, max_size=3 * BLOCK_SIZE + 1))
    def allocate(self, prompt):
        return self._allocate(prompt)

    @precondition(lambda self: self.expected)
    @rule(target=seqs, data=st.data(), suffix=st.lists(TOKENS, max_size=BLOCK_SIZE + 1))
    def allocate_with_shared_prefix(self, data, suffix):
        source = data.draw(st.sampled_from(sorted(self.expected)))
        cut = data.draw(st.integers(1, len(self.expected[source])))
        return self._allocate(self.expected[source][:cut] + suffix)

    def _allocate(self, prompt):
        seq_id = self._new_id()
        before = snapshot(self.kv)
        if len(prompt) > NUM_BLOCKS * BLOCK_SIZE:   # a prefix of a sequence grown by appends and extends
            event("prompt longer than the pool")
            for ask in (self.kv.can_allocate, lambda p: self.kv.allocate(seq_id, p)):
                with pytest.raises(ValueError, match="the pool has only"):
                    ask(prompt)
            assert snapshot(self.kv) == before
            return seq_id
        able = self.kv.can_allocate(prompt)
        if able:
            cached = self.kv.allocate(seq_id, prompt)
            event("prefix hit" if cached else "prefix miss")
            assert cached % BLOCK_SIZE == 0 and cached < len(prompt)
            self.expected[seq_id] = list(prompt)
        else:
            event("allocation out of blocks")
            with pytest.raises(OutOfBlocks):
                self.kv.allocate(seq_id, prompt)
            assert snapshot(self.kv) == before
        return seq_id

    @rule(seq=seqs, token=TOKENS)
    def append(self, seq, token):
        if seq not in self.expected:
            with pytest.raises(ValueError):
                self.kv.append(seq, token)
            return
        able = self.kv.can_append(seq)
        last = self.kv.pool.blocks[self.kv.block_table(seq)[-1]]
        if last.ref_count > 1 and len(last.tokens) < BLOCK_SIZE:
            event("copy-on-write")
        if able and self.kv.pool.num_free == 0 and len(last.tokens) == BLOCK_SIZE:
            event("append evicts a cached block")
        before = snapshot(self.kv)
        try:
            self.kv.append(seq, token)
        except OutOfBlocks:
            event("append out of blocks")
            assert not able
            assert snapshot(self.kv) == before
        else:
            assert able
            self.expected[seq].append(token)

    @rule(seq=seqs, new=st.lists(TOKENS, min_size=1, max_size=2 * BLOCK_SIZE + 2))
    def extend(self, seq, new):
        """Several tokens at once (a prompt's next chunk, a recomputation): the partly filled block is
        continued, the blocks after it are taken together and hashed from the stream."""
        if seq not in self.expected:
            with pytest.raises(ValueError):
                self.kv.extend(seq, new, len(new))
            return
        stream = self.expected[seq] + new
        last = self.kv.pool.blocks[self.kv.block_table(seq)[-1]]
        before = snapshot(self.kv)
        if last.ref_count > 1 and len(last.tokens) < BLOCK_SIZE:
            with pytest.raises(ValueError, match="shares its last block"):
                self.kv.extend(seq, stream, len(new))
            assert snapshot(self.kv) == before
            return
        try:
            self.kv.extend(seq, stream, len(new))
        except OutOfBlocks:
            event("extend out of blocks")
            assert snapshot(self.kv) == before
        else:
            event("extend fills a block" if len(stream) // BLOCK_SIZE > len(self.expected[seq]) // BLOCK_SIZE
                  else "extend within a block")
            self.expected[seq] = stream

    @rule(target=seqs, seq=seqs)
    def fork(self, seq):
        child = self._new_id()
        if seq not in self.expected:
            with pytest.raises(ValueError):
                self.kv.fork(seq, child)
            return child
        self.kv.fork(seq, child)
        self.expected[child] = list(self.expected[seq])
        return child

    @rule(target=seqs, seq=seqs, parent_token=TOKENS, child_token=TOKENS)
    def sample_twice(self, seq, parent_token, child_token):
        """Parallel sampling: fork, then both write into what may be a shared, partly filled block."""
        child = self.fork(seq)
        if child in self.expected:
            self.append(child, child_token)
            self.append(seq, parent_token)
        return child

    @rule(seq=consumes(seqs))
    def free(self, seq):
        if seq in self.expected:
            self.kv.free(seq)
            del self.expected[seq]
            self.freed.append(seq)
        else:
            with pytest.raises(ValueError):
                self.kv.free(seq)

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def misuse_a_freed_sequence(self, data):
        seq = data.draw(st.sampled_from(self.freed))
        before = snapshot(self.kv)
        for bad in (lambda: self.kv.free(seq), lambda: self.kv.append(seq, 0), lambda: self.kv.fork(seq, -1)):
            with pytest.raises(ValueError):
                bad()
        assert snapshot(self.kv) == before

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def misuse_a_live_sequence(self, data):
        seq = data.draw(st.sampled_from(sorted(self.expected)))
        other = data.draw(st.sampled_from(sorted(self.expected)))
        before = snapshot(self.kv)
        bad_calls = [
            (lambda: self.kv.fork(other, seq), ValueError),                   # into an existing id
            (lambda: self.kv.allocate(seq, [0]), ValueError),                 # id taken
            (lambda: self.kv.allocate(-2, [0] * (NUM_BLOCKS * BLOCK_SIZE + 1)), ValueError),  # longer than the pool
            (lambda: self.kv.append(seq, -1), ValueError),
            (lambda: self.kv.append(seq, 1.5), TypeError),
        ]
        for call, error in bad_calls:
            with pytest.raises(error):
                call()
        assert snapshot(self.kv) == before

    @rule()
    def free_everything_returns_every_block(self):
        for seq in list(self.expected):
            self.kv.free(seq)
            self.freed.append(seq)
        self.expected.clear()
        pool = self.kv.pool
        assert pool.num_used == 0
        assert pool.num_free + pool.num_cached == NUM_BLOCKS
        assert self.kv.usage().tokens_stored == 0

    # -- invariants
    @invariant()
    def every_block_is_free_cached_or_owned(self):
        pool = self.kv.pool
        holders = Counter(b for s in self.expected for b in self.kv.block_table(s))
        free, cached = set(pool.free_block_ids()), set(pool.cached_block_ids())
        assert not free & cached
        for block in pool.blocks:
            assert block.ref_count == holders[block.block_id]
            if block.ref_count == 0:
                assert (block.block_id in free) != (block.block_id in cached)
                if block.block_id in free:
                    assert block.block_hash is None and block.tokens == []
                else:
                    assert block.block_hash is not None
            else:
                assert block.block_id not in free and block.block_id not in cached
        assert pool.num_used + pool.num_free + pool.num_cached == NUM_BLOCKS

    @invariant()
    def every_sequence_reads_its_own_tokens(self):
        for seq, tokens in self.expected.items():
            assert self.kv.tokens(seq) == tokens
            table = self.kv.block_table(seq)
            assert len(table) == paging.blocks_needed(len(tokens), BLOCK_SIZE)
            assert all(len(self.kv.pool.blocks[b].tokens) == BLOCK_SIZE for b in table[:-1])

    @invariant()
    def counters_match_the_blocks(self):
        pool = self.kv.pool
        use = self.kv.usage()
        used = [b for b in pool.blocks if b.ref_count > 0]
        assert use.tokens_stored == sum(len(b.tokens) for b in used)
        assert use.blocks_used == len(used)
        assert use.logical_tokens == sum(len(t) for t in self.expected.values())
        assert 0 <= use.tail_waste == use.slots_reserved - use.tokens_stored
        assert use.prefix_hit_tokens <= use.prefix_queried_tokens

    @invariant()
    def cached_hashes_name_their_whole_prefix(self):
        for seq, tokens in self.expected.items():
            parent = None
            for i, block_id in enumerate(self.kv.block_table(seq)[: len(tokens) // BLOCK_SIZE]):
                parent = paging.block_hash(parent, tokens[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
                stored = self.kv.pool.blocks[block_id].block_hash
                assert stored is None or stored == parent


AllocatorMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestAllocator = AllocatorMachine.TestCase
