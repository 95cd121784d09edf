# SPDX-License-Identifier: Apache-2.0
# The documentation: no merge-conflict markers in tracked files, and every
# flag, metric and HTTP endpoint README.md and docs/ name exists in the
# tools' --help and a running daemon (tests/test_docs.sh).
add_test(NAME test_merge_markers
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_docs.sh markers
          ${PROJECT_SOURCE_DIR})
add_test(NAME test_docs
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_docs.sh truth
          ${PROJECT_SOURCE_DIR} $<TARGET_FILE:mlpd> $<TARGET_FILE:mlpctl>
          $<TARGET_FILE:mlpd-bench>)
set_tests_properties(test_merge_markers test_docs PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 180)
set_tests_properties(test_docs PROPERTIES ENVIRONMENT "${MLPD_TEST_ENV}")
# The experiments kept as patches (bench/ab/*.patch, each with its A/B
# recipe) still apply to this tree: a refactor that moves what they patch
# must carry them along.
add_test(NAME test_ab_patches
  COMMAND sh -c "command -v git >/dev/null || exit 77; cd '${PROJECT_SOURCE_DIR}' && for p in bench/ab/*.patch; do git apply --check \"$p\" || { echo \"$p no longer applies\"; exit 1; }; done"
  )
set_tests_properties(test_ab_patches PROPERTIES SKIP_RETURN_CODE 77)
