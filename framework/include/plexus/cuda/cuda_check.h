#pragma once
// Checked CUDA, cuBLAS and cuRAND calls. Every call into those libraries goes
// through one of these; a failure throws DeviceError with the call's text,
// the error name, and the file:line of the call:
//   check_cuda(cudaMemcpyAsync(...), "cudaMemcpyAsync", __FILE__, __LINE__);
// After a kernel launch:
//   check_launch("gdn_forward", __FILE__, __LINE__);
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>

#include <string>

#include "plexus/error.h"

namespace plexus::cuda {

inline std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw DeviceError(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                      ") at " + where(file, line));
}

// Names the status through cuBLAS as loaded on first use (plexus/cuda/blas.h).
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

inline void check_curand(curandStatus_t status, const char* call, const char* file, int line) {
  if (status != CURAND_STATUS_SUCCESS)
    throw DeviceError(std::string(call) + " failed: cuRAND status " + std::to_string(static_cast<int>(status)) +
                      " at " + where(file, line));
}

// Call right after a <<<>>> launch: reports bad launch configurations
// immediately, naming the kernel.
inline void check_launch(const char* kernel, const char* file, int line) {
  check_cuda(cudaGetLastError(), kernel, file, line);
}

}  // namespace plexus::cuda
