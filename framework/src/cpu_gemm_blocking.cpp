#include "plexus/cpu_gemm_blocking.h"

#include <unistd.h>

#include <cerrno>  // program_invocation_short_name (GNU)
#include <cstdio>
#include <mutex>

#include <Eigen/Core>

// The instruction-set check runs on processors that may lack the build's
// instructions, so its functions are compiled for x86-64's baseline whatever
// -march the rest of the build has (the target attribute, rather than a
// separate source file with its own flags, keeps __AVX2__ and __FMA__ telling
// this file what the build was compiled for). They call only the C library,
// never an inline C++ function: the out-of-line copy of one would be compiled
// for the build's instruction set.
#if defined(__x86_64__) || defined(__i386__)
#define PLEXUS_BASELINE_X86 __attribute__((target("arch=x86-64")))
#else
#define PLEXUS_BASELINE_X86
#endif

namespace plexus {

void fix_cpu_gemm_blocking() {
  static std::once_flag once;
  std::call_once(once, [] {
    // What Eigen 3.4 reads from the 2-core AMD EPYC machines the README's
    // numbers and the tests' stored values come from: 32 KiB L1, 512 KiB
    // L2, 256 MiB L3 per its query. Any constant gives every machine the
    // same sums; these keep those numbers.
    Eigen::setCpuCacheSizes(32 * 1024, 512 * 1024, 256 * 1024 * 1024);
  });
}

PLEXUS_BASELINE_X86 const char* missing_instruction_set_message(bool built_with_avx2, bool built_with_fma,
                                                                bool cpu_has_avx2, bool cpu_has_fma) {
  if ((built_with_avx2 && !cpu_has_avx2) || (built_with_fma && !cpu_has_fma))
    return "this build of Plexus was compiled for x86-64-v3 (AVX2, FMA), which this CPU lacks: "
           "rebuild it with -DPLEXUS_CPU_ARCH=OFF";
  return nullptr;
}

#if defined(__AVX2__) || defined(__FMA__)
namespace {
// A library's constructors run in the order of their priority, and before
// those of the libraries and the program that load it; libplexus is the
// first Plexus library any program loads, so this runs before any code
// compiled for AVX2 and FMA (static constructors included), where the
// alternative is an illegal instruction (SIGILL) without a word.
PLEXUS_BASELINE_X86 __attribute__((constructor(101))) void exit_unless_cpu_has_instruction_set() {
  __builtin_cpu_init();  // a constructor may run before libgcc's own
#if defined(__AVX2__)
  const bool built_with_avx2 = true;
#else
  const bool built_with_avx2 = false;
#endif
#if defined(__FMA__)
  const bool built_with_fma = true;
#else
  const bool built_with_fma = false;
#endif
  const char* message = missing_instruction_set_message(built_with_avx2, built_with_fma, __builtin_cpu_supports("avx2"),
                                                        __builtin_cpu_supports("fma"));
  if (message == nullptr) return;
  std::fprintf(stderr, "error: %s: %s\n", program_invocation_short_name, message);
  _exit(1);  // runs nothing more of the build's code (no atexit handlers, no destructors)
}
}  // namespace
#endif

}  // namespace plexus

#undef PLEXUS_BASELINE_X86
