# Which GPU architectures the CUDA backend is compiled for.
#
#   -DCMAKE_CUDA_ARCHITECTURES=...  given: used as is (e.g. 86, "80;90", native).
#   a GPU visible at configure time: native (exactly the GPUs of this machine).
#   no GPU visible (a build server, a container without a GPU): the portable
#     list below, machine code for each listed generation plus PTX for the
#     newest, which the driver compiles for GPUs newer than the list.
#
# The portable list is chosen for build time as well as reach: machine code
# for a compute capability runs on every later minor version of its major
# one (sm_80 code runs on 8.6 and 8.9 cards), so one entry per generation:
#   80  Ampere and Ada (A100, A10, RTX 30xx, RTX 40xx, L4, L40)
#   90  Hopper (H100, H200), plus PTX: Blackwell and later JIT-compile it.
# Turing (7.5: T4, RTX 20xx) is not in it: the tensor-core convolution
# kernels use sm_80 instructions (cp.async, TF32 mma).
#
# Whenever the list includes Hopper (any 90 entry, or native on a machine
# with a 9.0 GPU), the convolution engine's wgmma kernels are also built as
# sm_90a machine code (plexus_builds_sm90a, layers/CMakeLists.txt); they run
# on compute capability 9.0 only, every other GPU runs the sm_80/sm_90 code.
set(PLEXUS_PORTABLE_CUDA_ARCHITECTURES "80-real;90"
    CACHE STRING "CUDA architectures built when no GPU is visible at configure time")

# Sets `out_var` to the architectures to build for. `requested` is the value
# of CMAKE_CUDA_ARCHITECTURES given by the user (empty when none), and
# `visible_gpus` the compute capabilities nvidia-smi reported ("8.6;9.0",
# empty when no GPU is visible). Pure: the test in
# tests/cmake/cuda_architectures_test.cmake calls it with made-up inputs.
function(plexus_select_cuda_architectures out_var requested visible_gpus)
  if(NOT "${requested}" STREQUAL "")
    set(${out_var} "${requested}" PARENT_SCOPE)
  elseif(NOT "${visible_gpus}" STREQUAL "")
    set(${out_var} "native" PARENT_SCOPE)
  else()
    set(${out_var} "${PLEXUS_PORTABLE_CUDA_ARCHITECTURES}" PARENT_SCOPE)
  endif()
endfunction()

# The compute capabilities of the GPUs nvidia-smi sees ("8.6;9.0"), or empty.
function(plexus_visible_gpu_capabilities out_var)
  set(capabilities "")
  find_program(PLEXUS_NVIDIA_SMI nvidia-smi)
  if(PLEXUS_NVIDIA_SMI)
    execute_process(COMMAND ${PLEXUS_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE output RESULT_VARIABLE status ERROR_QUIET TIMEOUT 30)
    if(status EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" capabilities "${output}")
    endif()
  endif()
  set(${out_var} "${capabilities}" PARENT_SCOPE)
endfunction()

# Sets `out_var` to TRUE when the architectures `architectures` (the value of
# CMAKE_CUDA_ARCHITECTURES) include Hopper, so the sm_90a (wgmma) kernels are
# built: an entry 90, 90-real, 90-virtual or 90a; all or all-major; or native
# with a 9.0 GPU among `visible_gpus` ("8.6;9.0"). Pure, like the selection above.
function(plexus_builds_sm90a out_var architectures visible_gpus)
  set(result FALSE)
  list(FIND visible_gpus "9.0" hopper_index)
  foreach(entry IN LISTS architectures)
    if(entry MATCHES "^90(a|-real|-virtual)?$" OR entry STREQUAL "all" OR entry STREQUAL "all-major")
      set(result TRUE)
    elseif(entry STREQUAL "native" AND hopper_index GREATER -1)
      set(result TRUE)
    endif()
  endforeach()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()
