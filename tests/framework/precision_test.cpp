// The precision policy on the Context: parsing, and the TF32 and BF16
// switches it drives; the kernel settings the Context reads from the
// environment.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <utility>
#include <vector>

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

// Each variable set to "0" turns its own path off and no other; unset or
// any other value leaves it on. A Context takes them when it is made.
TEST(KernelSettings, EachVariableTurnsItsPathOffInTheContext) {
  const std::vector<std::pair<const char*, bool KernelSettings::*>> switches = {
      {"PLEXUS_CONV_WGMMA", &KernelSettings::conv_wgmma},
      {"PLEXUS_CONV_WGMMA_TMA", &KernelSettings::conv_wgmma_tma},
      {"PLEXUS_CONV_WGMMA_WGRAD_NHWC", &KernelSettings::conv_wgmma_weight_grad_nhwc},
      {"PLEXUS_CONV_BRANCH", &KernelSettings::conv_branch},
      {"PLEXUS_GDN_BF16", &KernelSettings::gdn_bf16},
      {"PLEXUS_GDN_BF16_TILES", &KernelSettings::gdn_bf16_tiles},
      {"PLEXUS_BF16_STORAGE", &KernelSettings::bf16_storage},
      {"PLEXUS_FUSE_ACTIVATIONS", &KernelSettings::fuse_activations}};
  for (const auto& entry : switches) unsetenv(entry.first);
  for (const auto& entry : switches) EXPECT_TRUE(Context().kernel_settings().*entry.second) << entry.first;
  for (const auto& [name, field] : switches) {
    setenv(name, "1", 1);
    EXPECT_TRUE(KernelSettings::from_environment().*field) << name << "=1";
    setenv(name, "0", 1);
    const KernelSettings settings = Context().kernel_settings();
    for (const auto& other : switches)
      EXPECT_EQ(settings.*other.second, other.second != field) << name << "=0, " << other.first;
    unsetenv(name);
  }
  Context ctx;
  KernelSettings settings;
  settings.conv_branch = false;
  ctx.set_kernel_settings(settings);
  EXPECT_FALSE(ctx.kernel_settings().conv_branch);
  EXPECT_TRUE(ctx.kernel_settings().gdn_bf16);
}

}  // namespace
}  // namespace plexus
