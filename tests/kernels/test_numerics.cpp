// test_numerics.cpp — names, parsing, effective split, profile validation and the built-ins.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "kernels/numerics.h"

namespace moerl {
namespace {

TEST(Numerics, NamesRoundTrip) {
  for (int i = 0; i < kFormatCount; ++i) {
    Format f{};
    ASSERT_TRUE(format_parse(format_name(static_cast<Format>(i)), &f));
    EXPECT_EQ(static_cast<int>(f), i);
  }
  for (int i = 0; i < 4; ++i) {
    Scaling s{};
    ASSERT_TRUE(scaling_parse(scaling_name(static_cast<Scaling>(i)), &s));
    EXPECT_EQ(static_cast<int>(s), i);
  }
  for (int i = 0; i < 3; ++i) {
    TieBreak t{};
    ASSERT_TRUE(tie_break_parse(tie_break_name(static_cast<TieBreak>(i)), &t));
    EXPECT_EQ(static_cast<int>(t), i);
  }
  Format f{};
  EXPECT_FALSE(format_parse("fp8", &f));
  EXPECT_FALSE(format_parse("BF16", &f));
  EXPECT_STREQ(stream_name(Stream::gemm_order), "gemm_order");
  EXPECT_STREQ(stream_name(Stream::data), "data");
}

TEST(Numerics, ReduceOrderParse) {
  ReduceOrder o;
  ASSERT_TRUE(reduce_order_parse("fixed", &o));
  EXPECT_EQ(o.kind, OrderKind::fixed);
  ASSERT_TRUE(reduce_order_parse("reversed", &o));
  EXPECT_EQ(o.kind, OrderKind::reversed);
  ASSERT_TRUE(reduce_order_parse("split_k:2", &o));
  EXPECT_EQ(o.kind, OrderKind::split_k);
  EXPECT_EQ(o.split, 2);
  ASSERT_TRUE(reduce_order_parse("split_k:64", &o));
  EXPECT_EQ(o.split, 64);
  EXPECT_EQ(reduce_order_name(o), "split_k:64");
  for (const char* bad : {"split_k:1", "split_k:65", "split_k:", "split_k:4x", "split_k:-2",
                          "split_k:004", "Fixed", "seeded_shuffle", ""})
    EXPECT_FALSE(reduce_order_parse(bad, &o)) << bad;
}

TEST(Numerics, EffectiveSplit) {
  ReduceCtx c;
  EXPECT_EQ(reduce_effective_split(c, 1, 128), 1);
  c.order = {OrderKind::split_k, 4};
  EXPECT_EQ(reduce_effective_split(c, 1, 128), 4);
  EXPECT_EQ(reduce_effective_split(c, 100000, 128), 4);
  EXPECT_EQ(reduce_effective_split(c, 1, 3), 3);  // clamped to K
  c.batch_invariant = false;
  EXPECT_EQ(reduce_effective_split(c, 1, 128), 16);
  EXPECT_EQ(reduce_effective_split(c, 63, 128), 16);
  EXPECT_EQ(reduce_effective_split(c, 64, 128), 8);
  EXPECT_EQ(reduce_effective_split(c, 511, 128), 8);
  EXPECT_EQ(reduce_effective_split(c, 512, 128), 4);
  EXPECT_EQ(reduce_effective_split(c, 1, 10), 10);
  c.order = {OrderKind::fixed, 1};
  EXPECT_EQ(reduce_effective_split(c, 1, 128), 4);
  EXPECT_EQ(reduce_effective_split(c, 100, 128), 2);
  EXPECT_EQ(reduce_effective_split(c, 1000, 128), 1);
  EXPECT_EQ(reduce_effective_split(c, 1, 0), 1);
}

TEST(Numerics, BuiltinProfiles) {
  NumericsProfile p;
  for (const char* name : {"fp32-ref", "bf16-train", "fp16", "fp8-rollout"}) {
    ASSERT_TRUE(profile_builtin(name, &p)) << name;
    EXPECT_EQ(p.name, name);
    EXPECT_NO_THROW(p.validate()) << name;
    EXPECT_EQ(p.seed, 0u);
    EXPECT_NE(profile_builtin_names().find(name), std::string::npos);
  }
  EXPECT_FALSE(profile_builtin("fp4", &p));

  ASSERT_TRUE(profile_builtin("fp32-ref", &p));
  EXPECT_TRUE(p.is_exact_fp32());

  ASSERT_TRUE(profile_builtin("bf16-train", &p));
  EXPECT_FALSE(p.is_exact_fp32());
  EXPECT_EQ(p.matmul, Format::bf16);
  EXPECT_EQ(p.attention, Format::bf16);
  EXPECT_EQ(p.lm_head, Format::bf16);
  EXPECT_EQ(p.activations, Format::bf16);
  EXPECT_EQ(p.router, Format::fp32);
  EXPECT_EQ(p.router_logits, Format::fp32);
  EXPECT_TRUE(p.batch_invariant);
  EXPECT_EQ(p.gemm_order.kind, OrderKind::fixed);

  ASSERT_TRUE(profile_builtin("fp16", &p));
  EXPECT_EQ(p.matmul, Format::fp16);
  EXPECT_EQ(p.router, Format::fp32);

  ASSERT_TRUE(profile_builtin("fp8-rollout", &p));
  EXPECT_EQ(p.matmul, Format::fp8_e4m3);
  EXPECT_EQ(p.router, Format::fp8_e4m3);
  EXPECT_EQ(p.act_scaling, Scaling::block);
  EXPECT_EQ(p.weight_scaling, Scaling::block);
  EXPECT_EQ(p.scale_block, 128);
  EXPECT_EQ(p.accum_bits, 13);
  EXPECT_EQ(p.promote_every, 128);
  EXPECT_EQ(p.attention, Format::bf16);
  EXPECT_EQ(p.lm_head, Format::bf16);
  EXPECT_EQ(p.activations, Format::bf16);
  EXPECT_EQ(p.router_logits, Format::bf16);
  EXPECT_EQ(reduce_order_name(p.gemm_order), "split_k:4");
  EXPECT_EQ(reduce_order_name(p.attn_order), "split_k:2");
  EXPECT_EQ(reduce_order_name(p.norm_order), "split_k:2");
  EXPECT_EQ(reduce_order_name(p.combine_order), "split_k:2");
  EXPECT_FALSE(p.batch_invariant);
  EXPECT_EQ(p.tie_break, TieBreak::random);
}

// validate() names the profile, the key and the value.
void expect_rejected(const NumericsProfile& p, const std::string& key_and_value) {
  try {
    p.validate();
    ADD_FAILURE() << "accepted: " << key_and_value;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("profile." + p.name + "." + key_and_value),
              std::string::npos)
        << e.what();
  }
}

TEST(Numerics, ValidateRejectsBadSettings) {
  NumericsProfile base;
  base.name = "x";
  NumericsProfile p = base;
  p.accum_bits = 24;
  expect_rejected(p, "accum_bits = 24");
  p = base;
  p.accum_bits = -1;
  expect_rejected(p, "accum_bits = -1");
  p = base;
  p.promote_every = 0;
  expect_rejected(p, "promote_every = 0");
  p = base;
  p.scale_block = 0;
  expect_rejected(p, "scale_block = 0");
  p = base;
  p.matmul = Format::fp8_e4m3;
  expect_rejected(p, "act_scaling = none");
  p.act_scaling = Scaling::row;
  expect_rejected(p, "weight_scaling = none");
  p.weight_scaling = Scaling::tensor;
  EXPECT_NO_THROW(p.validate());
  p = base;
  p.router = Format::fp8_e5m2;
  expect_rejected(p, "act_scaling = none");
  p = base;
  p.activations = Format::fp8_e4m3;
  expect_rejected(p, "activations = fp8_e4m3");
  p = base;
  p.gemm_order = {OrderKind::split_k, 1};
  expect_rejected(p, "gemm_order = split_k:1");
  p = base;
  p.norm_order = {OrderKind::split_k, 65};
  expect_rejected(p, "norm_order = split_k:65");
  p = base;
  p.accum_bits = 23;
  p.promote_every = 1;
  EXPECT_NO_THROW(p.validate());
  EXPECT_FALSE(p.is_exact_fp32());
}

}  // namespace
}  // namespace moerl
