"""Rotary position embedding by halves (transformers' apply_rotary_pos_emb: q * cos +
rotate_half(q) * sin, the embedding of Llama, Mistral, Qwen, Gemma and GPT-NeoX) runs as one
ai.ortmodule FusedRotary forward and one backward per rotated tensor, with eager PyTorch's
results; chains that differ stay as written. The op's own kernels are checked by the op
table's samples (tests/python/op_samples.py, op_samples_large.py)."""

from __future__ import annotations

import collections
import copy

import onnx
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ortmodule import DebugOptions, ORTModule
from tests.python.hf_zoo import FAMILIES


def _ops(model: ORTModule) -> collections.Counter:
    entry = next(iter(model._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node)


def _cos_sin(batch: int, seq: int, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Llama's tables: cat(freqs, freqs) of position * inverse frequency, [batch, seq, dim]."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1).expand(batch, seq, dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(torch.nn.Module):
    """Llama's query and key path: projections, heads, the rotary embedding (of the first
    `rotary` dims of each head, the rest passed through as GPT-NeoX's partial rotary does)."""

    def __init__(self, hidden: int = 32, heads: int = 4, rotary: int | None = None,
                 rotate=apply_rotary_pos_emb) -> None:
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.rotary = rotary or self.dim
        self.q = torch.nn.Linear(hidden, hidden)
        self.k = torch.nn.Linear(hidden, hidden)
        self.rotate = rotate

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        q = self.q(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        r = self.rotary
        if r == self.dim:
            q, k = self.rotate(q, k, cos, sin)
        else:
            q_rot, k_rot = self.rotate(q[..., :r], k[..., :r], cos, sin)
            q = torch.cat((q_rot, q[..., r:]), dim=-1)
            k = torch.cat((k_rot, k[..., r:]), dim=-1)
        return (q @ k.transpose(-1, -2)).tanh().sum()


def _run(model: torch.nn.Module, *inputs: torch.Tensor,
         optimize: bool = True) -> tuple[torch.Tensor, list[torch.Tensor], collections.Counter]:
    """Loss and the gradients of every parameter and input that requires one."""
    wrapped = ORTModule(copy.deepcopy(model), DebugOptions(graph_optimizations=optimize))
    feeds = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    loss = wrapped(*feeds)
    loss.backward()
    grads = [p.grad for p in wrapped.module.parameters()] + [t.grad for t in feeds
                                                             if t.requires_grad]
    return loss.detach(), grads, _ops(wrapped)


def _eager(model: torch.nn.Module, *inputs: torch.Tensor) -> tuple[torch.Tensor, list]:
    model = copy.deepcopy(model)
    feeds = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    loss = model(*feeds)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()] + [t.grad for t in feeds
                                                                  if t.requires_grad]


def _inputs(dtype: torch.dtype, rotary: int = 8, grad_tables: bool = False):
    torch.manual_seed(0)
    h = torch.randn(2, 5, 32, dtype=dtype)
    cos, sin = _cos_sin(2, 5, rotary, dtype)
    return h, cos.requires_grad_(grad_tables), sin.requires_grad_(grad_tables)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_llama_embedding_fuses_and_matches_eager(dtype: torch.dtype) -> None:
    """q and k each rotate in one FusedRotary forward and one backward (mode 1), no slice,
    negation or concatenation left; the loss and gradients are eager's (float64 to rounding,
    float32 within the products' rounding)."""
    model = Attention().to(dtype)
    inputs = _inputs(dtype)
    loss, grads, ops = _run(model, *inputs)
    assert ops["FusedRotary"] == 4, ops
    assert ops["Neg"] == 0 and ops["Concat"] == 0 and ops["SliceGrad"] == 0, ops
    want_loss, want_grads = _eager(model, *inputs)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5,
                                                                           "atol": 1e-5}
    torch.testing.assert_close(loss, want_loss, **tol)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, **tol)


def test_tables_that_need_gradients() -> None:
    """cos and sin that require gradients (tables learned or computed from parameters) get
    eager's gradients, summed over the heads they broadcast to (float64)."""
    model = Attention().double()
    inputs = _inputs(torch.float64, grad_tables=True)
    loss, grads, ops = _run(model, *inputs)
    assert ops["FusedRotary"] >= 4, ops
    want_loss, want_grads = _eager(model, *inputs)
    torch.testing.assert_close(loss, want_loss, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_partial_rotary_fuses() -> None:
    """GPT-NeoX's partial rotary (the first half of each head rotated, the rest passed
    through): the rotated slice fuses; results are eager's and the unoptimized graph's."""
    model = Attention(rotary=4).double()
    inputs = _inputs(torch.float64, rotary=4)
    loss, grads, ops = _run(model, *inputs)
    assert ops["FusedRotary"] == 4, ops
    plain_loss, plain_grads, plain_ops = _run(model, *inputs, optimize=False)
    assert plain_ops["FusedRotary"] == 0
    want_loss, want_grads = _eager(model, *inputs)
    for reference in ((plain_loss, plain_grads), (want_loss, want_grads)):
        torch.testing.assert_close(loss, reference[0], rtol=1e-12, atol=1e-12)
        for got, want in zip(grads, reference[1], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _rotate_other_sign(q, k, cos, sin):
    """cat(x1, -x2): another rotation, not rotate_half."""
    def rot(x):
        half = x.shape[-1] // 2
        return torch.cat((x[..., :half], -x[..., half:]), dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def _rotate_uneven(q, k, cos, sin):
    """Halves of different splits (x[..., 3:] with x[..., :5]): not a rotation of x."""
    def rot(x):
        return torch.cat((-x[..., 3:], x[..., :5]), dim=-1)[..., : x.shape[-1]]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def _rotate_kept_half(q, k, cos, sin):
    """rotate_half whose rotated tensor is also returned through the loss (read twice)."""
    def rot(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rq = rot(q)
    return q * cos + rq * sin + 0 * rq.tanh(), k * cos + rot(k) * sin


@pytest.mark.parametrize("rotate,fused", [(_rotate_other_sign, 0), (_rotate_uneven, 0),
                                          (_rotate_kept_half, 2)])
def test_other_chains_stay_as_written(rotate, fused: int) -> None:
    """A different rotation stays unfused; a rotation whose rotated half is read elsewhere
    leaves that one chain (k's still fuses, forward and backward); results are eager's."""
    model = Attention(rotate=rotate).double()
    inputs = _inputs(torch.float64)
    loss, grads, ops = _run(model, *inputs)
    assert ops["FusedRotary"] == fused, ops
    want_loss, want_grads = _eager(model, *inputs)
    torch.testing.assert_close(loss, want_loss, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_rotation_along_an_inner_axis() -> None:
    """The halves of axis -2 (x [batch, dim, seq]): fused with the strided kernel; eager's
    results."""
    class Inner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 6, dtype=torch.float64))

        def forward(self, x, cos, sin):
            y = x * self.w
            rot = torch.cat((-y[:, 4:, :], y[:, :4, :]), dim=1)
            return (y * cos + rot * sin).sin().sum()

    torch.manual_seed(0)
    x = torch.randn(3, 8, 6, dtype=torch.float64)
    cos, sin = torch.randn(8, 6, dtype=torch.float64), torch.randn(3, 8, 1, dtype=torch.float64)
    model = Inner()
    loss, grads, ops = _run(model, x, cos, sin)
    assert ops["FusedRotary"] == 2, ops
    want_loss, want_grads = _eager(model, x, cos, sin)
    torch.testing.assert_close(loss, want_loss, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_llama_model_fuses_in_every_layer() -> None:
    """The Hugging Face Llama model: q and k of every layer rotate fused, and every MLP's
    silu(gate) * up is one SiluMul (test_silu_mul_fusion.py); loss and gradients are those of
    the unoptimized graph in float64."""
    family = FAMILIES["llama"]
    torch.manual_seed(0)
    eager = family.build(0.0).double().train()
    batch = family.batch(2, 6, 0)
    layers = eager.config.num_hidden_layers
    results = {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        loss = ort(**batch).loss
        loss.backward()
        if optimize:
            ops = _ops(ort)
            assert ops["FusedRotary"] == 4 * layers, ops  # q and k, forward and backward
            assert ops["Neg"] == 0, ops
            assert ops["SiluMul"] == layers and ops["SiluMulGrad"] == layers, ops
            assert ops["Sigmoid"] == 0, ops
        results[optimize] = (loss.detach(), {n: p.grad for n, p in ort.module.named_parameters()})
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-12, atol=1e-12)
    for n, g in results[False][1].items():
        torch.testing.assert_close(results[True][1][n], g, rtol=1e-10, atol=1e-12, msg=n)
