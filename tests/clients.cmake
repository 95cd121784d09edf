# SPDX-License-Identifier: Apache-2.0
# Client suite: libmlpd-client against a scripted fake daemon and against
# the real one, the Python package's tests, its generated protobuf module,
# and the installed library as a third party would use it.

# What the suites that go through the client library share (clientutil.h).
add_library(mlpd_clientutil STATIC clientutil.c)
target_link_libraries(mlpd_clientutil PUBLIC mlpd_client mlpd_testutil)

# The fake daemon speaks nanopb itself (mlpd_proto) on a thread.
mlpd_test(test_client_wire LIBS mlpd_client mlpd_proto Threads::Threads
  TIMEOUT 120)

# Starts build/daemon/mlpd on a temporary socket; compares with the
# in-process CPU engine (mlpd_core, through mlpd_testutil).
mlpd_test(test_client LIBS mlpd_clientutil mlpd_daemonutil TIMEOUT 300)
add_dependencies(test_client mlpd)

# pytest under Debian's python3 (skipped, 77, without pytest or protobuf).
add_test(NAME test_client_python
  COMMAND sh ${PROJECT_SOURCE_DIR}/clients/python/run_tests.sh
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_client_python PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 600
  ENVIRONMENT "MLPD_BIN=$<TARGET_FILE:mlpd>;${MLPD_TEST_ENV}")

# The committed mlpd_pb2.py is what protoc makes of proto/mlpd.proto.
add_test(NAME test_client_python_pb2
  COMMAND sh ${PROJECT_SOURCE_DIR}/clients/python/check_pb2.sh
          ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/pb2-regen)
set_tests_properties(test_client_python_pb2 PROPERTIES SKIP_RETURN_CODE 77)

# Installs the client library's components into a scratch prefix and uses
# them as a third party would: every function the public headers declare,
# pkg-config's flags, and find_package(mlpd-client) in a CMake project.
add_test(NAME test_client_install
  COMMAND sh ${PROJECT_SOURCE_DIR}/clients/c/check_install.sh
          ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/client-install
          ${CMAKE_C_COMPILER} "${MLPD_SANITIZE}" ${PROJECT_SOURCE_DIR}
          ${MLPD_CLIENT_SOVERSION})
set_tests_properties(test_client_install PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 120 ENVIRONMENT "${MLPD_TEST_ENV}")

# mlpctl and mlpd-bench end to end, the README's main command included.
add_test(NAME test_client_tools
  COMMAND sh ${PROJECT_SOURCE_DIR}/clients/test_tools.sh
          $<TARGET_FILE:mlpd> $<TARGET_FILE:mlpctl> $<TARGET_FILE:mlpd-bench>
          ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/client-tools)
set_tests_properties(test_client_tools PROPERTIES
  TIMEOUT 300 ENVIRONMENT "${MLPD_TEST_ENV}")

# Shared-memory regions through the library against the real daemon:
# registration and its refusals, windows, outputs in place bit for bit,
# limits, unregistering in use, a client gone mid-request.
mlpd_test(test_shm LIBS mlpd_clientutil mlpd_daemonutil TIMEOUT 300)
add_dependencies(test_shm mlpd)
