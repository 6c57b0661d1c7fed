"""The optimizer arithmetic of the on-device training artifacts (csrc/optim, through
ortmodule._C) against plain PyTorch, an independent float64 transcription of the
Hugging Face transformers AdamW step, and transformers' linear warm-up schedule.

adam_mode 0 of AdamWOptimizer is torch.optim.AdamW: weight decay p *= 1 - lr*wd first,
bias corrections on both moments, eps added to sqrt(v_hat). adam_mode 1 is the AdamW that
transformers shipped (transformers.AdamW): bias corrections folded into the step size
lr * sqrt(1 - beta2^t) / (1 - beta1^t), eps added to the uncorrected sqrt(v), and decay
p -= lr*wd*p after the update.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ortmodule import _C

SHAPES = [(5, 3), (7,), (2, 3, 4)]


def _params(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _grads(seed: int, step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1000 * seed + step)
    return [(0.5 * rng.standard_normal(s)).astype(np.float32) for s in SHAPES]


def _run_ours(cfg: dict, lr: float, steps: int, seed: int):
    params = _params(seed)
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    history = []
    for t in range(1, steps + 1):
        for p, g, mi, vi in zip(params, _grads(seed, t), m, v):
            _C._adamw_update(cfg, lr, t, p, g, mi, vi)
        history.append(([p.copy() for p in params], [x.copy() for x in m], [x.copy() for x in v]))
    return history


@pytest.mark.parametrize("weight_decay", [0.0, 0.01, 0.3])
@pytest.mark.parametrize("eps", [1e-8, 1e-6, 1e-2])
def test_adamw_mode0_matches_torch_adamw(weight_decay, eps):
    lr, betas, steps = 1e-2, (0.9, 0.999), 6
    cfg = {
        "alpha": betas[0],
        "beta": betas[1],
        "epsilon": eps,
        "weight_decay": weight_decay,
        "correct_bias": 1,
        "adam_mode": 0,
    }
    ours = _run_ours(cfg, lr, steps, seed=3)
    # The op's attributes are float32: 1 - beta2 of 0.999f is 1.3e-5 away from 1 - 0.999, so
    # torch gets the float32-rounded values the op sees.
    b1, b2, eps32, wd32 = (float(np.float32(x)) for x in (*betas, eps, weight_decay))
    tparams = [torch.nn.Parameter(torch.from_numpy(p)) for p in _params(3)]
    opt = torch.optim.AdamW(
        tparams, lr=lr, betas=(b1, b2), eps=eps32, weight_decay=wd32, foreach=False
    )
    for t in range(1, steps + 1):
        for tp, g in zip(tparams, _grads(3, t)):
            tp.grad = torch.from_numpy(g)
        opt.step()
        ps, ms, vs = ours[t - 1]
        for tp, p, m, v in zip(tparams, ps, ms, vs):
            st = opt.state[tp]
            np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(m, st["exp_avg"].numpy(), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(v, st["exp_avg_sq"].numpy(), rtol=1e-6, atol=1e-9)


def _hf_adamw_float64(params, lr, betas, eps, weight_decay, correct_bias, steps, seed):
    """transformers.AdamW.step, transcribed in float64 numpy."""
    p = [x.astype(np.float64) for x in params]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    b1, b2 = betas
    out = []
    for t in range(1, steps + 1):
        for i, g in enumerate(_grads(seed, t)):
            g = g.astype(np.float64)
            m[i] = m[i] * b1 + (1.0 - b1) * g
            v[i] = v[i] * b2 + (1.0 - b2) * g * g
            denom = np.sqrt(v[i]) + eps
            step_size = lr
            if correct_bias:
                step_size = lr * math.sqrt(1.0 - b2**t) / (1.0 - b1**t)
            p[i] = p[i] - step_size * m[i] / denom
            if weight_decay > 0.0:
                p[i] = p[i] - lr * weight_decay * p[i]
        out.append(([x.copy() for x in p], [x.copy() for x in m], [x.copy() for x in v]))
    return out


@pytest.mark.parametrize(
    "betas,eps,weight_decay,correct_bias",
    [
        ((0.9, 0.999), 1e-6, 0.0, 1),  # what generate_artifacts writes
        ((0.9, 0.999), 1e-6, 0.05, 1),
        ((0.8, 0.95), 1e-3, 0.02, 0),
        ((0.9, 0.999), 1e-1, 0.0, 1),  # a large eps makes the eps placement visible
    ],
)
def test_adamw_mode1_matches_transformers_adamw(betas, eps, weight_decay, correct_bias):
    lr, steps = 1e-2, 6
    cfg = {
        "alpha": betas[0],
        "beta": betas[1],
        "epsilon": eps,
        "weight_decay": weight_decay,
        "correct_bias": correct_bias,
        "adam_mode": 1,
    }
    # The float32 attribute values are what the op sees; the float64 reference gets them too.
    f32 = [float(np.float32(x)) for x in (betas[0], betas[1], eps, weight_decay)]
    ours = _run_ours(cfg, lr, steps, seed=5)
    ref = _hf_adamw_float64(
        _params(5), lr, (f32[0], f32[1]), f32[2], f32[3], correct_bias, steps, seed=5
    )
    for (ps, ms, vs), (rp, rm, rv) in zip(ours, ref):
        for p, m, v, a, b, c in zip(ps, ms, vs, rp, rm, rv):
            np.testing.assert_allclose(p, a, rtol=2e-6, atol=1e-6)
            np.testing.assert_allclose(m, b, rtol=2e-6, atol=1e-7)
            np.testing.assert_allclose(v, c, rtol=2e-6, atol=1e-9)


def test_adamw_modes_differ_where_documented():
    """Mode 1 is not torch.optim.AdamW: with a large eps or weight decay the results part."""
    lr, steps = 1e-2, 3
    for extra in ({"epsilon": 1e-1}, {"weight_decay": 0.5, "epsilon": 1e-8}):
        cfg0 = {"adam_mode": 0, **extra}
        cfg1 = {"adam_mode": 1, **extra}
        p0 = _run_ours(cfg0, lr, steps, seed=9)[-1][0]
        p1 = _run_ours(cfg1, lr, steps, seed=9)[-1][0]
        assert max(float(np.max(np.abs(a - b))) for a, b in zip(p0, p1)) > 1e-4, extra


def test_sgd_matches_torch_sgd():
    lr, steps = 0.05, 4
    ours = _params(7)
    tparams = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in ours]
    opt = torch.optim.SGD(tparams, lr=lr)
    for t in range(1, steps + 1):
        grads = _grads(7, t)
        for p, g in zip(ours, grads):
            _C._sgd_update(lr, p, g)
        for tp, g in zip(tparams, grads):
            tp.grad = torch.from_numpy(g)
        opt.step()
        for p, tp in zip(ours, tparams):
            np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 1e3])
def test_clip_grad_norm_matches_torch(max_norm):
    grads = _grads(11, 1) + [np.random.default_rng(0).standard_normal(70000).astype(np.float32)]
    tparams = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for tp, g in zip(tparams, grads):
        tp.grad = torch.from_numpy(g.copy())
    want_norm = torch.nn.utils.clip_grad_norm_(tparams, max_norm, norm_type=2.0, foreach=False)
    norm = _C._clip_grad_norm(grads, max_norm)
    np.testing.assert_allclose(norm, want_norm.item(), rtol=1e-6)
    for g, tp in zip(grads, tparams):
        np.testing.assert_allclose(g, tp.grad.numpy(), rtol=2e-6, atol=1e-9)
    if max_norm < norm:
        total = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
        assert total == pytest.approx(max_norm, rel=1e-5)


@pytest.mark.parametrize("warmup", [0, 30, 70, 200])
def test_linear_lr_matches_transformers_linear_schedule(warmup):
    from transformers import get_linear_schedule_with_warmup

    total, initial_lr = 100, 0.1
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=initial_lr)
    sched = get_linear_schedule_with_warmup(opt, warmup, total)
    for step in range(100):
        want = opt.param_groups[0]["lr"]
        got = _C._linear_lr(step, warmup, total, initial_lr)
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9), (warmup, step)
        opt.step()
        sched.step()


def test_linear_lr_landmarks():
    assert _C._linear_lr(0, 30, 100, 1.0) == 0.0
    assert _C._linear_lr(30, 30, 100, 1.0) == 1.0
    assert _C._linear_lr(65, 30, 100, 1.0) == pytest.approx(0.5)
    assert _C._linear_lr(100, 30, 100, 1.0) == 0.0
    assert _C._linear_lr(120, 30, 100, 1.0) == 0.0
    assert _C._linear_lr(0, 0, 100, 1.0) == 1.0
    # warm-up longer than the run: still ramping at the end
    assert _C._linear_lr(99, 200, 100, 1.0) == pytest.approx(99 / 200)


def test_errors_name_the_op_and_the_argument():
    p = np.ones(4, np.float32)
    g = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="AdamWOptimizer.*adam_mode.*got 2"):
        _C._adamw_update(
            {"adam_mode": 2}, 0.1, 1, p, g, np.zeros(4, np.float32), np.zeros(4, np.float32)
        )
    with pytest.raises(ValueError, match="AdamWOptimizer.*correct_bias.*adam_mode 0"):
        _C._adamw_update(
            {"adam_mode": 0, "correct_bias": 0},
            0.1,
            1,
            p,
            g,
            np.zeros(4, np.float32),
            np.zeros(4, np.float32),
        )
    with pytest.raises(ValueError, match="AdamWOptimizer.*step must be >= 1.*got 0"):
        _C._adamw_update({}, 0.1, 0, p, g, np.zeros(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="unknown attribute 'betas'"):
        _C._adamw_update(
            {"betas": 0.9}, 0.1, 1, p, g, np.zeros(4, np.float32), np.zeros(4, np.float32)
        )
    with pytest.raises(ValueError, match="second moment has 3 elements, expected 4"):
        _C._adamw_update({}, 0.1, 1, p, g, np.zeros(4, np.float32), np.zeros(3, np.float32))
    with pytest.raises(
        ValueError, match="SGDOptimizerV2: parameter must be a float32 array, got float64"
    ):
        _C._sgd_update(0.1, np.ones(4), g)
    with pytest.raises(ValueError, match="SGDOptimizerV2: parameter must be C-contiguous"):
        _C._sgd_update(0.1, np.ones((4, 2), np.float32)[:, 0], g)
    ro = np.ones(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="InplaceClipGradNorm: gradient 1 must be writable"):
        _C._clip_grad_norm([g, ro], 1.0)
