"""A quantized KV cache during generation: each token quantized once, against the whole cache on every read.

Run from the repository root:  python benchmarks/bench_kvcache.py [--tokens 512] [--repeats 5]

One layer's cache of the book's small Llama (2 KV heads of 64 dimensions) grows by one token per
step for ``--tokens`` steps after a 16-token prompt, as in generation.  Each step reads what
attention sees under the scheme:

- ``QuantizedKV.read``: the library's cache, which quantizes each new token once (KIVI's keys
  once per group of 32) and keeps the result;
- the reference, ``fake_quantize_kv`` of the whole cache at every step: what the cache did before,
  the same numbers for every scheme but the INT4 rotation (float rounding; see
  ``kvquant.quantized_cache``), checked before timing.

CPU seconds (``time.process_time``) on one torch thread, the contenders run in turn, ``--repeats``
times; medians with their spread.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from servebook import kvquant
from timing import interleaved, line

PROMPT, HEADS, HEAD_DIM = 16, 2, 64


def steps(n_tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The 16-bit keys and values of the cache after the prompt and after each generated token."""
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(1, HEADS, PROMPT + n_tokens, HEAD_DIM, generator=g)
    values = torch.randn(1, HEADS, PROMPT + n_tokens, HEAD_DIM, generator=g)
    return [(keys[..., :t, :], values[..., :t, :]) for t in range(PROMPT, PROMPT + n_tokens + 1)]


def generate_cached(name: str, caches) -> list:
    kv = kvquant.QuantizedKV(name)
    return [kv.read(k, v) for k, v in caches]


def generate_whole(name: str, caches) -> list:
    return [kvquant.fake_quantize_kv(k, v, name) for k, v in caches]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    caches = steps(args.tokens)
    print(f"{args.tokens} generated tokens after a {PROMPT}-token prompt, {HEADS} KV heads of {HEAD_DIM}; "
          f"CPU seconds on one thread, {args.repeats} rounds")
    for name in ("fp8", "int8_per_token_head", "kivi4"):
        once, whole = generate_cached(name, caches), generate_whole(name, caches)
        # the same keys and values at every step, or the speed means nothing
        assert all(torch.equal(a, b) for pair, ref in zip(once, whole, strict=True)
                   for a, b in zip(pair, ref, strict=True))
        times = interleaved({"each token once": (lambda n=name: n, lambda n: generate_cached(n, caches)),
                             "whole cache every read": (lambda n=name: n, lambda n: generate_whole(n, caches))},
                            args.repeats)
        for contender, values in times.items():
            print(line(f"  {name}, {contender}", values))
        ratio = statistics.median(times["whole cache every read"]) / statistics.median(times["each token once"])
        print(f"  {name}: quantizing each token once is {ratio:.1f}x faster")


if __name__ == "__main__":
    main()
