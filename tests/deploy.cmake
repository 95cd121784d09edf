# SPDX-License-Identifier: Apache-2.0
# deploy/: the systemd units, the man pages and their companions; the
# packages built by cpack, their layout, and lintian over them (each
# skipped, exit 77, where the tools are missing or cannot run).
add_test(NAME test_deploy_units
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy.sh units
          ${PROJECT_SOURCE_DIR} $<TARGET_FILE:mlpd> $<TARGET_FILE:mlpctl>
          $<TARGET_FILE:mlpd-bench>)
add_test(NAME test_deploy_deb
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy.sh deb
          ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_test(NAME test_deploy_lintian
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy.sh lintian
          ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test_deploy_units test_deploy_deb test_deploy_lintian
  PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
