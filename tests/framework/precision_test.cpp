// The precision policy on the Context: parsing, and the TF32 and BF16
// switches it drives.
#include <gtest/gtest.h>

#include <string>

#include "plexus/context.h"
#include "plexus/error.h"

namespace plexus {
namespace {

TEST(Precision, ParsesTheThreeNamesAndRejectsOthers) {
  EXPECT_EQ(parse_precision("f32"), Precision::f32);
  EXPECT_EQ(parse_precision("tf32"), Precision::tf32);
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  for (Precision p : {Precision::f32, Precision::tf32, Precision::bf16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  try {
    parse_precision("fp16");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown precision 'fp16': expected f32, tf32 or bf16"), std::string::npos)
        << e.what();
  }
}

TEST(Precision, ContextDefaultsToStrictF32AndAllowTf32FollowsThePolicy) {
  Context ctx;
  EXPECT_EQ(ctx.precision(), Precision::f32);
  EXPECT_FALSE(ctx.allow_tf32());
  ctx.set_precision(Precision::tf32);
  EXPECT_TRUE(ctx.allow_tf32());
  ctx.set_allow_tf32(false);
  EXPECT_EQ(ctx.precision(), Precision::f32);
  ctx.set_allow_tf32(true);
  EXPECT_EQ(ctx.precision(), Precision::tf32);
}

TEST(Precision, Bf16UsesBf16ProductsAndTf32ForEverythingElse) {
  Context ctx;
  EXPECT_FALSE(ctx.bf16_products());
  ctx.set_precision(Precision::bf16);
  EXPECT_EQ(ctx.precision(), Precision::bf16);
  EXPECT_TRUE(ctx.bf16_products());
  EXPECT_TRUE(ctx.allow_tf32()) << "products without a BF16 kernel run as TF32 under bf16";
  ctx.set_precision(Precision::tf32);
  EXPECT_FALSE(ctx.bf16_products());
  EXPECT_TRUE(ctx.allow_tf32());
  ctx.set_precision(Precision::f32);
  EXPECT_FALSE(ctx.bf16_products());
  EXPECT_FALSE(ctx.allow_tf32());
}

}  // namespace
}  // namespace plexus
