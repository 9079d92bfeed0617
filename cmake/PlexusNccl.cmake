# NCCL, for data-parallel training on several GPUs, is optional. It is
# looked for in NCCL_ROOT (a prefix holding include/nccl.h and
# lib/libnccl.so or libnccl.so.2; also read from the environment), in the
# CUDA toolkit, in the system paths, and last in python3's NVIDIA NCCL wheel
# (site-packages/nvidia/nccl, which PyTorch installs). Sets PLEXUS_WITH_NCCL
# to 1 when found (with NCCL_INCLUDE_DIR and NCCL_LIBRARY) with the version needed (2.14:
# non-blocking communicators and ncclCommFinalize); to 0 otherwise, with a
# message. -DPLEXUS_NCCL=OFF skips the search.
option(PLEXUS_NCCL "Use NCCL (training on several GPUs) when it is found" ON)
set(PLEXUS_WITH_NCCL 0)
if(PLEXUS_CUDA AND PLEXUS_NCCL)
  set(plexus_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl, sys; sys.stdout.write(list(nvidia.nccl.__path__)[0])"
      OUTPUT_VARIABLE plexus_nccl_wheel RESULT_VARIABLE plexus_nccl_wheel_status ERROR_QUIET)
    if(plexus_nccl_wheel_status EQUAL 0 AND plexus_nccl_wheel)
      set(plexus_nccl_wheel_hint ${plexus_nccl_wheel})
    endif()
  endif()
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ${plexus_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include
            PATHS ${plexus_nccl_wheel_hint})
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${plexus_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64
               PATHS ${plexus_nccl_wheel_hint})
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h plexus_nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" plexus_nccl_major "${plexus_nccl_version_lines}")
    string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" plexus_nccl_minor "${plexus_nccl_version_lines}")
    string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" plexus_nccl_patch "${plexus_nccl_version_lines}")
    set(plexus_nccl_version "${plexus_nccl_major}.${plexus_nccl_minor}.${plexus_nccl_patch}")
    if(plexus_nccl_version VERSION_LESS 2.14)
      message(STATUS "NCCL ${plexus_nccl_version} at ${NCCL_LIBRARY} is older than 2.14: training on several GPUs is off")
    else()
      set(PLEXUS_WITH_NCCL 1)
      message(STATUS "NCCL ${plexus_nccl_version}: ${NCCL_LIBRARY} (training on several GPUs is on)")
    endif()
  else()
    message(STATUS "NCCL not found (set NCCL_ROOT to its prefix): training on several GPUs is off")
  endif()
endif()
