// How much of FusedAttention's softmax backward may keep, and its operand layout attribute
// (ops/attention_ops.cpp).
#pragma once

#include <cstdint>

namespace ortmodule {

// FusedAttention keeps its softmax output for backward while it is at most this many bytes per
// call, and recomputes it block by block above (the default: kDefaultAttentionProbsLimit).
constexpr int64_t kDefaultAttentionProbsLimit = int64_t(16) << 20;
void set_attention_probs_limit(int64_t bytes);
int64_t attention_probs_limit();

struct OpContext;

// Attribute bshd of FusedAttention(Dropout, Grad), checked: which operands are laid out
// [batch, seq, heads, dim] (1 Q, 2 K, 4 V, 8 the output Y and dY).
int64_t attention_bshd_bits(const OpContext& ctx);

}  // namespace ortmodule
