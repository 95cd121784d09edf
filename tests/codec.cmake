# SPDX-License-Identifier: Apache-2.0
# Suites that link one library and cmocka, nothing of the serving core: the
# codec (request decoding with its strict wire pass, response encoding; the
# pass alone on every field type), the HTTP listener's request side, the
# Open Inference Protocol codec, and
# the tools' row files.
function(mlpd_unit_test name)
  cmake_parse_arguments(T "" "" "LIBS" ${ARGN})
  add_executable(${name} ${name}.c)
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 60
    ENVIRONMENT "${MLPD_TEST_ENV}")
endfunction()

mlpd_unit_test(test_rpc LIBS mlpd_codec)
mlpd_unit_test(test_pbcheck LIBS mlpd_codec)
mlpd_unit_test(test_httpreq LIBS mlpd_httpreq)
mlpd_unit_test(test_oip LIBS mlpd_oip)
mlpd_unit_test(test_rowsfile LIBS mlpd_base)
