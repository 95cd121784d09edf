# SPDX-License-Identifier: Apache-2.0
# mlpd's own heap allocations counted and failed one at a time
# (tests/test_alloc.sh with the LD_PRELOAD library tests/alloc_fault.c):
# the hot path allocates nothing, and no allocation failure at start-up or
# while serving crashes, hangs or silently drops a request. The preload
# needs a build without the sanitizers, which own malloc: in a sanitizer
# build the test reports itself skipped, and tests/run runs it in a plain
# build of its own.
if(MLPD_SANITIZE)
  set(_alloc_so none)
else()
  add_library(alloc_fault MODULE alloc_fault.c)
  set(_alloc_so $<TARGET_FILE:alloc_fault>)
endif()
add_test(NAME test_alloc
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_alloc.sh
          $<TARGET_FILE:mlpd> $<TARGET_FILE:mlpctl> $<TARGET_FILE:mlpd-bench>
          ${_alloc_so} ${PROJECT_SOURCE_DIR}/models
          ${CMAKE_CURRENT_BINARY_DIR}/alloc)
set_tests_properties(test_alloc PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1800
  RUN_SERIAL TRUE)
