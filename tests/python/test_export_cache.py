"""The persistent export cache (DebugOptions(cache_dir=...), ORTMODULE_CACHE_DIR): a second
ORTModule (or process) with the same module code, structure and call loads the stored graph
instead of capturing again and computes what eager computes; anything that changes the graph
(the module's source, a parameter's shape, the torch version, an attribute forward reads)
misses or rejects the entry; a truncated or corrupted entry is rebuilt, never used."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from ortmodule import DebugOptions, LogLevel, ORTModule, export_cache

ATOL, RTOL = 1e-5, 1e-5  # one engine forward/backward against eager, float32

Out = namedtuple("Out", ["y", "aux"])


class Net(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, width)
        self.norm = torch.nn.BatchNorm1d(width)
        self.fc2 = torch.nn.Linear(width, 3)
        self.scale = 2.0

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> Out:
        h = torch.relu(self.norm(self.fc1(x))) * self.scale
        return Out(self.fc2(h) + bias, h.mean())


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, 4, generator=g), torch.randn(3, generator=g)


def _pair(width: int = 8, **attrs: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager = Net(width)
    for k, v in attrs.items():
        setattr(eager, k, v)
    model = Net(width)
    model.load_state_dict(eager.state_dict())
    for k, v in attrs.items():
        setattr(model, k, v)
    return eager, model


def _check_step(eager: torch.nn.Module, wrapped: ORTModule) -> None:
    """One train-mode forward and backward, outputs, gradients and BatchNorm statistics
    compared with eager."""
    x, bias = _inputs()
    want, got = eager(x, bias), wrapped(x, bias)
    assert isinstance(got, Out)
    torch.testing.assert_close(got.y, want.y, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got.aux, want.aux, atol=ATOL, rtol=RTOL)
    want.y.sum().backward()
    got.y.sum().backward()
    for (name, p), q in zip(eager.named_parameters(), wrapped.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=ATOL, rtol=RTOL, msg=name)
    for (name, b), c in zip(eager.named_buffers(), wrapped.buffers()):
        torch.testing.assert_close(c, b, atol=ATOL, rtol=RTOL, msg=name)


@pytest.fixture(autouse=True)
def _fresh_stats() -> None:
    export_cache.reset_stats()


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + export_cache.SUFFIX))


def test_second_module_loads_the_stored_graph(tmp_path: Path) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path))
    eager, model = _pair()
    _check_step(eager, ORTModule(model, opts))
    assert export_cache.stats()["stores"] == 1
    assert export_cache.stats()["hits"] == 0
    assert len(_entries(tmp_path)) == 1
    eager, model = _pair()
    wrapped = ORTModule(model, opts)
    _check_step(eager, wrapped)
    stats = export_cache.stats()
    assert (stats["hits"], stats["stores"], stats["rejected"]) == (1, 1, 0)
    entry = next(e for v in wrapped._cache.values() for e in v)
    assert "cache_load" in entry.seconds and "trace" not in entry.seconds


def test_environment_variable_sets_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORTMODULE_CACHE_DIR", str(tmp_path / "made"))
    assert DebugOptions.from_env().cache_dir == str(tmp_path / "made")
    eager, model = _pair()
    _check_step(eager, ORTModule(model))
    assert len(_entries(tmp_path / "made")) == 1
    monkeypatch.setenv("ORTMODULE_CACHE_DIR", "")
    assert DebugOptions.from_env(DebugOptions(cache_dir=str(tmp_path))).cache_dir is None


def test_cache_dir_is_validated(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        DebugOptions(cache_dir=str(tmp_path / "file"))
    with pytest.raises(TypeError, match="cache_dir"):
        DebugOptions(cache_dir=3)  # type: ignore[arg-type]


def test_truncated_or_corrupted_entry_is_rebuilt(tmp_path: Path) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path))
    eager, model = _pair()
    _check_step(eager, ORTModule(model, opts))
    (entry,) = _entries(tmp_path)
    data = entry.read_bytes()
    for broken in (
        data[: len(data) // 2],
        data[:10],
        data[:-5] + bytes(b ^ 0xFF for b in data[-5:]),
    ):
        entry.write_bytes(broken)
        export_cache.reset_stats()
        eager, model = _pair()
        _check_step(eager, ORTModule(model, opts))
        stats = export_cache.stats()
        assert (stats["rejected"], stats["hits"], stats["stores"]) == (1, 0, 1), stats
        assert entry.read_bytes() == data  # rebuilt: the same capture again
    eager, model = _pair()
    _check_step(eager, ORTModule(model, opts))
    assert export_cache.stats()["hits"] == 1


def test_unwritable_directory_warns_and_trains(tmp_path: Path, caplog) -> None:
    # A file where the cache directory's parent should be: no process can create it.
    (tmp_path / "file").write_text("")
    eager, model = _pair()
    with caplog.at_level("WARNING", logger="ortmodule"):
        _check_step(eager, ORTModule(model, DebugOptions(cache_dir=str(tmp_path / "file" / "c"))))
    assert "could not write an entry" in caplog.text
    assert export_cache.stats()["stores"] == 0


def test_torch_version_changes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path))
    eager, model = _pair()
    _check_step(eager, ORTModule(model, opts))
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    eager, model = _pair()
    _check_step(eager, ORTModule(model, opts))
    stats = export_cache.stats()
    assert (stats["hits"], stats["misses"], stats["stores"]) == (0, 2, 2)
    assert len(_entries(tmp_path)) == 2


def test_parameter_shape_changes_the_key(tmp_path: Path) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path))
    eager, model = _pair(8)
    _check_step(eager, ORTModule(model, opts))
    eager, model = _pair(6)
    _check_step(eager, ORTModule(model, opts))
    assert export_cache.stats()["hits"] == 0
    assert len(_entries(tmp_path)) == 2


def test_mode_and_input_dtype_change_the_key(tmp_path: Path) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path))
    eager, model = _pair()
    _check_step(eager, ORTModule(model, opts))
    eager, model = _pair()
    eager.eval()
    model.eval()
    wrapped = ORTModule(model, opts)
    x, bias = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x, bias).y, eager(x, bias).y, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(
            wrapped(x.double().float(), bias.double()).y,
            eager(x, bias.double()).y,
            atol=ATOL,
            rtol=RTOL,
        )
    assert export_cache.stats()["hits"] == 0
    assert len(_entries(tmp_path)) == 3


def test_changed_attribute_value_rejects_the_entry(tmp_path: Path) -> None:
    """forward reads self.scale: the graph bakes it in. The key does not hold it (it is known
    only once traced); the entry records it and a module with another value rebuilds."""
    opts = DebugOptions(cache_dir=str(tmp_path))
    eager, model = _pair(scale=2.0)
    _check_step(eager, ORTModule(model, opts))
    eager, model = _pair(scale=3.0)
    _check_step(eager, ORTModule(model, opts))
    stats = export_cache.stats()
    assert (stats["hits"], stats["rejected"], stats["stores"]) == (0, 1, 2), stats
    eager, model = _pair(scale=3.0)
    _check_step(eager, ORTModule(model, opts))
    assert export_cache.stats()["hits"] == 1


class Settings:
    mode: str | None = None

    def __init__(self) -> None:
        self.mode = None


class FillsItsMode(torch.nn.Module):
    """Sets on its first call a setting it reads (as a Hugging Face model fills
    config.problem_type)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.config = Settings()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.config.mode is None:
            self.config.mode = "tanh"
        return torch.tanh(self.fc(x)) if self.config.mode == "tanh" else self.fc(x)


def _fills_pair(mode: str | None = None) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model, eager = FillsItsMode(), FillsItsMode()
    eager.load_state_dict(model.state_dict())
    model.config.mode = eager.config.mode = mode
    return model, eager


def test_setting_forward_fills_is_filled_on_a_hit(tmp_path: Path) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path))
    x = torch.randn(3, 4)
    for _ in range(2):
        model, eager = _fills_pair()
        wrapped = ORTModule(model, opts)
        torch.testing.assert_close(wrapped(x), eager(x), atol=ATOL, rtol=RTOL)
        assert model.config.mode == eager.config.mode == "tanh"
        torch.testing.assert_close(wrapped(x), eager(x), atol=ATOL, rtol=RTOL)
    stats = export_cache.stats()
    assert (stats["stores"], stats["hits"], stats["rejected"]) == (1, 1, 0), stats
    # A setting that already holds another value than forward read does not hit.
    model, eager = _fills_pair("linear")
    torch.testing.assert_close(ORTModule(model, opts)(x), eager(x), atol=ATOL, rtol=RTOL)
    assert export_cache.stats()["hits"] == 1
    assert export_cache.stats()["rejected"] == 1


SOURCE = """
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return {body}
"""


def _load_block(path: Path, body: str) -> type:
    path.write_text(SOURCE.format(body=body))
    spec = importlib.util.spec_from_file_location("cached_block", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cached_block"] = module
    spec.loader.exec_module(module)
    return module.Block


@pytest.mark.parametrize("second", ["torch.tanh(self.fc(x))", "torch.relu(self.fc(x)) * 2"])
def test_edited_module_code_changes_the_key(tmp_path: Path, second: str) -> None:
    opts = DebugOptions(cache_dir=str(tmp_path / "cache"))
    x = torch.randn(3, 4)
    for i, body in enumerate(("torch.relu(self.fc(x))", second)):
        torch.manual_seed(0)
        block = _load_block(tmp_path / f"v{i}.py", body)()
        torch.testing.assert_close(ORTModule(block, opts)(x), block(x), atol=ATOL, rtol=RTOL)
    sys.modules.pop("cached_block", None)
    assert export_cache.stats()["hits"] == 0
    assert len(_entries(tmp_path / "cache")) == 2


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 3

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        return g * 3


class WithFunction(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Scale.apply(self.fc(x))


@pytest.mark.bridging
def test_graph_with_autograd_function_is_not_stored(tmp_path: Path, caplog) -> None:
    torch.manual_seed(0)
    model = WithFunction()
    x = torch.randn(2, 4)
    with caplog.at_level("DEBUG", logger="ortmodule"):
        out = ORTModule(model, DebugOptions(cache_dir=str(tmp_path), log_level=LogLevel.VERBOSE))(x)
    torch.testing.assert_close(out, model(x), atol=ATOL, rtol=RTOL)
    assert export_cache.stats()["uncacheable"] == 1
    assert "Scale" in export_cache.stats()["last_reason"]
    assert "not storing this graph" in caplog.text
    assert _entries(tmp_path) == []


def test_key_names_no_device_index_or_path(tmp_path: Path) -> None:
    model = Net()
    x, bias = _inputs()
    wrapped = ORTModule(model)
    tensors: list[torch.Tensor] = []
    from ortmodule import _schema

    spec = _schema.flatten(((x, bias), {}), tensors)
    _, text = export_cache.key_for(
        DebugOptions(cache_dir=str(tmp_path)),
        model,
        spec,
        tensors,
        wrapped._all_modules,
        wrapped._param_slots,
        False,
    )
    assert str(tmp_path) not in text and str(os.getpid()) not in text
    assert '"device":"cpu"' in text and "cpu:" not in text


SCRIPT = """
import json, sys
import torch
from ortmodule import ORTModule, export_cache

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 16)
        self.fc2 = torch.nn.Linear(16, 2)

    def forward(self, x):
        return {"logits": self.fc2(torch.nn.functional.gelu(self.fc1(x)))}

torch.manual_seed(0)
model = Net()
x = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
want = model(x)["logits"]
want.sum().backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
got = ORTModule(model)(x)["logits"]
got.sum().backward()
ok = torch.allclose(got, want, atol=1e-5, rtol=1e-5) and all(
    torch.allclose(p.grad, g, atol=1e-5, rtol=1e-5) for p, g in zip(model.parameters(), grads))
print(json.dumps({"stats": export_cache.stats(), "ok": ok, "out": got.tolist()}))
"""


def _run_script(path: Path, cache: Path) -> dict:
    env = {**os.environ, "ORTMODULE_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_loads_what_the_first_stored(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    cache = tmp_path / "cache"
    first = _run_script(script, cache)
    assert first["ok"]
    assert (first["stats"]["stores"], first["stats"]["hits"]) == (1, 0)
    second = _run_script(script, cache)
    assert second["ok"]
    assert (second["stats"]["hits"], second["stats"]["misses"], second["stats"]["stores"]) == (
        1,
        0,
        0,
    )
    assert second["out"] == first["out"]


@pytest.mark.slow
def test_processes_writing_at_once_leave_one_valid_entry(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    cache = tmp_path / "cache"
    env = {**os.environ, "ORTMODULE_CACHE_DIR": str(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["ok"]
    assert len(_entries(cache)) == 1
    assert not list(cache.glob(".tmp-*"))
    assert _run_script(script, cache)["stats"]["hits"] == 1
