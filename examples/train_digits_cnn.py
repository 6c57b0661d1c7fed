"""Train a small CNN on scikit-learn's digits with ORTModule and with eager PyTorch.

Both runs start from the same initial weights and see the same batches. The script prints test
accuracy, the time of the first step (for ORTModule it includes export and graph build) and the
throughput of the remaining steps for each, and exits with status 1 if the ORTModule model
reaches less than 95% test accuracy.

    python examples/train_digits_cnn.py --epochs 15 --threads 4
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from digits_cnn import DigitsCNN  # examples/ is on sys.path when run as a script
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from tqdm import tqdm

from ortmodule import ORTModule

SEED = 0
BATCH_SIZE = 64
MIN_ACCURACY = 0.95


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=SEED, stratify=labels
    )
    return x_train, x_test, y_train, y_test


def train(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, name: str
) -> tuple[float, float]:
    """Trains in place; returns (first-step seconds, steps per second over the other steps)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    shuffle = torch.Generator().manual_seed(SEED)
    steps_per_epoch = (len(x) + BATCH_SIZE - 1) // BATCH_SIZE
    first_step_s, steady_s, steps = 0.0, 0.0, 0
    model.train()
    with tqdm(total=epochs * steps_per_epoch, desc=name, unit="step") as bar:
        for _ in range(epochs):
            for idx in torch.randperm(len(x), generator=shuffle).split(BATCH_SIZE):
                start = time.perf_counter()
                loss = loss_fn(model(x[idx]), y[idx])
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                elapsed = time.perf_counter() - start
                if steps == 0:
                    first_step_s = elapsed  # includes export / graph build for ORTModule
                else:
                    steady_s += elapsed
                steps += 1
                bar.update()
                bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
    return first_step_s, (steps - 1) / steady_s if steps > 1 else float("nan")


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    predicted = torch.cat([model(batch).argmax(dim=1) for batch in x.split(256)])
    return (predicted == y).float().mean().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    x_train, x_test, y_train, y_test = load_data()
    print(f"digits: {len(x_train)} train / {len(x_test)} test, {torch.get_num_threads()} threads")

    results = {}
    for name in ("eager", "ortmodule"):
        torch.manual_seed(SEED)  # identical initial weights for both runs
        model: nn.Module = DigitsCNN()
        if name == "ortmodule":
            model = ORTModule(model)
        first_step_s, steps_per_s = train(model, x_train, y_train, args.epochs, name)
        results[name] = (accuracy(model, x_test, y_test), first_step_s, steps_per_s)

    print(f"\n{'runner':<10} {'test acc':>8} {'first step s':>12} {'steps/s':>9}")
    for name, (acc, first_step_s, steps_per_s) in results.items():
        print(f"{name:<10} {acc:>8.4f} {first_step_s:>12.3f} {steps_per_s:>9.1f}")
    speedup = results["ortmodule"][2] / results["eager"][2]
    print(f"ortmodule / eager throughput: {speedup:.2f}x")

    if results["ortmodule"][0] < MIN_ACCURACY:
        print(f"FAIL: ortmodule accuracy below {MIN_ACCURACY}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
