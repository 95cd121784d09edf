# SPDX-License-Identifier: Apache-2.0
# The error table (daemon/error.h, MLPD_CLIENT_ERRNO_MAP in the public
# mlpd/mlpd_common.h): against the daemon's error object, and against
# libmlpd-client.so alone, which names only the client's codes.
mlpd_test(test_error ENGINE_ONLY)

add_executable(test_error_client test_error.c)
target_compile_definitions(test_error_client PRIVATE MLPD_TEST_CLIENT_LIB)
# The daemon's headers for the table's daemon half; nothing of the daemon's
# is linked, so every name comes from the shared library.
target_include_directories(test_error_client PRIVATE
  ${PROJECT_SOURCE_DIR}/daemon)
target_link_libraries(test_error_client PRIVATE mlpd_client PkgConfig::CMOCKA)
add_test(NAME test_error_client COMMAND test_error_client)
set_tests_properties(test_error_client PROPERTIES
  TIMEOUT 60 ENVIRONMENT "${MLPD_TEST_ENV}")

# Every symbol libmlpd-client.so exports is a function its public headers
# declare, with the library's symbol version, and every such function is
# exported (mlpd_errf, the dtype conversions and the daemon's modules it
# compiles in stay hidden).
add_test(NAME test_client_exports
  COMMAND sh ${PROJECT_SOURCE_DIR}/clients/c/check_exports.sh
          $<TARGET_FILE:mlpd_client> ${PROJECT_SOURCE_DIR}/clients/c/include
          ${CMAKE_C_COMPILER} ${MLPD_CLIENT_SOVERSION})
set_tests_properties(test_client_exports PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 60)
