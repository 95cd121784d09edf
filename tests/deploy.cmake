# deploy/: the systemd unit and its companions, and the .deb built by cpack
# (both skipped, exit 77, where the tools are missing or cannot run).
add_test(NAME test_deploy_units
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy.sh units
          ${PROJECT_SOURCE_DIR} $<TARGET_FILE:mlpd>)
add_test(NAME test_deploy_deb
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_deploy.sh deb
          ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test_deploy_units test_deploy_deb PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 300)
