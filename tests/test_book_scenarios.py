"""book.scenarios: each scenario is what its chapter says, and its helpers agree with the library."""

from dataclasses import replace

import numpy as np

from servebook import batching, quant
from servebook.book import scenarios
from servebook.units import GiB

SERVER = scenarios.BATCHING_SERVER


def test_the_batching_server_is_chapter_04s():
    assert (SERVER.model, SERVER.plan.gpu, SERVER.overhead, SERVER.max_len) == ("llama-2-13b", 40 * GiB, 4 * GiB, 2048)
    assert SERVER.kv_slots // SERVER.max_len == 7 and SERVER.block_size == 16


def test_simulate_runs_the_library_simulator_on_the_servers_pool():
    trace = scenarios.batching_trace(40, seed=5)
    ours = SERVER.simulate(trace, watermark=0.05).summary()
    theirs = batching.simulate(trace, kv_slots=SERVER.kv_slots, max_len=SERVER.max_len, block_size=16,
                               watermark=0.05, max_num_batched_tokens=None, cost=SERVER.cost).summary()
    assert ours == theirs


def test_the_server_moves_to_another_gpu_or_block_size():
    on_80 = replace(SERVER, gpu="a100-80gb-sxm")
    assert on_80.plan.gpu == 80 * GiB and on_80.plan.weights == SERVER.plan.weights
    assert on_80.kv_slots > 2 * SERVER.kv_slots
    coarse = replace(SERVER, block_size=256)
    assert coarse.simulate(scenarios.batching_trace(40, seed=5)).config["block_size"] == 256


def test_traffic_is_queued_at_time_0_or_arrives_over_time():
    assert {r.arrival_s for r in scenarios.batching_trace(50, seed=1)} == {0.0}
    online = scenarios.batching_trace(50, seed=1, arrival_rate=1.5)
    arrivals = [r.arrival_s for r in online]
    assert arrivals == sorted(arrivals) and arrivals[-1] > 0
    assert [r.prompt_len for r in online] == [r.prompt_len for r in scenarios.batching_trace(50, seed=1)]


def test_the_four_runs_are_the_server_on_the_trace():
    runs = scenarios.batching_runs(60, seed=7)
    assert set(runs) == {(p, a) for p in batching.POLICIES for a in batching.ALLOCATORS}
    again = SERVER.simulate(scenarios.batching_trace(60, seed=7), policy="static", allocator="naive")
    assert runs["static", "naive"].summary() == again.summary()


def test_the_seeds_grid():
    scale, zero_point = quant.choose_qparams_affine(*scenarios.EXAMPLE_RANGE, 4)
    assert (float(scale), zero_point) == (0.1, 6)
    assert quant.quantize_affine(scenarios.EXAMPLE_WEIGHT, scale, zero_point, 0, 15) == 10
    assert quant.quantize_affine(scenarios.EXAMPLE_OUTLIER, scale, zero_point, 0, 15) == 15


def test_the_latency_chapters_chat_traffic_is_what_it_says():
    chat = scenarios.CHAT
    trace = scenarios.chat_trace(4.0)
    assert len(trace) == chat.n_requests
    assert {r.prefix_len for r in trace} == {chat.system_prompt} and len({r.prefix_group for r in trace}) == 1
    turns = np.array([r.prompt_len - r.prefix_len for r in trace])
    answers = np.array([r.output_len for r in trace])
    # log-normal samples of 150: their means land within a third of the stated ones
    assert abs(turns.mean() / chat.turn_mean - 1) < 1 / 3 and abs(answers.mean() / chat.answer_mean - 1) < 1 / 3
