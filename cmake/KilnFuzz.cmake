# libFuzzer targets for Kiln's parsers of untrusted bytes (store frames, transport frames).
#
# The project builds with g++, which has no libFuzzer; clang++ builds each fuzz target on the side,
# with its own flags, from the sources listed plus the few kiln_base files every parser needs.
# Without clang++ the targets are skipped with a message, never silently, and in CI (CI=true)
# configuring fails.
#
#   kiln_fuzz_target(NAME <name> SOURCES <files...>
#                    [SEED_SOURCES <files...>] [LIBS <-lname...>] [MAX_TOTAL_TIME <seconds>])
#
#   SOURCES       the files of the fuzzer; one defines LLVMFuzzerTestOneInput. Relative paths are
#                 relative to the calling CMakeLists (CMAKE_CURRENT_SOURCE_DIR).
#   SEED_SOURCES  optional: the files of a seed generator, a program with main(argc, argv) that
#                 writes seed inputs into the directory argv[1]. It is built with the same
#                 sanitizers (no fuzzer) and run before every fuzz test, so the seeds always match
#                 the current format.
#   LIBS          optional: system libraries the sources need (-lxxhash, -lyaml-cpp), linked into
#                 the fuzzer and the seed generator.
#   MAX_TOTAL_TIME  seconds the ctest run fuzzes; default 20.
#
# Produces ${CMAKE_BINARY_DIR}/fuzz/<name> (part of ALL, target fuzz_<name>) and the ctest test
# fuzz.<name> (label "fuzz"), which starts from an empty corpus under the build tree, adds the
# seeds, fuzzes for MAX_TOTAL_TIME seconds with -seed=1, and fails on any crash, leak, sanitizer
# report or check failure; a crashing input is left in ${CMAKE_BINARY_DIR}/fuzz/<name>.artifacts/.
#
# The same file is the test's driver in script mode (cmake -P KilnFuzz.cmake), see the end.

if(NOT CMAKE_SCRIPT_MODE_FILE)

# Several libraries include this file (obs, comm); define the targets' helpers once.
include_guard(GLOBAL)

find_program(KILN_CLANGXX NAMES clang++ clang++-14 DOC "clang++ for libFuzzer targets")
if(KILN_CLANGXX)
  message(STATUS "kiln: fuzz targets ✓ (${KILN_CLANGXX})")
elseif("$ENV{CI}" STREQUAL "true")
  # In CI a missing clang++ would let every fuzz.* test vanish from a green run.
  message(FATAL_ERROR "kiln: fuzz targets ✗: clang++ not found, and CI=true needs them "
                      "(scripts/install-deps installs clang)")
else()
  message(STATUS "kiln: fuzz targets ✗ (clang++ not found; fuzz.* tests are not defined)")
endif()

function(kiln_fuzz_absolute out)
  set(files "")
  foreach(f IN LISTS ARGN)
    if(NOT IS_ABSOLUTE "${f}")
      set(f ${CMAKE_CURRENT_SOURCE_DIR}/${f})
    endif()
    list(APPEND files ${f})
  endforeach()
  set(${out} ${files} PARENT_SCOPE)
endfunction()

function(kiln_fuzz_target)
  cmake_parse_arguments(ARG "" "NAME;MAX_TOTAL_TIME" "SOURCES;SEED_SOURCES;LIBS" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_fuzz_target needs NAME and SOURCES")
  endif()
  if(NOT KILN_CLANGXX)
    return()
  endif()
  # Set here, not at file scope: include_guard(GLOBAL) runs the file once, in whichever library's
  # directory includes it first, and file-scope variables would not reach the others.
  # The kiln_base files a parser links against: Status and the KILN_CHECK failure path.
  set(KILN_FUZZ_BASE_SOURCES
    ${PROJECT_SOURCE_DIR}/src/base/status.cc
    ${PROJECT_SOURCE_DIR}/src/base/check.cc)
  # -O1 keeps the sanitizers fast enough to reach millions of executions; -g names the lines of a
  # crash; -fno-sanitize-recover makes every UBSan report fatal, so the fuzzer records it as a crash.
  set(KILN_FUZZ_FLAGS -std=c++20 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all
                      -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/src)
  set(KILN_FUZZ_DRIVER ${CMAKE_CURRENT_FUNCTION_LIST_FILE})
  if(NOT ARG_MAX_TOTAL_TIME)
    set(ARG_MAX_TOTAL_TIME 20)
  endif()
  kiln_fuzz_absolute(sources ${ARG_SOURCES})
  kiln_fuzz_absolute(seed_sources ${ARG_SEED_SOURCES})
  # clang++ builds every source in one command, so it cannot write a depfile; rebuild whenever
  # any of our headers changes instead.
  file(GLOB_RECURSE headers ${PROJECT_SOURCE_DIR}/include/kiln/*.h ${PROJECT_SOURCE_DIR}/src/*.h)

  set(dir ${CMAKE_BINARY_DIR}/fuzz)
  set(fuzzer ${dir}/${ARG_NAME})
  add_custom_command(
    OUTPUT ${fuzzer}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
    COMMAND ${KILN_CLANGXX} ${KILN_FUZZ_FLAGS} -fsanitize=fuzzer,address,undefined
            ${sources} ${KILN_FUZZ_BASE_SOURCES} ${ARG_LIBS} -o ${fuzzer}
    DEPENDS ${sources} ${KILN_FUZZ_BASE_SOURCES} ${headers}
    COMMENT "Building libFuzzer target fuzz/${ARG_NAME} with clang++"
    VERBATIM)
  set(outputs ${fuzzer})
  set(seeder "")
  if(seed_sources)
    set(seeder ${dir}/${ARG_NAME}_seeds)
    add_custom_command(
      OUTPUT ${seeder}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${KILN_CLANGXX} ${KILN_FUZZ_FLAGS} -fsanitize=address,undefined
              ${seed_sources} ${KILN_FUZZ_BASE_SOURCES} ${ARG_LIBS} -o ${seeder}
      DEPENDS ${seed_sources} ${KILN_FUZZ_BASE_SOURCES} ${headers}
      COMMENT "Building the seed generator fuzz/${ARG_NAME}_seeds with clang++"
      VERBATIM)
    list(APPEND outputs ${seeder})
  endif()
  add_custom_target(fuzz_${ARG_NAME} ALL DEPENDS ${outputs})

  add_test(NAME fuzz.${ARG_NAME}
           COMMAND ${CMAKE_COMMAND} -DFUZZER=${fuzzer} -DSEEDER=${seeder}
                   -DWORK_DIR=${dir}/${ARG_NAME}.work -DARTIFACT_DIR=${dir}/${ARG_NAME}.artifacts
                   -DMAX_TOTAL_TIME=${ARG_MAX_TOTAL_TIME} -P ${KILN_FUZZ_DRIVER})
  # The fuzzer stops itself after MAX_TOTAL_TIME; the margin covers start-up, merging the seeds
  # and a slow machine.
  math(EXPR timeout "${ARG_MAX_TOTAL_TIME} * 3 + 60")
  set_tests_properties(fuzz.${ARG_NAME} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
endfunction()

else()

# Script mode: run one fuzz test. Inputs: FUZZER, SEEDER (may be empty), WORK_DIR, ARTIFACT_DIR,
# MAX_TOTAL_TIME.
set(corpus ${WORK_DIR}/corpus)
set(seeds ${WORK_DIR}/seeds)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${corpus} ${seeds} ${ARTIFACT_DIR})
if(SEEDER)
  execute_process(COMMAND ${SEEDER} ${seeds} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz: the seed generator ${SEEDER} failed: ${rc}")
  endif()
endif()
file(GLOB seed_files ${seeds}/*)
list(LENGTH seed_files seed_count)
message(STATUS "fuzz: ${FUZZER} for ${MAX_TOTAL_TIME} s from ${seed_count} seeds")
# The corpus comes first: libFuzzer writes new inputs into the first directory only.
execute_process(
  COMMAND ${FUZZER} -max_total_time=${MAX_TOTAL_TIME} -seed=1 -print_final_stats=1
          -artifact_prefix=${ARTIFACT_DIR}/ ${corpus} ${seeds}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz: ${FUZZER} found a failure (exit ${rc}); the input is in ${ARTIFACT_DIR}")
endif()

endif()
