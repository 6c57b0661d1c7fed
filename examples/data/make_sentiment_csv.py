"""Writes sentiment.csv: short product reviews built from templates, labelled 1 (positive) or
0 (negative). Deterministic; rerun to regenerate the checked-in file."""

from __future__ import annotations

import csv
import itertools
import random
from pathlib import Path

SUBJECTS = ["the phone", "this blender", "the hotel room", "our new sofa", "the movie",
            "this laptop", "the coffee", "the service", "the book", "this jacket"]
POSITIVE = ["is wonderful", "works great", "was a delight", "exceeded my hopes", "feels solid",
            "is excellent value", "made me happy", "is really good"]
NEGATIVE = ["is terrible", "broke quickly", "was a letdown", "wasted my money", "feels flimsy",
            "is awful value", "made me angry", "is really bad"]
ENDINGS = ["", " and i would buy it again", " overall", " to be honest", " in every way"]


def sentences(seed: int = 0, count: int = 320) -> list[tuple[str, int]]:
    rows = [(f"{s} {p}{e}", 1) for s, p, e in itertools.product(SUBJECTS, POSITIVE, ENDINGS)]
    rows += [(f"{s} {n}{e}", 0) for s, n, e in itertools.product(SUBJECTS, NEGATIVE, ENDINGS)
             if "buy it again" not in e]
    random.Random(seed).shuffle(rows)
    return rows[:count]


def main() -> None:
    path = Path(__file__).with_name("sentiment.csv")
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(sentences())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
