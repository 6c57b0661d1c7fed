// Reading constants while matching patterns: the tensor behind a value that is an
// initializer or the output of a Constant node.
#pragma once

#include "ir/graph.h"

namespace ortmodule {

// v's constant tensor, or null when v is computed (or fed) at run time.
inline const Tensor* constant_tensor(const Value* v) {
  if (!v) return nullptr;
  if (v->initializer.defined()) return &v->initializer;
  if (!v->producer || v->producer->op_type != "Constant" || !v->producer->domain.empty())
    return nullptr;
  const Attribute* a = v->producer->attr("value");
  return a && a->kind == Attribute::Kind::Tensor && a->t.defined() ? &a->t : nullptr;
}

// The value of a one-element floating constant of rank <= max_rank, if v is one.
inline bool constant_float_scalar(const Value* v, size_t max_rank, double& out) {
  const Tensor* t = constant_tensor(v);
  if (!t || t->numel() != 1 || t->rank() > max_rank || !dtype_is_floating(t->dtype())) return false;
  out = t->float_at(0);
  return true;
}

}  // namespace ortmodule
