# SPDX-License-Identifier: Apache-2.0
# The daemon's own suites: batching policy (unit, fake clock) and the real
# daemon in a child process (framing, bad input, concurrency, lifecycle).
add_library(mlpd_daemonutil STATIC daemonutil.c httputil.c)
target_link_libraries(mlpd_daemonutil PUBLIC mlpd_testutil mlpd_proto)
target_compile_definitions(mlpd_daemonutil PRIVATE
  MLPD_BINARY_DIR="${PROJECT_BINARY_DIR}")
mlpd_test(test_batcher)
mlpd_test(test_listen)
mlpd_test(test_board)
mlpd_test(test_modeldir)
# flow.c's window rule alone, against stand-ins for the scheduler and the
# server (the test defines them): ENGINE_ONLY, with flow.c compiled in.
mlpd_test(test_flow_window ENGINE_ONLY
  SOURCES test_flow_window.c ${PROJECT_SOURCE_DIR}/daemon/flow.c
  LIBS PkgConfig::UV mlpd_proto)
mlpd_test(test_pin)
mlpd_test(test_bufcache)
mlpd_test(test_bulk)
mlpd_test(test_daemon LIBS mlpd_daemonutil TIMEOUT 600)
mlpd_test(test_flow LIBS mlpd_daemonutil TIMEOUT 600)
add_dependencies(test_flow mlpd)
# Its floods check waits against a bound derived from the daemon's own
# measured rate: another suite taking the cores mid-flood slows every batch
# after the estimate was made (on the 2-core machine under ctest -j2, one
# run in about seven waited 199 ms against 171). It runs alone.
set_tests_properties(test_flow PROPERTIES RUN_SERIAL TRUE)
add_dependencies(test_daemon mlpd)
mlpd_test(test_lifecycle LIBS mlpd_daemonutil TIMEOUT 600)
add_dependencies(test_lifecycle mlpd)
mlpd_test(test_access LIBS mlpd_daemonutil TIMEOUT 300)
add_dependencies(test_access mlpd)
mlpd_test(test_devices LIBS mlpd_daemonutil TIMEOUT 300)
add_dependencies(test_devices mlpd)
# Several models in one daemon (issue 16), through the client library.
mlpd_test(test_models LIBS mlpd_client mlpd_daemonutil TIMEOUT 600)
add_dependencies(test_models mlpd)
mlpd_test(test_oip_http LIBS mlpd_daemonutil PkgConfig::JANSSON TIMEOUT 300)
add_dependencies(test_oip_http mlpd)
# Everything at once (tests/soak.py): loads on every transport, reloads and
# unloads under them, abusive clients, the daemon's descriptors and exit.
# CI runs it for 20 s on the fake device; a soak is the same for minutes
# (CONTRIBUTING.md). It loads both cores, so it runs alone.
add_test(NAME test_soak
  COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/soak.py
          --build ${PROJECT_BINARY_DIR} --device fake --seconds 20
          --out ${CMAKE_CURRENT_BINARY_DIR}/soak)
set_tests_properties(test_soak PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
  RUN_SERIAL TRUE ENVIRONMENT "${MLPD_TEST_ENV}")
# The OIP's system shared memory regions (sysshm.c), on a folder of its own.
mlpd_test(test_sysshm)
mlpd_test(test_lostpages)
