# cmake -P test of plexus_select_cuda_architectures (cmake/PlexusCudaArchitectures.cmake):
# an explicit choice wins, a visible GPU means native, none means the portable list.
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/PlexusCudaArchitectures.cmake)

function(expect requested visible expected)
  plexus_select_cuda_architectures(selected "${requested}" "${visible}")
  if(NOT "${selected}" STREQUAL "${expected}")
    message(FATAL_ERROR "requested '${requested}', GPUs '${visible}': got '${selected}', expected '${expected}'")
  endif()
endfunction()

expect("86" "" "86")                        # explicit, no GPU
expect("80;90" "8.6" "80;90")               # explicit beats the visible GPU
expect("native" "" "native")                # explicit native is passed through
expect("" "8.6" "native")                   # one visible GPU
expect("" "8.0;9.0" "native")               # several
expect("" "" "80-real;90")                  # none: the portable list

# The portable list: machine code for Ampere/Ada and Hopper, and PTX
# (a bare number is real + virtual) for the newest, so later GPUs JIT it.
set(portable "${PLEXUS_PORTABLE_CUDA_ARCHITECTURES}")
list(GET portable -1 newest)
if(newest MATCHES "-real$")
  message(FATAL_ERROR "the newest portable architecture '${newest}' must also emit PTX")
endif()
foreach(required 80 90)
  if(NOT portable MATCHES "(^|;)${required}")
    message(FATAL_ERROR "the portable list '${portable}' lacks ${required}")
  endif()
endforeach()

# The sm_90a (wgmma) kernels: built exactly when Hopper is targeted.
function(expect_sm90a architectures visible expected)
  plexus_builds_sm90a(builds "${architectures}" "${visible}")
  if(NOT "${builds}" STREQUAL "${expected}")
    message(FATAL_ERROR "architectures '${architectures}', GPUs '${visible}': sm_90a ${builds}, expected ${expected}")
  endif()
endfunction()
expect_sm90a("90" "" TRUE)
expect_sm90a("80-real;90" "" TRUE)          # the portable list
expect_sm90a("90-real" "" TRUE)
expect_sm90a("90a" "" TRUE)
expect_sm90a("80;86" "" FALSE)
expect_sm90a("100" "" FALSE)                # Blackwell: sm_90a code would not run there
expect_sm90a("native" "9.0" TRUE)
expect_sm90a("native" "8.6;9.0" TRUE)
expect_sm90a("native" "8.6" FALSE)
expect_sm90a("native" "" FALSE)
expect_sm90a("all-major" "" TRUE)
message(STATUS "cuda_architectures_test: all selections as expected")
