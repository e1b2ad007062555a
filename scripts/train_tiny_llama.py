"""Train the book's tiny Llama on the Python documentation that ships with CPython.

The model behind chapter 06's perplexity table: Hugging Face's ``LlamaForCausalLM``
with a small config (4 layers, d_model 256, 4 query heads sharing 2 key/value
heads), so the code that loads it also loads a pretrained Llama from the Hub.

The text is ``pydoc_data.topics`` (the help() pages of the language reference,
on every CPython install, no download).  Whole topics are held out for
perplexity; any paragraph that also appears in a held-out topic is removed from
training, so the held-out text is genuinely unseen.  A byte-level BPE tokenizer
is trained with the ``tokenizers`` library on the training split only.

Everything is seeded and runs on one CPU thread (the machine is shared), so the
same command writes the same weights::

    python scripts/train_tiny_llama.py --out companion/servebook/data/tiny-llama

Writes config.json, model.safetensors (FP16), tokenizer files, heldout.txt,
calibration.txt and training.json (the settings, the losses and the time taken).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

SEED = 0
VOCAB_SIZE = 2048
EOS = "<|endoftext|>"
HELD_OUT_EVERY = 10          # a topic is held out when sha256(name) % 10 == 0 (about 10% of the text)
CALIBRATION_CHARS = 60_000   # a slice of the training text shipped for GPTQ/AWQ calibration

MODEL = dict(
    vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    rms_norm_eps=1e-5, rope_theta=10_000.0, tie_word_embeddings=True,
)


def held_out(topic: str) -> bool:
    return int(hashlib.sha256(topic.encode()).hexdigest(), 16) % HELD_OUT_EVERY == 0


def build_corpus() -> tuple[list[str], list[str], list[str]]:
    """(training documents, held-out documents, held-out topic names), deduplicated by paragraph."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    held_names = [name for name in names if held_out(name)]
    held_paragraphs = {p for name in held_names for p in topics[name].split("\n\n")}
    seen: set[str] = set()
    train_docs = []
    for name in names:
        if name in held_names:
            continue
        # Many help pages repeat each other's paragraphs: keep one copy, and none that a held-out page has.
        kept = [p for p in topics[name].split("\n\n") if p not in held_paragraphs and p not in seen]
        seen.update(kept)
        if kept:
            train_docs.append("\n\n".join(kept))
    held_docs = [topics[name] for name in held_names]
    return train_docs, held_docs, held_names


def train_tokenizer(train_docs: list[str], out: Path):
    """A byte-level BPE of VOCAB_SIZE tokens, saved so ``AutoTokenizer.from_pretrained(out)`` loads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_docs, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS,
                                   pad_token=EOS, model_max_length=1 << 30)
    fast.save_pretrained(out)
    return fast


def encode(tokenizer, docs: list[str]) -> torch.Tensor:
    """One long stream of token ids, documents separated by the end-of-text token."""
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


@torch.no_grad()
def mean_loss(model, ids: torch.Tensor, seq_len: int) -> float:
    """Mean next-token cross-entropy over non-overlapping windows of ``ids``."""
    n = (len(ids) - 1) // seq_len
    x = ids[: n * seq_len].view(n, seq_len)
    y = ids[1: n * seq_len + 1].view(n, seq_len)
    total = 0.0
    for i in range(0, n, 16):
        logits = model(input_ids=x[i:i + 16]).logits
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), y[i:i + 16].flatten(),
                                                   reduction="sum").item()
    return total / (n * seq_len)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("companion/servebook/data/tiny-llama"))
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)

    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)  # the machine is shared; one thread is also what makes runs repeatable
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    started, cpu_started = time.perf_counter(), time.process_time()

    train_docs, held_docs, held_names = build_corpus()
    tokenizer = train_tokenizer(train_docs, args.out)
    train_ids = encode(tokenizer, train_docs)
    held_ids = encode(tokenizer, held_docs)
    print(f"train {len(train_ids):,} tokens, held out {len(held_ids):,} tokens ({', '.join(held_names)})")

    model = LlamaForCausalLM(LlamaConfig(**MODEL, bos_token_id=tokenizer.eos_token_id,
                                         eos_token_id=tokenizer.eos_token_id))
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(args.seed)
    history = []
    warmup = max(1, args.steps // 20)
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup)
        starts = torch.randint(0, len(train_ids) - args.seq_len - 1, (args.batch,), generator=generator)
        window = torch.stack([train_ids[s: s + args.seq_len + 1] for s in starts.tolist()])
        logits = model(input_ids=window[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            model.eval()
            held = mean_loss(model, held_ids, args.seq_len)
            model.train()
            history.append({"step": step + 1, "train_loss": round(loss.item(), 4), "heldout_loss": round(held, 4),
                            "seconds": round(time.perf_counter() - started, 1)})
            print(history[-1], flush=True)

    model.eval()
    model.half().save_pretrained(args.out, safe_serialization=True)
    # Measure the held-out perplexity of what was saved (FP16 weights), not of the FP32 training copy.
    saved = LlamaForCausalLM(model.config).float()
    saved.load_state_dict(load_file(args.out / "model.safetensors"), strict=False)
    saved.tie_weights()
    saved.eval()
    final = mean_loss(saved, held_ids, args.seq_len)

    (args.out / "heldout.txt").write_text(f"\n{EOS}\n".join(held_docs))
    calibration = "\n\n".join(train_docs)
    start = len(calibration) // 2  # from the middle: not the first topics alphabetically
    (args.out / "calibration.txt").write_text(calibration[start: start + CALIBRATION_CHARS])
    corpus_hash = hashlib.sha256("\x00".join(train_docs + held_docs).encode()).hexdigest()
    metadata = {
        "script": "scripts/train_tiny_llama.py",
        "seed": args.seed, "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len,
        "peak_lr": args.lr, "weight_decay": args.weight_decay, "warmup_steps": warmup,
        "optimizer": "AdamW(betas=(0.9, 0.95)), cosine decay to 0.1x, grad clip 1.0",
        "threads": 1, "stored_dtype": "float16",
        "n_params": sum(p.numel() for p in model.parameters()),
        "corpus": "pydoc_data.topics (CPython documentation), paragraphs deduplicated",
        "corpus_sha256": corpus_hash, "heldout_topics": held_names,
        "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
        "heldout_loss_saved": round(final, 4), "heldout_ppl_saved": round(math.exp(final), 3),
        "history": history,
        "train_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu_started, 1),
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": __import__("transformers").__version__, "tokenizers": __import__("tokenizers").__version__,
        "machine": platform.machine(), "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
    }
    (args.out / "training.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"held-out perplexity of the saved FP16 weights: {math.exp(final):.3f}; "
          f"{metadata['train_seconds']:.0f} s")


if __name__ == "__main__":
    main()
