# The CUDA engine's tests: on a machine without a GPU they check the clean
# failure and CPU fallback, then report themselves skipped (exit 77).
if(MLPD_HAVE_CUDA)
  mlpd_test(test_engine_cuda TIMEOUT 900)
endif()
