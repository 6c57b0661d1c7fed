"""Train a small GPT-2 (character level) on text that ships with scikit-learn, with ORTModule
and with eager PyTorch side by side.

The text is scikit-learn's dataset descriptions (``sklearn/datasets/descr/*.rst``, about
80 KB of English), so nothing is downloaded. Both runs start from the same weights and see the
same batches. The script prints, for each, the loss at the end, the first step's time (for
ORTModule it includes the capture through torch.export and the graph build) and tokens per
second over the other steps.

    python examples/finetune_tiny_gpt2.py --steps 60 --threads 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import sklearn.datasets
import torch
import transformers
from tqdm import tqdm

from ortmodule import ORTModule

SEED = 0


def load_text() -> str:
    folder = Path(sklearn.datasets.__file__).parent / "descr"
    return "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.rst")))


def make_model(vocab: int, args: argparse.Namespace) -> torch.nn.Module:
    config = transformers.GPT2Config(
        vocab_size=vocab, n_positions=args.block, n_embd=args.embd, n_layer=args.layers,
        n_head=4, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, use_cache=False,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(SEED)
    return transformers.GPT2LMHeadModel(config)


def batches(data: torch.Tensor, args: argparse.Namespace) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(SEED)
    starts = torch.randint(0, len(data) - args.block, (args.steps, args.batch), generator=gen)
    return [torch.stack([data[s:s + args.block] for s in row.tolist()]) for row in starts]


def train(model: torch.nn.Module, data: list[torch.Tensor], name: str, lr: float
          ) -> tuple[float, float, float]:
    """Returns (final loss, first-step seconds, tokens per second over the other steps)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    torch.manual_seed(SEED)
    first, steady, losses = 0.0, 0.0, []
    with tqdm(data, desc=name, unit="step") as bar:
        for step, ids in enumerate(bar):
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            elapsed = time.perf_counter() - start
            if step == 0:
                first = elapsed
            else:
                steady += elapsed
            losses.append(loss.detach().item())
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    tokens = sum(ids.numel() for ids in data[1:])
    final = sum(losses[-5:]) / len(losses[-5:])
    return final, first, tokens / steady if steady else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--embd", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()

    text = load_text()
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    print(f"text: {len(text)} characters, vocabulary {len(vocab)}; GPT-2 with {args.layers} "
          f"layers, width {args.embd}, context {args.block}, batch {args.batch}")
    plan = batches(data, args)

    results = {}
    for name in ("ortmodule", "eager"):
        model = make_model(len(vocab), args)
        if name == "ortmodule":
            model = ORTModule(model)
        results[name] = train(model, plan, name, args.lr)

    print(f"\n{'runner':<10} {'final loss':>10} {'first step (s)':>15} {'tokens/s':>10} "
          f"{'vs eager':>9}")
    eager_rate = results["eager"][2]
    for name, (loss, first, rate) in results.items():
        print(f"{name:<10} {loss:>10.3f} {first:>15.3f} {rate:>10.0f} {rate / eager_rate:>8.2f}x")
    start_loss = float(torch.log(torch.tensor(float(len(vocab)))))
    if results["ortmodule"][0] > 0.8 * start_loss:
        raise SystemExit(f"ORTModule's loss {results['ortmodule'][0]:.3f} did not fall from "
                         f"the uniform-guess loss {start_loss:.3f}")


if __name__ == "__main__":
    main()
