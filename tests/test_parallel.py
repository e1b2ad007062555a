"""Tensor and pipeline parallelism: shards counted tensor by tensor, KV heads copied, vLLM's reserve, the link."""

import math
from dataclasses import replace

import pytest

from servebook import advisor, gpus, memory, models, parallel, roofline
from servebook.book import scenarios
from servebook.parallel import Layout, Node
from servebook.units import GiB, MiB

LLAMA70 = models.get("llama-3-70b")
B = scenarios.LEVER_SCENARIOS["B"]


# --- the must-shows -------------------------------------------------------------------------------------


def test_llama3_70b_keeps_4_2_1_1_kv_heads_per_gpu_and_copies_them_past_8():
    assert [parallel.kv_heads_per_gpu(LLAMA70, t) for t in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    per_token = {t: parallel.kv_bytes_per_token_per_gpu(LLAMA70, Layout(t)) for t in (1, 2, 4, 8, 16)}
    assert per_token[16] == per_token[8] == per_token[1] // 8  # t = 16 stores every head twice
    assert [parallel.kv_copies(LLAMA70, t) for t in (8, 16)] == [1, 2]


def _llama70_by_hand(t: int) -> int:
    """Llama-3-70B's shards on one GPU, written out from the architecture (no library code)."""
    d, inter, heads, kv, hd, layers, vocab = 8192, 28672, 64, 8, 128, 80, 128256
    q = d * (heads // t) * hd
    k = v = d * max(1, kv // t) * hd  # whole heads; copied when t > 8
    o = (heads // t) * hd * d
    mlp = 3 * d * (inter // t)        # gate and up (column), down (row)
    norms = 2 * d                     # replicated
    return layers * (q + k + v + o + mlp + norms) + 2 * (vocab // t) * d + d  # embedding, LM head, final norm


@pytest.mark.parametrize("t", [1, 2, 4, 8, 16])
def test_llama3_70b_bf16_weights_per_gpu_are_the_exact_count_of_its_shards(t):
    assert parallel.params_per_gpu(LLAMA70, Layout(t)) == _llama70_by_hand(t)
    assert parallel.weight_bytes_per_gpu(LLAMA70, Layout(t), "bf16") == 2 * _llama70_by_hand(t)


def test_at_16_gpus_the_copied_kv_projections_add_84m_parameters_so_params_over_t_is_wrong():
    excess = parallel.replicated_excess(LLAMA70, Layout(16))
    kv_copies = excess["k projection"] + excess["v projection"]
    assert kv_copies == 80 * 2 * 128 * 8192 // 2 == 83_886_080  # half of each GPU's K/V is a copy
    assert "k projection" not in parallel.replicated_excess(LLAMA70, Layout(8))
    assert parallel.params_per_gpu(LLAMA70, Layout(16)) - LLAMA70.n_params / 16 == pytest.approx(85.1e6, rel=1e-3)


def test_chapter_08_workload_on_one_gpu_through_the_parallel_counts_is_the_one_gpu_answer():
    one = B.advise()
    split = advisor.advise(B.model, B.gpu, replace(B.workload, tensor_parallel=1))
    assert split.baseline == one.baseline and split.numbers == one.numbers
    assert [r.served for r in split.ranking] == [r.served for r in one.ranking]


@pytest.mark.parametrize(("make", "match"), [
    (lambda: parallel.check(LLAMA70, Layout(3)), r"tensor-parallel size 3 must divide the attention heads \(64\)"),
    (lambda: parallel.check(LLAMA70, Layout(1, 81)), r"pipeline-parallel size 81 is larger than the 80 layers"),
    (lambda: Layout(0), r"tensor must be >= 1"),
    (lambda: Layout(2, -1), r"pipeline must be >= 1"),
    (lambda: Node("h200", 0), r"gpus must be >= 1"),
    (lambda: Node("h200").holds(Layout(16)), r"TP 16 needs 16 GPUs, more than the node's 8 H200 SXM"),
    (lambda: parallel.plan(LLAMA70, Node("h100-sxm"), Layout(8, 2), 4096), r"needs 16 GPUs, more than the node"),
    (lambda: parallel.check(models.get("qwen2.5-7b"), Layout(8)), r"must be a multiple of the 4 key/value heads|"
                                                                 r"must divide the attention heads \(28\)"),
    (lambda: parallel.plan(LLAMA70, "h200", Layout(2), 0), r"seq_len must be >= 1"),
])
def test_bad_layouts_are_refused_with_what_does_not_divide(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_key_value_heads_that_do_not_divide_the_gpus_are_refused():
    with pytest.raises(ValueError, match=r"must be a multiple of the 8 key/value heads of Llama-3-70B"):
        parallel.check(replace(LLAMA70, n_heads=96), Layout(12))


# --- every model, every layer kind ------------------------------------------------------------------------


@pytest.mark.parametrize("name", models.names())
def test_one_gpu_holds_exactly_the_parameters_of_the_model_and_its_step_shape(name):
    spec = models.get(name)
    assert parallel.stage_params(spec, Layout(), padding=1) == (spec.count_params(),)
    assert parallel.step_shape(spec, Layout(), "h200", padding=1) == roofline.StepShape.of(spec)


@pytest.mark.parametrize(("name", "layout"), [("llama-3-70b", Layout(4, 2)), ("mixtral-8x7b", Layout(2, 4)),
                                              ("deepseek-v3", Layout(8, 2)), ("gemma-2-9b", Layout(2, 3)),
                                              ("qwen3-30b-a3b", Layout(4))])
def test_shards_add_up_to_the_model_plus_the_copies(name, layout):
    spec, t = models.get(name), layout.tensor
    tensors = [x for s in range(layout.pipeline) for x in parallel.stage_tensors(spec, layout, s, padding=1)]
    tied_copy = spec.vocab_size * spec.d_model if spec.tied_embeddings and layout.pipeline > 1 else 0
    assert sum(x.params for x in tensors) == spec.count_params() + tied_copy
    for x in tensors:
        held = x.per_gpu * t
        assert held == x.params if x.split in ("column", "row", "vocabulary") and x.name != "attention output" \
            else held >= x.params
        if x.split == "replicated":
            assert held == t * x.params


def test_pipeline_stages_split_layers_as_vllm_does():
    assert parallel.pipeline_stages(80, 3) == (27, 27, 26)
    assert parallel.pipeline_stages(126, 4) == (31, 32, 32, 31)
    assert parallel.pipeline_stages(61, 4) == (15, 15, 16, 15)
    assert parallel.pipeline_stages(80, 80) == (1,) * 80
    assert [len(r) for r in parallel.stage_layers(LLAMA70, Layout(1, 2))] == [40, 40]


def test_mla_keeps_its_whole_latent_on_every_gpu():
    v3 = models.get("deepseek-v3")
    per_token = {t: parallel.kv_bytes_per_token_per_gpu(v3, Layout(t)) for t in (1, 2, 8)}
    assert per_token[1] == per_token[2] == per_token[8] == memory.kv_bytes_per_token(v3)
    assert parallel.kv_copies(v3, 8) == 8
    down = [x for x in parallel.layer_tensors(v3, Layout(8), 5) if "down-projection" in x.name]
    assert down and all(x.copies == 8 for x in down)


def test_experts_are_split_in_width_and_the_router_is_whole():
    mixtral = models.get("mixtral-8x7b")
    layer = {x.name: x for x in parallel.layer_tensors(mixtral, Layout(2))}
    assert layer["routed experts"].per_gpu * 2 == layer["routed experts"].params == 8 * 3 * 4096 * 14336
    assert layer["router"].per_gpu == layer["router"].params == 4096 * 8
    narrower = replace(mixtral, moe=replace(mixtral.moe, expert_size=14344))
    with pytest.raises(ValueError, match=r"tensor-parallel size 16 must divide the expert width \(14344\)"):
        parallel.check(narrower, Layout(16))


def test_a_pipeline_stage_holds_its_own_layers_cache_and_the_last_the_lm_head():
    two = Layout(1, 2)
    first, last = (parallel.stage_tensors(LLAMA70, two, s) for s in (0, 1))
    assert first[0].name == "embedding table" and last[-1].name == "LM head"
    assert parallel.kv_bytes_per_token_per_gpu(LLAMA70, two) * 2 == memory.kv_bytes_per_token(LLAMA70)
    gemma = models.get("gemma-2-9b")  # tied: the last stage builds its own copy of the table
    assert parallel.stage_tensors(gemma, two, 1)[-1].name == "LM head"
    assert all(x.name != "LM head" for x in parallel.stage_tensors(gemma, Layout(), 0))


# --- vLLM's reserve and capacity ---------------------------------------------------------------------------------


def test_a_flat_overhead_on_one_gpu_is_chapter_07s_plan():
    case = scenarios.CAPACITY
    flat = parallel.plan(case.model, case.gpu, Layout(), case.seq_len, overhead=case.overhead)
    chapter = memory.model_capacity_plan(case.model, gpus.get(case.gpu).memory, case.seq_len,
                                         overhead=case.overhead)
    assert flat.stages[0].capacity_plan() == chapter and flat.requests == chapter.requests == 16


def test_vllms_budget_is_a_share_of_total_memory_and_keeps_back_the_profiling_peak():
    server = parallel.Server()
    h200 = gpus.get("h200")
    assert server.budget(h200.memory) == math.ceil(0.92 * h200.memory)
    assert len(server.capture_sizes()) == 51 and server.capture_sizes()[-1] == 512
    result = parallel.plan(LLAMA70, Node("h200"), Layout(2), 6250)
    s = result.stages[0]
    assert s.reserve == h200.memory - server.budget(h200.memory) + s.activations + s.cuda_graphs
    assert s.kv_pool == h200.memory - s.reserve - s.weights and s.starts
    assert s.activations == max(parallel.forward_peak(LLAMA70, Layout(2), 8192),
                                parallel.sampler_peak(LLAMA70, 1024))
    assert result.replicas == 4 and result.users == 4 * result.requests
    # One H200 cannot hold the BF16 model beside vLLM's default reserve; the first edition's 4 GiB could.
    assert parallel.plan(LLAMA70, "h200", Layout(), 6250).requests == 0
    assert parallel.plan(LLAMA70, "h200", Layout(), 6250, overhead=4 * GiB).requests > 0


def test_the_residual_stream_is_whole_on_every_gpu():
    peaks = [parallel.forward_peak(LLAMA70, Layout(t), 8192) for t in (1, 2, 4, 8)]
    assert peaks == sorted(peaks, reverse=True)
    floor = 8192 * 2 * 8192 * 2  # residual and hidden state, BF16
    assert all(p > floor for p in peaks) and peaks[-1] - floor < (peaks[0] - floor) / 4


def test_nccl_buffers_match_the_nvls_log_of_8_h200():
    ring = 2 * 24 * 4 * MiB
    assert parallel.nccl_reserve("h200", Layout(8)) - ring == 2_415_919_104  # nvlsTotalSize in the log
    assert parallel.nccl_reserve("h200", Layout(2)) == ring and parallel.nccl_reserve("h200", Layout()) == 0
    assert parallel.nccl_reserve("l40s", Layout(4)) == ring  # no NVSwitch, no NVLink SHARP


def test_what_vllm_logs_is_the_smallest_workers_blocks():
    result = parallel.plan("llama-3.1-405b", Node("h100-sxm", 16), Layout(8, 2), 8192)
    log = parallel.vllm_kv_log(result, 8192)
    per_token = [s.per_token for s in result.stages]
    assert log.blocks == min(s.kv_pool // (16 * s.per_token) for s in result.stages) and per_token[0] == per_token[1]
    assert log.tokens == int(log.blocks / 512 * 8192) and log.max_concurrency == log.blocks / 512
    assert log.lines()[-1].startswith("GPU KV cache size: ") and "Available KV cache memory" in log.lines()[0]
    with pytest.raises(ValueError, match="sliding layers"):
        parallel.vllm_kv_log(parallel.plan("gemma-2-9b", "h100-sxm", Layout(), 4096), 4096)


# --- the link -----------------------------------------------------------------------------------------------------


def test_a_ring_all_reduce_sends_2_t_minus_1_over_t_of_the_message_plus_its_hops():
    nvlink, pcie = gpus.get("h200").nvlink, gpus.get("l40s").pcie
    assert [parallel.ring_share(t) for t in (1, 2, 4, 8)] == [0, 1, 1.5, 1.75]
    message = 16 * parallel.allreduce_bytes_per_token_per_layer(LLAMA70) // 2  # 16 tokens, one message
    assert parallel.allreduce_bytes_per_token_per_layer(LLAMA70) == 2 * 8192 * 2
    time = parallel.allreduce_time(message, 8, nvlink)
    assert time == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 1.75 * message / 450e9)
    assert parallel.allreduce_time(message, 8, pcie) == pytest.approx(6.6e-6 + 14 * 1.0e-6 + 1.75 * message / 32e9)
    assert parallel.allreduce_time(message, 8, pcie) > 2 * time and parallel.allreduce_time(message, 1, None) == 0


def test_tensor_parallel_groups_use_nvlink_only_where_it_joins_them():
    assert parallel.tensor_link("h100-pcie", 2).name.startswith("NVLink")
    assert parallel.tensor_link("h100-pcie", 4).name.startswith("PCIe")
    assert parallel.tensor_link("h200", 8) is gpus.get("h200").nvlink and parallel.tensor_link("h200", 1) is None
    assert parallel.tensor_link("l4", 2) is gpus.get("l4").pcie


def test_a_tensor_parallel_step_adds_its_all_reduces_to_a_smaller_roofline():
    shape = parallel.step_shape(LLAMA70, Layout(8), "h200")
    assert shape.collectives == 2 * 80 + 2  # two per layer, the embedding's, the logits' gather
    one = roofline.bound(roofline.decode_step(LLAMA70, 16, 6000), "h200")
    eight = roofline.bound(roofline.decode_step(LLAMA70, 16, 6000, shape=shape), "h200")
    assert eight.memory_time < one.memory_time / 7 and eight.communication_time > 0
    assert eight.time == max(eight.compute_time, eight.memory_time) + eight.communication_time
    brute = sum(roofline.bound(roofline.decode_step(LLAMA70, 16, 6000 + j, shape=shape), "h200").time
                for j in range(20))
    assert roofline.decode_time(LLAMA70, "h200", 16, 6000, 20, shape=shape) == pytest.approx(brute, rel=1e-12)


def test_a_pipeline_runs_its_stages_in_turn_and_idles_without_enough_batches():
    step = parallel.pipeline_step(LLAMA70, Layout(1, 2), "h200", 16, 1, 6000)
    assert len(step.stages) == 2 and step.latency > step.interval > step.latency / 2
    assert parallel.pipeline_idle(4, 1) == 0.75 and parallel.pipeline_idle(4, 4) == 0
    assert parallel.pipeline_bubble(4, 1) == 0.75 and parallel.pipeline_bubble(4, 13) == 3 / 16


# --- the advisor's levers that cost GPUs -----------------------------------------------------------------------


def test_gpu_levers_are_weighed_with_their_cost_in_gpus():
    advice = advisor.advise(B.model, B.gpu, B.workload, levers=advisor.ALL_LEVERS)
    tp2, replica = advice.lever("add a GPU (TP 2)"), advice.lever("a second replica")
    assert tp2.served.gpus == replica.served.gpus == 2 and advice.baseline.gpus == 1
    assert replica.throughput_gain == pytest.approx(2) and replica.per_gpu_gain == pytest.approx(1)
    assert tp2.served.fits > 2 * advice.baseline.fits and tp2.throughput_gain > 2
    assert {"GPUs", "tokens/s per GPU"} <= set(advice.rows()[0]) and list(advice.rows()[0])[-1] == "what it buys"
    assert "GPUs" not in B.advise().rows()[0]  # chapter 08's table is unchanged
    per_gpu = advisor.advise(B.model, B.gpu, replace(B.workload, goal="throughput per GPU"),
                             levers=advisor.ALL_LEVERS)
    assert per_gpu.best.lever == "W8A8"  # one GPU, half the bytes: the most tokens per GPU
    with pytest.raises(ValueError, match="unknown name"):
        advisor.advise(B.model, B.gpu, B.workload, levers=["three GPUs"])
