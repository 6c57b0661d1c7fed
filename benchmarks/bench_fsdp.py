"""FSDP2 step time on 2 gloo ranks (CPU): eager fully_shard per GPT-2 block vs
fully_shard(ORTModule(block)) per block, and how much of the communication backward hides.

    python benchmarks/bench_fsdp.py                      # GPT-2-small, batch 1, sequence 128
    python benchmarks/bench_fsdp.py --steps 5 --sequence 256

Each rank runs forward, backward and an AdamW step per timed step. Every collective FSDP2
issues (all-gather, reduce-scatter) is timed from its issue until its future completes
(`communication`), and the time the training thread blocks waiting on one is summed
(`exposed`); `hidden` is 1 - exposed / communication: the share of communication that ran while
the rank computed. Per-step values are medians over --steps steps after --warmup steps, rank 0's.
The machine this runs on is usually shared: the numbers are labelled with its load.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))

WORLD = 2


class _CommClock:
    """Wraps the collectives FSDP2 calls to time them (see the module docstring)."""

    # torch 2.13's FSDP2 calls the *_single forms; older releases the *_tensor ones.
    NAMES = (
        "all_gather_single",
        "reduce_scatter_single",
        "all_gather_into_tensor",
        "reduce_scatter_tensor",
        "all_reduce",
    )

    def __init__(self) -> None:
        self.communication = 0.0
        self.exposed = 0.0
        self._originals: dict[str, Any] = {}

    def __enter__(self) -> _CommClock:  # noqa: PYI034 - not subclassed
        clock = self
        for name in self.NAMES:
            original = getattr(dist, name, None)
            if original is None:
                continue
            self._originals[name] = original

            def timed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                start = time.perf_counter()
                work = _original(*args, **kwargs)
                if work is None:  # synchronous: all of it exposed
                    spent = time.perf_counter() - start
                    clock.communication += spent
                    clock.exposed += spent
                    return None

                def done(_: Any) -> None:
                    clock.communication += time.perf_counter() - start

                work.get_future().then(done)
                return _Timed(work, clock)

            setattr(dist, name, timed)
        return self

    def __exit__(self, *_: object) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)

    def reset(self) -> None:
        self.communication = self.exposed = 0.0


class _Timed(dist.Work):
    """The collective's Work, timing the waits on it (FSDP2 waits only on dist.Work objects)."""

    def __init__(self, work: dist.Work, clock: _CommClock) -> None:
        super().__init__()
        self._work, self._clock = work, clock

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        start = time.perf_counter()
        result = self._work.wait(*args, **kwargs)
        self._clock.exposed += time.perf_counter() - start
        return result

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self) -> Any:
        return self._work.get_future()


def _shard(model: torch.nn.Module, ort: bool) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    from ortmodule import ORTModule

    blocks = model.transformer.h
    for i, block in enumerate(blocks):
        blocks[i] = fully_shard(ORTModule(block) if ort else block)
    return fully_shard(model)


def _worker(rank: int, port: int, args: argparse.Namespace, results: dict) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    import _models

    try:
        report = {}
        for runner in args.runners:
            model = _shard(_models._gpt2_small(), runner == "ortmodule")
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            ids = torch.randint(
                0, 50257, (args.batch, args.sequence), generator=torch.Generator().manual_seed(rank)
            )
            steps, exposed, communication = [], [], []
            with _CommClock() as clock:
                for step in range(args.warmup + args.steps):
                    clock.reset()
                    start = time.perf_counter()
                    loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    dist.barrier()
                    if step >= args.warmup:
                        steps.append(time.perf_counter() - start)
                        exposed.append(clock.exposed)
                        communication.append(clock.communication)
            report[runner] = {
                "step": statistics.median(steps),
                "communication": statistics.median(communication),
                "exposed": statistics.median(exposed),
            }
            del model, optimizer
        results[rank] = report
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--runners", nargs="+", default=["eager", "ortmodule"])
    args = parser.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    load = os.getloadavg()[0]
    with mp.get_context("spawn").Manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _worker, args=(port, args, results), nprocs=WORLD, join=True, start_method="spawn"
        )
        report = dict(results)[0]
    print(
        f"GPT-2-small, FSDP2 per block on {WORLD} gloo ranks, batch {args.batch}, sequence "
        f"{args.sequence}, {args.threads} thread(s) per rank, median of {args.steps} steps "
        f"(rank 0); machine load average {load:.1f} on {os.cpu_count()} cores (shared: "
        "numbers are indicative)"
    )
    print(f"{'runner':10} {'step s':>8} {'comm s':>8} {'exposed s':>10} {'hidden':>7}")
    for runner, r in report.items():
        hidden = 1 - r["exposed"] / r["communication"] if r["communication"] else 0.0
        print(
            f"{runner:10} {r['step']:8.2f} {r['communication']:8.2f} {r['exposed']:10.2f} "
            f"{hidden:7.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
