# SPDX-License-Identifier: Apache-2.0
# The CUDA engine's tests: on a machine without a GPU they check the clean
# failure and CPU fallback, then report themselves skipped (exit 77). In a
# build without the CUDA toolkit the suite still appears, as skipped, with
# the reason.
if(MLPD_HAVE_CUDA)
  mlpd_test(test_engine_cuda ENGINE_ONLY LIBS mlpd_engine_cuda TIMEOUT 900)
else()
  add_test(NAME test_engine_cuda
    COMMAND sh -c "echo 'SKIP: built without the CUDA toolkit (no CUDAToolkit with nvcc found, or MLPD_WITH_CUDA=OFF)'; exit 77")
  set_tests_properties(test_engine_cuda PROPERTIES SKIP_RETURN_CODE 77)
endif()
