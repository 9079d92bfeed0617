# plexus_add_plugin(<name> SOURCES <C++ files>... [CUDA_SOURCES <.cu files>...])
#
# Builds lib<name>.so, a MODULE library that Plexus loads with --plugin or
# PLEXUS_PLUGIN_PATH. The CUDA sources are compiled when Plexus has the CUDA
# backend (PLEXUS_WITH_CUDA) and the calling project enabled the CUDA
# language (enable_language(CUDA) is the project's call: it fails on a
# machine without nvcc). The sources see
#   PLEXUS_PLUGIN_WITH_CUDA = 1 when the CUDA sources are part of the plugin,
#                             0 otherwise,
# which is what a layer's has_cuda() and its `#if` around the CUDA overrides
# must test (PLEXUS_WITH_CUDA says only how libplexus itself was built).
#
# Settings applied: C++17 / CUDA C++17 like libplexus, position-independent
# code, the shared CUDA runtime (the one libplexus uses, so streams and
# errors are shared), and --no-undefined, so a declared but undefined
# function fails at link time instead of at dlopen.
function(plexus_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 plugin "" "" "SOURCES;CUDA_SOURCES")
  if(plugin_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "plexus_add_plugin(${name}): unexpected arguments ${plugin_UNPARSED_ARGUMENTS}; "
                        "use plexus_add_plugin(<name> SOURCES <files>... [CUDA_SOURCES <files>...])")
  endif()
  if(NOT plugin_SOURCES)
    message(FATAL_ERROR "plexus_add_plugin(${name}): SOURCES is empty; the C++ sources must at least "
                        "define plexus_plugin_abi_version() and plexus_plugin_register()")
  endif()

  set(with_cuda 0)
  if(plugin_CUDA_SOURCES)
    get_property(enabled_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
    if(NOT PLEXUS_WITH_CUDA)
      message(STATUS "${name}: Plexus was built without CUDA; building the CPU kernels only")
    elseif(NOT "CUDA" IN_LIST enabled_languages)
      message(STATUS "${name}: the CUDA language is not enabled in this project; building the CPU kernels only")
    else()
      set(with_cuda 1)
    endif()
  endif()

  add_library(${name} MODULE ${plugin_SOURCES})
  if(with_cuda)
    target_sources(${name} PRIVATE ${plugin_CUDA_SOURCES})
  endif()
  target_link_libraries(${name} PRIVATE plexus::plexus)
  target_compile_definitions(${name} PRIVATE PLEXUS_PLUGIN_WITH_CUDA=${with_cuda})
  set_target_properties(${name} PROPERTIES
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Shared
    POSITION_INDEPENDENT_CODE ON)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()
