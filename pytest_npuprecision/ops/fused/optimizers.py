"""Optimizer updates torch_npu fuses: Adam and AdamW, one step of (var, m, v) given the gradient. The
references return the updated tensors (torch_npu writes them into ``out``)."""

from __future__ import annotations

import torch

from .record import FusedOp, UnjudgedFusedCall


def _state(out) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if out is None or len(out) != 3:
        raise UnjudgedFusedCall("a call without out=(var, m, v) has no state to update")
    return tuple(out)


def _wide(*tensors: torch.Tensor) -> torch.dtype:
    """float32 for half states (the update computes wider), float64 in a float64 golden."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad, max_grad_norm=None,
                     amsgrad=False, maximize=False, *, out=None):
    """torch_npu.npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad,
    max_grad_norm, amsgrad, maximize, out=(var, m, v)) -> (var, m, v)

    g = -grad where maximize; m' = beta1·m + (1 - beta1)·g; v' = beta2·v + (1 - beta2)·g²; the powers step
    once (beta·power); var' = var·(1 - lr·weight_decay) - lr·(m' / (1 - beta1_power')) / (sqrt(v'' / (1 -
    beta2_power')) + epsilon), v'' = max(max_grad_norm, v') with amsgrad, else v'. Each in var's dtype."""
    var, m, v = _state(out)
    wide = _wide(var, m, v, grad)
    var_, m_, v_, g = (t.to(wide) for t in (var, m, v, grad))
    g = -g if maximize else g
    m_out = beta1 * m_ + (1 - beta1) * g
    v_out = beta2 * v_ + (1 - beta2) * g * g
    beta1_power, beta2_power = beta1_power * beta1, beta2_power * beta2
    second = v_out if not amsgrad else torch.maximum(max_grad_norm.to(wide), v_out)
    step = lr * (m_out / (1 - beta1_power)) / (torch.sqrt(second / (1 - beta2_power)) + epsilon)
    var_out = var_ * (1 - lr * weight_decay) - step
    return var_out.to(var.dtype), m_out.to(m.dtype), v_out.to(v.dtype)


def npu_apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking=False, use_nesterov=False,
                   *, out=None):
    """torch_npu.npu_apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking,
    use_nesterov, out=(var, m, v)) -> (var, m, v)

    Adam as TensorFlow's ApplyAdam: m' = beta1·m + (1 - beta1)·g; v' = beta2·v + (1 - beta2)·g²;
    lr_t = lr·sqrt(1 - beta2_power) / (1 - beta1_power) with the powers as given; var' = var - lr_t·u /
    (sqrt(v') + epsilon), u = m' (or beta1·m' + (1 - beta1)·g with use_nesterov). use_locking only locks."""
    var, m, v = _state(out)
    wide = _wide(var, m, v, grad)
    var_, m_, v_, g = (t.to(wide) for t in (var, m, v, grad))
    m_out = beta1 * m_ + (1 - beta1) * g
    v_out = beta2 * v_ + (1 - beta2) * g * g
    lr_t = lr * (1 - beta2_power) ** 0.5 / (1 - beta1_power)
    direction = beta1 * m_out + (1 - beta1) * g if use_nesterov else m_out
    var_out = var_ - lr_t * direction / (torch.sqrt(v_out) + epsilon)
    return var_out.to(var.dtype), m_out.to(m.dtype), v_out.to(v.dtype)


OPS = (
    FusedOp("npu_apply_adam_w", npu_apply_adam_w,
            "npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad, max_grad_norm, "
            "amsgrad, maximize, out=(var, m, v))", "var, m, v (updated)", "a call without out="),
    FusedOp("npu_apply_adam", npu_apply_adam,
            "npu_apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking, use_nesterov, "
            "out=(var, m, v))", "var, m, v (updated)", "a call without out="),
)
