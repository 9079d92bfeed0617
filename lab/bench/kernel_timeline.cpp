// KernelTimeline through CUPTI, the CUDA toolkit's profiling library; a build
// without it (PLEXUS_BENCH_CUPTI 0) gets the stand-in at the end of this file,
// which refuses to record and says why.
#include "kernel_timeline.h"

#if PLEXUS_BENCH_CUPTI
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "plexus/error.h"

namespace plexus::bench {

namespace {

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;
constexpr std::size_t kBufferAlignment = 8;  // CUPTI's requirement for activity buffers

std::mutex records_mutex;
std::vector<KernelRecord>* records = nullptr;  // the recording timeline's, under records_mutex

void check_cupti(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  throw DeviceError(std::string("CUPTI: ") + call + " failed: " + (text ? text : "unknown error"));
}

// The demangled name, with "(anonymous namespace)" written "<unnamed>" as
// Nsight Compute writes it, so step_kernels.py sorts both alike.
std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> plain(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  std::string text = status == 0 && plain ? std::string(plain.get()) : std::string(name);
  const std::string anonymous = "(anonymous namespace)";
  for (std::size_t at = text.find(anonymous); at != std::string::npos; at = text.find(anonymous, at))
    text.replace(at, anonymous.size(), "<unnamed>");
  return text;
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid_size) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(records_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (!records) continue;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      records->push_back({demangled(kernel->name), kernel->streamId, kernel->start, kernel->end});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* memset = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      records->push_back(
          {"memset " + std::to_string(memset->bytes) + " bytes", memset->streamId, memset->start, memset->end});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* memcpy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      records->push_back(
          {"memcpy " + std::to_string(memcpy->bytes) + " bytes", memcpy->streamId, memcpy->start, memcpy->end});
    }
  }
  std::free(buffer);
}

// What is recorded: kernels (running side by side when on different
// streams), and the memsets and copies between them (in a CUDA graph, nodes
// of their own, which a list of kernels alone shows only as gaps).
constexpr CUpti_ActivityKind kRecordedKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                                 CUPTI_ACTIVITY_KIND_MEMCPY};

void disable_recorded_kinds() {
  for (CUpti_ActivityKind kind : kRecordedKinds) cuptiActivityDisable(kind);
}

}  // namespace

KernelTimeline::KernelTimeline() {
  {
    std::lock_guard<std::mutex> lock(records_mutex);
    if (records) throw Error("KernelTimeline: another one is recording");
    records = new std::vector<KernelRecord>();
  }
  try {
    static std::once_flag registered;  // once per process: the callbacks serve every timeline
    std::call_once(registered, [] {
      check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    });
    for (CUpti_ActivityKind kind : kRecordedKinds) check_cupti(cuptiActivityEnable(kind), "cuptiActivityEnable");
  } catch (...) {  // no destructor runs: leave the recorder free for another try
    disable_recorded_kinds();
    std::lock_guard<std::mutex> lock(records_mutex);
    delete records;
    records = nullptr;
    throw;
  }
}

KernelTimeline::~KernelTimeline() {
  if (recording_) {
    disable_recorded_kinds();
    cuptiActivityFlushAll(0);
  }
  std::lock_guard<std::mutex> lock(records_mutex);
  delete records;
  records = nullptr;
}

std::uint64_t KernelTimeline::now_ns() {
  std::uint64_t t = 0;
  check_cupti(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
  return t;
}

std::vector<KernelRecord> KernelTimeline::finish() {
  check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  for (CUpti_ActivityKind kind : kRecordedKinds) check_cupti(cuptiActivityDisable(kind), "cuptiActivityDisable");
  recording_ = false;
  std::lock_guard<std::mutex> lock(records_mutex);
  std::vector<KernelRecord> result = std::move(*records);
  records->clear();
  std::sort(result.begin(), result.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return result;
}

}  // namespace plexus::bench

#else  // no CUPTI

#include "plexus/error.h"

namespace plexus::bench {

KernelTimeline::KernelTimeline() {
  throw DeviceError("this plexus-bench was built without CUPTI (the CUDA toolkit's profiling library), so it "
                    "cannot record a kernel timeline; install it (Debian: cuda-cupti-dev) and rebuild");
}
KernelTimeline::~KernelTimeline() = default;
std::uint64_t KernelTimeline::now_ns() { return 0; }
std::vector<KernelRecord> KernelTimeline::finish() { return {}; }

}  // namespace plexus::bench

#endif  // PLEXUS_BENCH_CUPTI
