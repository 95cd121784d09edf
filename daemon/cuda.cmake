# The CUDA engine, built when the top level found a CUDA toolkit with nvcc:
# engine_cuda.c (life cycle, pipeline), cuda_setup.c (device, weights,
# buffers, descriptors), cuda_algos.c (cuBLASLt candidates), cuda_tune.c
# (choosing plans), cuda_graph.c (layers and graph capture),
# cuda_plancache.c (the plan cache), cuda_check.c (errors), and mlpd's own
# kernels (cuda_kernels.cu; the small-batch and fused kernels one .cu per
# mode, so they compile in parallel). The C code talks to the runtime and
# cuBLASLt only; the driver API is reached through
# cudaGetDriverEntryPointByVersion.
#
# One set of (PIC) objects, two ways to use them:
#   mlpd-cuda.so      (target mlpd_cuda) the plugin the daemon loads for
#                     --device auto|cuda (plugin.h), installed in
#                     ${libdir}/mlpd by package mlpd-cuda. It alone links
#                     libcudart and libcublasLt; the daemon links neither.
#   mlpd_engine_cuda  a static library with the engine linked in, for the
#                     CUDA tests and the benchmark (they call engine_cuda.h's
#                     extras directly). Linking it means "the CUDA engine is
#                     built in": engine.c then uses it instead of loading
#                     the plugin, and MLPD_HAVE_CUDA is defined.
if(NOT MLPD_HAVE_CUDA)
  return()
endif()

# The engine's sources: one list, extended as the engine grows.
set(MLPD_CUDA_SOURCES
  engine_cuda.c
  cuda_check.c
  cuda_setup.c
  cuda_algos.c
  cuda_graph.c
  cuda_tune.c
  cuda_plancache.c
  cuda_kernels.cu
  cuda_k_bf16.cu
  cuda_k_f16.cu
  cuda_k_fp8.cu
)
list(TRANSFORM MLPD_CUDA_SOURCES PREPEND ${CMAKE_CURRENT_LIST_DIR}/)

# One shared cudart for the engine and every program that links it: mixing
# the static and the shared runtime gives two CUDA states. The cache
# variable reaches targets in other directories; without it CMake adds
# nvcc's default -lcudart_static.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared CACHE STRING
    "cudart for targets with CUDA code: Shared, as mlpd_engine_cuda links it")

add_library(mlpd_engine_cuda_obj OBJECT ${MLPD_CUDA_SOURCES})
set_target_properties(mlpd_engine_cuda_obj PROPERTIES
  POSITION_INDEPENDENT_CODE ON CUDA_RUNTIME_LIBRARY Shared)
# Headers and definitions only: an object library links nothing, so the
# plugin holds no copy of the daemon's modules (it calls the executable's).
target_link_libraries(mlpd_engine_cuda_obj PUBLIC mlpd_engine
  CUDA::cudart CUDA::cublasLt)
target_compile_options(mlpd_engine_cuda_obj PRIVATE
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
if(MLPD_WERROR)
  target_compile_options(mlpd_engine_cuda_obj PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>")
endif()

# The plugin. Its RUNPATH stays empty: libcudart.so.13 and libcublasLt.so.13
# come from the dynamic linker's path (NVIDIA's packages register theirs).
mlpd_add_engine_plugin(mlpd_cuda KIND cuda OBJECTS mlpd_engine_cuda_obj
  LIBS CUDA::cudart CUDA::cublasLt)
install(TARGETS mlpd_cuda LIBRARY DESTINATION ${MLPD_PLUGIN_INSTALL_DIR}
  COMPONENT cuda)

# The engine linked in. --undefined pulls the member that defines the ops
# into every program linking this, so engine.c's weak reference finds it
# even in a program that calls nothing else of the engine.
add_library(mlpd_engine_cuda STATIC $<TARGET_OBJECTS:mlpd_engine_cuda_obj>)
set_target_properties(mlpd_engine_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
target_link_libraries(mlpd_engine_cuda PUBLIC mlpd_engine
  CUDA::cudart CUDA::cublasLt)
target_link_options(mlpd_engine_cuda INTERFACE
  "LINKER:--undefined=mlpd_engine_cuda_ops")
target_compile_definitions(mlpd_engine_cuda PUBLIC MLPD_HAVE_CUDA)
