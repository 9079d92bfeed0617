# The fuzzers' seed corpora are committed as one zip each, tests/fuzz/corpus/NAME.zip (as OSS-Fuzz keeps
# NAME_seed_corpus.zip): binary seeds read nothing in a diff, and a folder of them is many files.
# plexus_seed_corpus(NAME OUT_DIR) unpacks NAME.zip into <build>/seed-corpus/NAME/ at configure time
# (again whenever the zip changes) and sets OUT_DIR to that folder.
function(plexus_seed_corpus name out_dir)
  set(zip ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name}.zip)
  set(dir ${CMAKE_BINARY_DIR}/seed-corpus/${name})
  if(NOT EXISTS ${zip})
    message(FATAL_ERROR "no seed corpus ${zip}")
  endif()
  file(REMOVE_RECURSE ${dir})
  file(ARCHIVE_EXTRACT INPUT ${zip} DESTINATION ${dir})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${zip})
  set(${out_dir} ${dir} PARENT_SCOPE)
endfunction()
