"""What the engine's graph optimizations win on a transformer training step: eager PyTorch,
ORTModule with graph optimizations and ORTModule without them, timed side by side in one
process (rounds alternate between the runners, so machine noise hits all three alike), plus
the engine's per-op time of both ORTModule variants.

    python benchmarks/bench_graph_optimizations.py --model bert --rounds 5 --steps 4
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout
from ortmodule import _C, DebugOptions, ORTModule

BATCH, SEQ, VOCAB = 8, 128, 1000


def make_model(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """BERT-small / GPT-2-small: 4 layers, hidden 256, 4 heads, no dropout."""
    transformers.logging.set_verbosity_error()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    if name == "bert":
        config = transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=1024, max_position_embeddings=256, num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            attn_implementation="eager")
        batch = {"input_ids": ids, "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
                     "labels": torch.randint(0, 3, (BATCH,))}
        return transformers.BertForSequenceClassification(config).train(), batch
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=4, n_positions=256, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    return transformers.GPT2LMHeadModel(config).train(), {"input_ids": ids, "labels": ids.clone()}


def make_step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def engine_profile(step: Callable[[], None], steps: int) -> list[tuple[str, float, float]]:
    """(op, calls per step, ms per step), largest first."""
    _C.set_profiling(True)
    _C.profile_snapshot(reset=True)
    for _ in range(steps):
        step()
    _C.set_profiling(False)
    rows = sorted(_C.profile_snapshot(reset=True).items(), key=lambda kv: -kv[1][1])
    return [(op, calls / steps, seconds / steps * 1e3) for op, (calls, seconds) in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="bert", choices=["bert", "gpt2"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per runner per round")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, batch = make_model(args.model)
    runners = {
        "eager": make_step(copy.deepcopy(model), batch),
        "ortmodule": make_step(ORTModule(copy.deepcopy(model)), batch),
        "ortmodule, no graph optimizations": make_step(
            ORTModule(copy.deepcopy(model),
                      debug_options=DebugOptions(graph_optimizations=False)), batch),
    }
    for step in runners.values():  # export, build, warm the caches
        step()
        step()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, step in runners.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    eager = statistics.median(times["eager"])
    fastest_eager = min(times["eager"])
    print(f"{args.model}: batch {BATCH}, sequence {SEQ}, {torch.get_num_threads()} threads, "
          f"{args.rounds} rounds of {args.steps} steps (median; fastest round, which a busy "
          f"machine disturbs least)")
    for name, samples in times.items():
        ms, fastest = statistics.median(samples), min(samples)
        print(f"  {name:36s} {ms:8.1f} ms/step  eager/this {eager / ms:5.2f}   "
              f"fastest {fastest:8.1f} ms/step  eager/this {fastest_eager / fastest:5.2f}")
    for name in ("ortmodule", "ortmodule, no graph optimizations"):
        print(f"\nengine ops per step, {name}:")
        for op, calls, ms in engine_profile(runners[name], args.steps)[:12]:
            print(f"  {op:28s} {calls:6.1f} calls {ms:8.2f} ms")


if __name__ == "__main__":
    main()
