"""The paged KV-cache allocator: the seeds' numbers, the closed forms, sharing, prefix caching, errors."""

from __future__ import annotations

import hashlib
from array import array
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import memory, models, paging
from servebook.book.widgets.paging import paging_explorer, paging_explorer_text
from servebook.paging import NaiveAllocator, OutOfBlocks, PagedAllocator
from servebook.units import MiB

SPEC = models.get("llama-2-13b")


# ---------------------------------------------------------------------------
# The seeds' worked examples

def test_c3_one_token_in_a_block_of_16():
    one_token = memory.kv_cache_bytes(SPEC, seq_len=1)
    assert one_token == 819_200
    assert round(one_token / MiB, 2) == 0.78
    per_token = memory.kv_bytes_per_token(SPEC)
    block = per_token * paging.paged_slots(1, 16)
    assert block == 13_107_200 and block / MiB == 12.5
    assert Fraction(paging.paged_waste(1, 16), 16) == Fraction(9375, 10_000)  # 93.75 %
    wasted = per_token * paging.paged_waste(1, 16)
    assert wasted == 12_288_000 and round(wasted / MiB, 1) == 11.7
    assert one_token + wasted == block


def test_c3_through_the_allocator():
    kv = PagedAllocator(num_blocks=4, block_size=16)
    kv.allocate("bos", [1])
    use = kv.usage()
    assert (use.blocks_used, use.slots_reserved, use.tokens_stored, use.tail_waste) == (1, 16, 1, 15)
    assert use.tail_waste * memory.kv_bytes_per_token(SPEC) == 12_288_000


def test_c4_naive_vs_paged():
    assert paging.naive_waste(100, 2048) == 1948
    assert paging.blocks_needed(100, 16) == 7
    assert paging.paged_slots(100, 16) == 112
    assert paging.paged_waste(100, 16) == 12
    assert paging.paged_waste(100, 16) <= 16 - 1
    assert round(paging.naive_waste(100, 2048) / paging.paged_waste(100, 16)) == 162


def test_c4_through_both_allocators():
    prompt = list(range(100))
    naive = NaiveAllocator(num_slots=2048, max_len=2048)
    naive.allocate(0, prompt)
    paged = PagedAllocator(num_blocks=128, block_size=16)
    paged.allocate(0, prompt)
    assert naive.usage().reserved_unused == 1948
    assert paged.usage().blocks_used == 7
    assert paged.usage().tail_waste == 12


def test_l3_1_fragmentation():
    naive = paging.naive_waste(120, 2048)
    assert naive == 1928
    assert round(100 * naive / 2048, 1) == 94.1
    assert paging.blocks_needed(120, 16) == 8
    assert paging.paged_slots(120, 16) == 128
    assert paging.paged_waste(120, 16) == 8
    assert Fraction(paging.paged_waste(120, 16), paging.paged_slots(120, 16)) == Fraction(625, 10_000)
    # Over the 120 tokens used instead of the 128 slots reserved it would be 6.67 %, not 6.25 %.
    assert round(100 * paging.paged_waste(120, 16) / 120, 2) == 6.67
    assert max(paging.paged_waste(n, 16) for n in range(1, 2049)) == 15


def test_l5_1_scenario_a():
    assert round(100 * paging.naive_waste(60, 2048) / 2048) == 97
    assert paging.blocks_needed(60, 16) == 4
    assert paging.paged_slots(60, 16) == 64
    assert paging.paged_waste(60, 16) == 4
    assert Fraction(paging.paged_waste(60, 16), paging.paged_slots(60, 16)) == Fraction(625, 10_000)


# ---------------------------------------------------------------------------
# The closed forms agree with the allocators

@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 600), block_size=st.integers(1, 64))
def test_allocate_and_append_agree_with_closed_forms(n, block_size):
    at_once = PagedAllocator(num_blocks=700, block_size=block_size)
    at_once.allocate("s", [7] * n)
    grown = PagedAllocator(num_blocks=700, block_size=block_size)
    grown.allocate("s", [7])
    for _ in range(n - 1):
        grown.append("s", 7)
    for kv in (at_once, grown):
        use = kv.usage()
        assert use.blocks_used == paging.blocks_needed(n, block_size)
        assert use.tail_waste == paging.paged_waste(n, block_size)
        assert 0 <= use.tail_waste <= block_size - 1
        assert kv.tokens("s") == [7] * n


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 4096), max_len=st.integers(1, 4096))
def test_naive_waste_is_reservation_minus_use(n, max_len):
    if n > max_len:
        with pytest.raises(ValueError, match="max_len"):
            paging.naive_waste(n, max_len)
    else:
        assert paging.naive_waste(n, max_len) == max_len - n


@pytest.mark.parametrize("call", [
    lambda: paging.blocks_needed(10, 0),
    lambda: paging.blocks_needed(10, -16),
    lambda: paging.blocks_needed(-1, 16),
    lambda: paging.naive_waste(10, 0),
])
def test_closed_forms_reject_bad_sizes(call):
    with pytest.raises(ValueError):
        call()


def test_closed_forms_reject_non_integers():
    with pytest.raises(TypeError, match="block_size"):
        paging.blocks_needed(10, 16.0)
    with pytest.raises(TypeError, match="n_tokens"):
        paging.paged_waste(True, 16)


# ---------------------------------------------------------------------------
# Block tables, append, fork, copy-on-write

def test_append_takes_a_new_block_only_when_the_last_is_full():
    kv = PagedAllocator(num_blocks=8, block_size=4)
    kv.allocate("a", [1, 2, 3])
    assert kv.block_table("a") == [0]
    kv.append("a", 4)
    assert kv.block_table("a") == [0]
    kv.append("a", 5)
    assert kv.block_table("a") == [0, 1]
    assert kv.tokens("a") == [1, 2, 3, 4, 5]


def test_fork_shares_every_block_and_copy_on_write_protects_the_parent():
    kv = PagedAllocator(num_blocks=8, block_size=4)
    kv.allocate("parent", [1, 2, 3, 4, 5, 6])
    kv.fork("parent", "child")
    assert kv.block_table("child") == kv.block_table("parent") == [0, 1]
    assert [kv.pool.blocks[i].ref_count for i in (0, 1)] == [2, 2]
    kv.append("child", 70)
    # The shared full block stays shared; the partly filled one was copied before the write.
    assert kv.block_table("parent") == [0, 1]
    assert kv.block_table("child") == [0, 2]
    assert kv.tokens("parent") == [1, 2, 3, 4, 5, 6]
    assert kv.tokens("child") == [1, 2, 3, 4, 5, 6, 70]
    kv.append("parent", 7)  # block 1 is now the parent's alone: written in place
    assert kv.block_table("parent") == [0, 1]
    assert kv.tokens("parent") == [1, 2, 3, 4, 5, 6, 7]
    assert kv.usage().blocks_used == 3


def test_parallel_sampling_saves_the_shared_prompt():
    kv = PagedAllocator(num_blocks=64, block_size=16)
    kv.allocate(0, list(range(100)))
    for k in range(1, 4):
        kv.fork(0, k)
    for k in range(4):
        kv.append(k, 1000 + k)
    use = kv.usage()
    assert use.logical_tokens == 4 * 101
    # 6 full prompt blocks shared by all four; each sample has its own copy of the 7th.
    assert use.blocks_used == 6 + 4
    assert use.tokens_stored == 96 + 4 * 5


def test_free_returns_every_block():
    kv = PagedAllocator(num_blocks=6, block_size=4)
    kv.allocate("a", list(range(9)))
    kv.fork("a", "b")
    kv.append("b", 99)
    kv.free("a")
    kv.free("b")
    assert kv.pool.num_used == 0 and kv.pool.num_free == 6
    assert kv.usage().tokens_stored == 0 and len(kv) == 0


# ---------------------------------------------------------------------------
# Prefix caching

def test_block_hash_is_chained_sha256():
    first = paging.block_hash(None, [1, 2])
    assert len(first) == 32
    assert paging.block_hash(first, [3, 4]) != paging.block_hash(paging.block_hash(None, [9, 9]), [3, 4])
    # the ids hashed are native int64s: SHA-256 of (parent, then the block's ids as int64 bytes)
    ids = [2**63 - 1, 0, 1 << 24]
    assert paging.block_hash(first, ids) == hashlib.sha256(first + array("q", ids).tobytes()).digest()


@pytest.mark.parametrize(("tokens", "error", "match"), [
    ([1, 2**63], ValueError, r"tokens\[1\] must be a token id in \[0, 2\*\*63\)"),
    ([1, "2"], TypeError, r"tokens\[1\] must be an int token id"),
    ([0.5], TypeError, r"tokens\[0\] must be an int token id"),
])
def test_block_hash_names_the_entry_that_is_not_a_token_id(tokens, error, match):
    with pytest.raises(error, match=match):
        paging.block_hash(None, tokens)


def test_prefix_hit_reuses_full_blocks_and_computes_the_tail():
    kv = PagedAllocator(num_blocks=16, block_size=4, prefix_caching=True)
    system = [5, 6, 7, 8, 9, 10, 11, 12]
    assert kv.allocate("a", system + [1, 2]) == 0
    assert kv.allocate("b", system + [3]) == 8
    assert kv.block_table("b")[:2] == kv.block_table("a")[:2]
    assert kv.block_table("b")[2] != kv.block_table("a")[2]
    assert kv.usage().prefix_hit_tokens == 8 and kv.usage().prefix_queried_tokens == 19


def test_a_fully_cached_prompt_still_computes_its_last_block():
    kv = PagedAllocator(num_blocks=16, block_size=4, prefix_caching=True)
    prompt = list(range(8))
    kv.allocate("a", prompt)
    assert kv.allocate("b", prompt) == 4  # block 1 is recomputed, not reused
    assert kv.block_table("b")[0] == kv.block_table("a")[0]
    assert kv.block_table("b")[1] != kv.block_table("a")[1]


def test_freed_blocks_keep_their_hash_and_are_revived():
    kv = PagedAllocator(num_blocks=8, block_size=4, prefix_caching=True)
    kv.allocate("a", list(range(9)))
    table = kv.block_table("a")
    kv.free("a")
    assert kv.pool.cached_block_ids() == [table[1], table[0]]  # tail first: evicted first
    assert kv.allocate("b", list(range(9)) + [50]) == 8
    assert kv.block_table("b")[:2] == table[:2]
    assert kv.pool.num_cached == 0


def test_cached_blocks_are_evicted_lru_and_only_when_no_free_block_is_left():
    kv = PagedAllocator(num_blocks=4, block_size=2, prefix_caching=True)
    kv.allocate("a", [1, 2, 3, 4])     # blocks 0, 1, both full and hashed
    kv.free("a")
    assert kv.pool.cached_block_ids() == [1, 0]
    kv.allocate("b", [9, 9, 9])        # 2 blocks: the 2 never-used free blocks, no eviction
    assert kv.pool.cached_block_ids() == [1, 0]
    kv.append("b", 9)
    kv.append("b", 9)                  # a third block: evicts the LRU cached one, block 1
    assert kv.pool.cached_block_ids() == [0]
    kv.free("b")
    assert kv.allocate("c", [1, 2, 3, 4, 5]) == 2  # block 0 still revives; block 1's content is gone
    assert kv.block_table("c")[0] == 0


def test_a_hit_is_found_by_hash_alone(monkeypatch):
    # As in vLLM 0.33.0's V1 lookup: no token comparison, so a collision would serve another
    # request's keys and values; that is why the hash is SHA-256.  Patched so every block collides.
    collide = b"every block collides"
    monkeypatch.setattr(paging.paged_allocator, "block_hash", lambda parent, tokens: collide)
    monkeypatch.setattr(paging.paged_allocator, "extend_hashes",
                        lambda hashes, tokens, bs: hashes + [collide] * (len(tokens) // bs - len(hashes)))
    kv = PagedAllocator(num_blocks=8, block_size=2, prefix_caching=True)
    kv.allocate("a", [1, 2, 3])
    assert kv.allocate("b", [7, 8, 9]) == 2
    assert kv.block_table("b")[0] == kv.block_table("a")[0]


def test_duplicate_full_blocks_both_stay_reachable():
    kv = PagedAllocator(num_blocks=8, block_size=2, prefix_caching=True)
    kv.allocate("a", [1, 2])
    kv.allocate("b", [1, 2])  # its only block is recomputed (the last token always is): same content
    a, b = kv.block_table("a")[0], kv.block_table("b")[0]
    key = kv.pool.blocks[a].block_hash
    assert key is not None and kv.pool.blocks[b].block_hash == key
    assert kv.pool.blocks_with_hash(key) == [a, b] and kv.pool.num_hashes == 1
    kv.free("a")
    while kv.pool.num_free:               # use up the empty blocks, then evict a's cached copy
        kv.pool.take()
    kv.pool.take()
    assert kv.pool.blocks_with_hash(key) == [b]
    assert kv.cached_prefix([1, 2, 3]) == 2  # b's copy still serves the prefix


def test_a_lookup_finds_the_first_registered_copy_still_cached():
    kv = PagedAllocator(num_blocks=4, block_size=2, prefix_caching=True)
    for seq in "abc":
        kv.allocate(seq, [1, 2])   # three copies of one full block, registered in this order
    a, b, c = (kv.block_table(seq)[0] for seq in "abc")
    key = kv.pool.blocks[a].block_hash
    assert kv.pool.blocks_with_hash(key) == [a, b, c] and kv.pool.lookup(key).block_id == a
    kv.free("b")
    kv.pool.take()   # the one empty block
    kv.pool.take()   # evicts b's copy, the only cached one
    assert kv.pool.blocks_with_hash(key) == [a, c] and kv.pool.lookup(key).block_id == a
    kv.free("a")
    kv.pool.take()   # evicts a's copy: c's is found now
    assert kv.pool.blocks_with_hash(key) == [c] and kv.pool.lookup(key).block_id == c and kv.pool.num_hashes == 1


def test_freed_empty_blocks_are_reused_first_and_cached_ones_last():
    # vLLM 0.33.0's free_blocks: unhashed blocks to the front of the free queue (most recent
    # first), hashed ones to the back, the request's tail first.
    kv = PagedAllocator(num_blocks=6, block_size=2, prefix_caching=True)
    kv.allocate("a", [1, 2, 3, 4, 5])     # blocks 0, 1 full (hashed), block 2 partial
    kv.allocate("b", [9])                 # block 3
    kv.free("a")
    kv.free("b")
    assert kv.pool.free_block_ids() == [3, 2, 4, 5]
    assert kv.pool.cached_block_ids() == [1, 0]


def test_can_allocate_has_no_side_effects_and_counts_revived_hits():
    kv = PagedAllocator(num_blocks=4, block_size=2, prefix_caching=True)
    kv.allocate("a", [1, 2, 3, 4])
    kv.free("a")
    kv.allocate("x", [7, 7])            # now 2 cached, 1 free
    before = (kv.pool.cached_block_ids(), kv.pool.free_block_ids(), kv.usage())
    # 4 blocks with 1 hit: 3 new ones; 3 blocks are free or cached, but only 2 once the hit is revived.
    assert not kv.can_allocate([1, 2, 5, 6, 7, 8, 9])
    assert kv.can_allocate([1, 2, 5, 6, 7])
    assert (kv.pool.cached_block_ids(), kv.pool.free_block_ids(), kv.usage()) == before
    with pytest.raises(OutOfBlocks):
        kv.allocate("b", [1, 2, 5, 6, 7, 8, 9])
    assert (kv.pool.cached_block_ids(), kv.pool.free_block_ids(), kv.usage()) == before
    assert "b" not in kv


def test_keep_free_watermark():
    kv = PagedAllocator(num_blocks=4, block_size=2)
    assert kv.can_allocate([1] * 6)
    assert not kv.can_allocate([1] * 6, keep_free=2)


# ---------------------------------------------------------------------------
# Bad input: a clear error and nothing changed

def _state(kv: PagedAllocator):
    return (kv.usage(), kv.pool.free_block_ids(), kv.pool.cached_block_ids(),
            {s: (kv.block_table(s), kv.tokens(s)) for s in kv.sequences})


@pytest.mark.parametrize("bad_call, error", [
    (lambda kv: kv.allocate("a", [1]), ValueError),          # already allocated
    (lambda kv: kv.allocate("z", []), ValueError),           # empty prompt
    (lambda kv: kv.allocate("z", [1] * 40), ValueError),     # longer than the pool
    (lambda kv: kv.allocate("z", [1, -2]), ValueError),      # negative token id
    (lambda kv: kv.allocate("z", [1, 2.5]), TypeError),      # not a token id
    (lambda kv: kv.allocate("z", "hello"), TypeError),       # a string is not token ids
    (lambda kv: kv.allocate(["unhashable"], [1]), TypeError),
    (lambda kv: kv.append("nobody", 1), ValueError),         # unknown sequence
    (lambda kv: kv.append("a", -1), ValueError),
    (lambda kv: kv.append("a", None), TypeError),
    (lambda kv: kv.free("nobody"), ValueError),
    (lambda kv: kv.fork("a", "b"), ValueError),              # child id exists
    (lambda kv: kv.fork("nobody", "c"), ValueError),
    (lambda kv: kv.can_allocate([1], keep_free=-1), ValueError),
    (lambda kv: kv.allocate("z", [1, 2], reserve=-1), ValueError),
    (lambda kv: kv.allocate("z", [1, 2], num_new=0), ValueError),
    (lambda kv: kv.allocate("z", [1, 2], num_new=3), ValueError),
    (lambda kv: kv.allocate("z", [1] * 5, reserve=7), OutOfBlocks),
    (lambda kv: kv.extend("a", list(range(6)), 1), ValueError),  # nothing left to write
    (lambda kv: kv.extend("nobody", [1], 1), ValueError),
    (lambda kv: kv.pool.share(kv.pool.blocks[7]), ValueError),   # an empty free block
    (lambda kv: kv.pool.share("block 0"), TypeError),
    (lambda kv: kv.pool.release(kv.pool.blocks[7]), ValueError),
    (lambda kv: kv.pool.register(kv.pool.blocks[kv.block_table("a")[1]], b"k"), ValueError),  # partly filled
    (lambda kv: kv.pool.register(kv.pool.blocks[kv.block_table("a")[0]], b"k"), ValueError),  # hashed already
    (lambda kv: kv.pool.register(kv.pool.blocks[7], b"k"), ValueError),  # free
    (lambda kv: kv.pool.register(paging.BlockPool(8, 4).blocks[0], b"k"), ValueError),  # another pool's
    (lambda kv: kv.pool.lookup("key"), TypeError),
])
def test_bad_input_raises_and_changes_nothing(bad_call, error):
    kv = PagedAllocator(num_blocks=8, block_size=4, prefix_caching=True)
    kv.allocate("a", list(range(6)))
    kv.allocate("b", list(range(6)) + [9])
    before = _state(kv)
    with pytest.raises(error):
        bad_call(kv)
    assert _state(kv) == before


def test_a_chunked_prompt_is_hashed_as_its_chunks_are_written():
    kv = PagedAllocator(num_blocks=8, block_size=4, prefix_caching=True)
    prompt = list(range(10))
    assert kv.allocate("a", prompt, num_new=5) == 0          # first chunk: block 0 full, block 1 started
    assert kv.cached_prefix(prompt + [99]) == 4               # only what was scheduled is in the cache
    kv.extend("a", prompt, 5)                                 # the rest of the prompt
    assert kv.num_tokens("a") == 10 and kv.tokens("a") == prompt
    assert kv.cached_prefix(prompt + [99]) == 8


def test_allocate_keeps_a_reserve_and_admits_the_whole_prompt_only():
    kv = PagedAllocator(num_blocks=4, block_size=4)
    with pytest.raises(OutOfBlocks):
        kv.allocate("a", list(range(12)), num_new=4, reserve=2)  # 3 blocks + 2 spare > 4
    kv.allocate("a", list(range(12)), num_new=4, reserve=1)
    assert kv.pool.num_used == 1                                  # only the first chunk's block is taken


def test_double_free_and_append_after_free_are_errors():
    kv = PagedAllocator(num_blocks=4, block_size=4)
    kv.allocate("a", [1])
    kv.free("a")
    with pytest.raises(ValueError, match="already freed"):
        kv.free("a")
    with pytest.raises(ValueError, match="not allocated"):
        kv.append("a", 2)


def test_out_of_blocks_on_append_changes_nothing():
    kv = PagedAllocator(num_blocks=2, block_size=2)
    kv.allocate("a", [1, 2])
    kv.allocate("b", [3, 4])
    before = _state(kv)
    assert not kv.can_append("a")
    with pytest.raises(OutOfBlocks):
        kv.append("a", 5)
    assert _state(kv) == before


@pytest.mark.parametrize("num_blocks, block_size", [(0, 16), (-1, 16), (8, 0), (8, -4)])
def test_pool_rejects_bad_sizes(num_blocks, block_size):
    with pytest.raises(ValueError):
        PagedAllocator(num_blocks, block_size)


@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_prefix_caching_must_be_a_real_flag(value):
    # "no" is truthy: read as a bool, it would silently turn caching on.
    with pytest.raises(TypeError, match="prefix_caching must be True or False"):
        PagedAllocator(8, 4, prefix_caching=value)


# ---------------------------------------------------------------------------
# The naive allocator

def test_naive_reserves_max_len_and_wastes_the_remainder_of_the_pool():
    naive = NaiveAllocator(num_slots=5000, max_len=2048)
    assert naive.num_regions == 2 and naive.unusable_slots == 904
    naive.allocate("a", [1] * 60)
    assert naive.region("a") == (0, 2048)
    naive.allocate("b", [1] * 120)
    assert not naive.can_allocate([1])
    with pytest.raises(OutOfBlocks):
        naive.allocate("c", [1])
    use = naive.usage()
    assert (use.slots_reserved, use.tokens_stored, use.reserved_unused) == (4096, 180, 4096 - 180)
    naive.append("a", 1)
    naive.free("b")
    assert naive.usage().tokens_stored == 61 and naive.can_allocate([1])


def test_naive_errors():
    with pytest.raises(ValueError, match="smaller than one max_len"):
        NaiveAllocator(num_slots=100, max_len=2048)
    naive = NaiveAllocator(num_slots=8, max_len=4)
    naive.allocate("a", [1, 2, 3, 4])
    with pytest.raises(ValueError, match="max_len"):
        naive.append("a", 5)
    with pytest.raises(ValueError, match="longer than max_len"):
        naive.allocate("b", [1] * 5)
    with pytest.raises(ValueError, match="not allocated"):
        naive.free("b")
    assert naive.usage().tokens_stored == 4


# ---------------------------------------------------------------------------
# The explorer widget shows the same numbers

def test_explorer_text_shows_the_c4_numbers():
    text = paging_explorer_text(100, block_size=16, max_len=2048)
    assert "1,948 empty" in text and "7 blocks of 16 = 112 slots, 12 empty" in text
    assert "162.3 times" in text and "819,200 bytes per token" in text
    assert "paged waste is zero" in paging_explorer_text(128, block_size=16)


def test_explorer_reports_bad_input():
    with pytest.raises(ValueError, match="max_len"):
        paging_explorer_text(3000, max_len=2048)
    widget = paging_explorer(n_tokens=100)
    assert "1,948 empty" in widget.children[1].value


@pytest.mark.parametrize("block_size", [1, 2, 5, 16])
def test_the_hashes_of_a_prompt_are_the_chain_of_block_hash_from_any_start(block_size):
    tokens = [(7919 * i) % (2**63 - 1) for i in range(3 * block_size + 2)]
    chain, parent = [], None
    for i in range(len(tokens) // block_size):
        parent = paging.hashing.block_hash(parent, tokens[i * block_size:(i + 1) * block_size])
        chain.append(parent)
    for known in range(len(chain) + 1):
        assert paging.hashing.extend_hashes(chain[:known], tokens, block_size) == chain
    assert paging.hashing.extend_hashes([], tokens[:block_size - 1], block_size) == []


@pytest.mark.parametrize("base", [0, 2**40 + 3, 2**63 - 100])
def test_the_hashes_of_a_range_of_ids_are_those_of_the_same_ids_in_a_list(base):
    # A range is converted to bytes by numpy, a list by array: both must give the bytes block_hash hashes.
    ids = range(base, base + 3 * 16 + 5)
    assert paging.hashing.extend_hashes([], ids, 16) == paging.hashing.extend_hashes([], list(ids), 16)
    assert paging.hashing.extend_hashes([], ids, 16, stop=40) == paging.hashing.extend_hashes([], list(ids), 16)[:2]
    parent = paging.hashing.block_hash(None, list(ids[:16]))
    assert paging.hashing.extend_hashes([parent], ids, 16)[1] == paging.hashing.block_hash(parent, list(ids[16:32]))


def test_blocks_written_from_a_range_keep_it_and_behave_as_blocks_written_from_a_list():
    """The simulator writes a request's own ids, consecutive, as ranges (no list is built); a block holding
    one reads back, hashes, appends, and is copied on write as a block holding the same ids in a list."""
    ids = range(1000, 1010)
    from_range, from_list = (PagedAllocator(num_blocks=8, block_size=4, prefix_caching=True) for _ in range(2))
    from_range._allocate("s", ids)
    from_list._allocate("s", list(ids))
    assert [type(from_range.pool.blocks[b].tokens) for b in from_range.block_table("s")] == [range] * 3
    for kv in (from_range, from_list):
        kv.fork("s", "child")
        kv.append("child", 7)   # the shared last block (two ids) is copied, then written
        kv.append("s", 8)
        kv._write_through("s", [*ids, 8, 9, 10], 13)   # continues the last block, takes the next
    for seq in ("s", "child"):
        assert from_range.tokens(seq) == from_list.tokens(seq)
        assert from_range.block_table(seq) == from_list.block_table(seq)
    assert from_range.tokens("s") == [*ids, 8, 9, 10] and from_range.tokens("child") == [*ids, 7]
    assert [b.block_hash for b in from_range.pool.blocks] == [b.block_hash for b in from_list.pool.blocks]
    assert from_range.usage() == from_list.usage()
