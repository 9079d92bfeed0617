# `cmake --install build --prefix P` installs what an out-of-tree plugin
# or a program using the codec needs: the headers, the four libraries, the
# plexus-ae app, and a CMake package so that a plugin's CMakeLists says
# find_package(plexus) and links plexus::plexus (docs/writing-plugins.md
# walks through it), a program find_package(plexus COMPONENTS codec) and
# plexus::codec, and one that trains plexus::train (or reads images,
# plexus::data).
#
#   P/include/plexus/...                   public headers (plexus/codec.h: the codec's C API)
#   P/lib/libplexus.so                     the core: tensors, Net, checkpoints, the built-in layers
#   P/lib/libplexus_data.so                image files (libjpeg, libpng) and the data pipeline
#   P/lib/libplexus_train.so               optimisers, trainer, data parallelism (NCCL, MPI)
#   P/lib/libplexus_codec.so               the codec; with libplexus, all a decoder links
#   P/lib/pkgconfig/plexus-codec.pc        pkg-config --cflags --libs plexus-codec
#   P/bin/plexus-ae                        when the app is part of the build
#   P/lib/cmake/plexus/plexusConfig.cmake  + version file, exported targets,
#                                          PlexusPlugin.cmake (plexus_add_plugin)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# One source of truth for the plugin ABI version: the constant in plugin.h.
file(STRINGS ${PROJECT_SOURCE_DIR}/framework/include/plexus/plugin.h plexus_abi_line
     REGEX "kPluginAbiVersion = [0-9]+;")
string(REGEX MATCH "[0-9]+" PLEXUS_PLUGIN_ABI_VERSION "${plexus_abi_line}")
if(NOT PLEXUS_PLUGIN_ABI_VERSION)
  message(FATAL_ERROR "cannot read kPluginAbiVersion from framework/include/plexus/plugin.h")
endif()

set(plexus_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/plexus)

# The headers need C++17; say so in the exported target, so that any
# consumer of plexus::plexus compiles with it.
target_compile_features(plexus PUBLIC cxx_std_17)

# Installed libraries find each other next door and the CUDA, NCCL and MPI
# libraries where they were linked from, without LD_LIBRARY_PATH.
set_target_properties(plexus PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(plexus_data PROPERTIES EXPORT_NAME data INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(plexus_train PROPERTIES EXPORT_NAME train INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS plexus plexus_data plexus_train EXPORT plexusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/framework/include/plexus ${PROJECT_SOURCE_DIR}/layers/include/plexus
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The codec: plexus::codec in the package, libplexus found next door.
target_compile_features(plexus_codec PUBLIC cxx_std_17)
set_target_properties(plexus_codec PROPERTIES EXPORT_NAME codec INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS plexus_codec EXPORT plexusTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/codec/include/plexus DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The pkg-config file, relative to its own folder so that the prefix may move.
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/package/plexus-codec.pc @ONLY CONTENT [[
prefix=${pcfiledir}/../..
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@

Name: plexus-codec
Description: the Plexus learned image codec (C API: plexus/codec.h)
Version: @PROJECT_VERSION@
Libs: -L${libdir} -lplexus_codec
Cflags: -I${includedir}
]])
install(FILES ${PROJECT_BINARY_DIR}/package/plexus-codec.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(TARGET plexus-ae)
  set_target_properties(plexus-ae PROPERTIES
    INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}"
    INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS plexus-ae RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT plexusTargets
  NAMESPACE plexus::
  FILE plexusTargets.cmake
  DESTINATION ${plexus_package_dir})

# Values baked into plexusConfig.cmake.
if(PLEXUS_CUDA)
  set(PLEXUS_WITH_CUDA ON)
  set(PLEXUS_CUDA_ARCHITECTURES_VALUE "${CMAKE_CUDA_ARCHITECTURES}")
  set(PLEXUS_CUDA_TOOLKIT_ROOT "${CUDAToolkit_LIBRARY_ROOT}")
else()
  set(PLEXUS_WITH_CUDA OFF)
  set(PLEXUS_CUDA_ARCHITECTURES_VALUE "")
  set(PLEXUS_CUDA_TOOLKIT_ROOT "")
endif()
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/plexusConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/plexusConfig.cmake
  INSTALL_DESTINATION ${plexus_package_dir}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the API, so only the same minor matches.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/plexusConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/plexusConfig.cmake
  ${PROJECT_BINARY_DIR}/package/plexusConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/PlexusPlugin.cmake
  DESTINATION ${plexus_package_dir})
