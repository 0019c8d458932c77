# Helpers that give every Kiln target the same flags, layout and test wiring.
include(GoogleTest)

# Our own code builds warning-free; third-party headers come in as system includes. Warnings are
# errors in every preset and in CI (KILN_WERROR=ON), not in a plain `cmake -S . -B b`: a user's or
# a packager's build must not break on the first warning of a newer compiler.
option(KILN_WERROR "Treat compiler warnings in Kiln's own code as errors" OFF)
if(KILN_WERROR)
  set(KILN_WERROR_FLAG -Werror)
  message(STATUS "kiln: warnings are errors ✓ (KILN_WERROR=ON)")
else()
  set(KILN_WERROR_FLAG "")
  message(STATUS "kiln: warnings are errors ✗ (KILN_WERROR=OFF; the presets and CI turn it on)")
endif()
set(KILN_WARNINGS -Wall -Wextra ${KILN_WERROR_FLAG} -Wshadow -Wnon-virtual-dtor
                  -Wimplicit-fallthrough -Wformat=2 -Wundef)
# GCC 12 at -O3 (a Release build) reports -Wrestrict inside libstdc++'s inlined std::string code
# for plain `"literal" + std::string` (GCC bug 105329, fixed in GCC 13): 11 warnings in 8 files
# of correct code. Off only for that compiler at that level, so the presets (-O2) keep it.
string(TOUPPER "${CMAKE_BUILD_TYPE}" kiln_build_type)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13 AND
   "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${kiln_build_type}}" MATCHES "-O3")
  list(APPEND KILN_WARNINGS -Wno-restrict)
endif()

if(KILN_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(KILN_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT KILN_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KILN_SANITIZE must be empty, 'address' or 'thread', not '${KILN_SANITIZE}'")
endif()

# kiln_library(NAME <lib> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Creates static library kiln_<lib>: public headers from include/, private ones from src/.
function(kiln_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target kiln_${ARG_NAME})
  add_library(${target} STATIC ${ARG_SOURCES})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/include
                                       PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${target} PRIVATE ${KILN_WARNINGS})
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# kiln_tests(NAME <lib> SOURCES ... [DEPS ...] [LABEL <label>])
# One gtest binary per library (kiln_<lib>_tests); every TEST becomes a ctest test labelled
# LABEL ("unit" by default), so `ctest -L unit` runs exactly the unit tests. Tests that move
# gigabytes get their own binary labelled "large": the sanitizer run in CI skips them.
function(kiln_tests)
  cmake_parse_arguments(ARG "" "NAME;LABEL" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_LABEL)
    set(ARG_LABEL unit)
  endif()
  if(NOT KILN_BUILD_TESTS)
    return()
  endif()
  set(target kiln_${ARG_NAME}_tests)
  add_executable(${target} ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${target} PRIVATE ${KILN_WARNINGS})
  target_link_libraries(${target} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${target} PROPERTIES LABELS ${ARG_LABEL} DISCOVERY_TIMEOUT 60)
  set_property(GLOBAL APPEND PROPERTY KILN_TEST_TARGETS_${ARG_LABEL} ${target})
endfunction()

# kiln_add_label_targets(<label>...): a target kiln_<label>_tests that builds exactly the test
# binaries of that label, so `ctest -L unit` can run after building only what it runs (CI's
# sanitizer step: `scripts/test --preset asan --target kiln_unit_tests -L unit`). Called once,
# after every kiln_tests().
function(kiln_add_label_targets)
  foreach(label IN LISTS ARGN)
    get_property(targets GLOBAL PROPERTY KILN_TEST_TARGETS_${label})
    if(targets)
      add_custom_target(kiln_${label}_tests DEPENDS ${targets})
    endif()
  endforeach()
endfunction()

# Every public header must compile on its own (seastar's checkheaders): one translation unit per
# header that includes nothing else, compiled as part of the default build.
function(kiln_add_header_check)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR}/include
       CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/kiln/*.h)
  set(sources "")
  foreach(header IN LISTS headers)
    string(REPLACE "/" "__" stem "${header}")
    set(tu ${CMAKE_CURRENT_BINARY_DIR}/header_check/${stem}.cc)
    file(CONFIGURE OUTPUT ${tu} CONTENT "#include <${header}>\n")
    list(APPEND sources ${tu})
  endforeach()
  add_library(kiln_header_check OBJECT ${sources})
  target_include_directories(kiln_header_check PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(kiln_header_check PRIVATE ${KILN_WARNINGS})
  # The headers may name third-party types; borrow their include paths from the libraries.
  target_link_libraries(kiln_header_check PRIVATE kiln_base kiln_obs kiln_comm kiln_ops kiln_preflight)
endfunction()
