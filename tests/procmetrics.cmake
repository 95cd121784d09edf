# SPDX-License-Identifier: Apache-2.0
# Process metrics (daemon/procmetrics.h), linking only mlpd_procmetrics and
# mlpd_base.
add_executable(test_procmetrics test_procmetrics.c)
target_link_libraries(test_procmetrics PRIVATE mlpd_procmetrics
  PkgConfig::CMOCKA)
add_test(NAME test_procmetrics COMMAND test_procmetrics)
set_tests_properties(test_procmetrics PROPERTIES TIMEOUT 60
  ENVIRONMENT "${MLPD_TEST_ENV}")
