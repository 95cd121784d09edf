# deploy.cmake - install rules for the systemd units, sysusers/tmpfiles
# snippets, /etc/default/mlpd, the digits model and the docs, and the CPack
# configuration for a Debian package:
#   cmake -S . -B build -DCMAKE_INSTALL_PREFIX=/usr -DMLPD_BUILD_TESTS=OFF
#   cmake --build build && (cd build && cpack -G DEB)
# Included from the top-level CMakeLists.txt (OPTIONAL), after the targets
# whose install() rules it packages. Not here: signing, a source package,
# or enabling the service (it needs a model first; see deploy/README.md).

set(MLPD_DEPLOY_DIR ${CMAKE_CURRENT_LIST_DIR})
# cpack -G DEB installs under /usr whatever the prefix; a plain
# `cmake --install` should use /usr too, since the unit runs /usr/bin/mlpd.
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "mlpd: mlpd.service runs /usr/bin/mlpd; cmake --install "
                 "with -DCMAKE_INSTALL_PREFIX=/usr for a working unit "
                 "(cpack -G DEB always uses /usr)")
endif()

# Relative destinations land under the prefix (/usr for packages, where
# Debian 12's merged /usr makes lib/systemd/system the unit directory).
set(MLPD_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where mlpd.service is installed (relative to the prefix or absolute)")
set(MLPD_SYSUSERSDIR "lib/sysusers.d" CACHE STRING
    "Where the sysusers.d snippet is installed")
set(MLPD_TMPFILESDIR "lib/tmpfiles.d" CACHE STRING
    "Where the tmpfiles.d snippet is installed")

install(FILES ${MLPD_DEPLOY_DIR}/mlpd.service
        DESTINATION ${MLPD_SYSTEMD_UNITDIR})
install(FILES ${MLPD_DEPLOY_DIR}/mlpd.sysusers
        DESTINATION ${MLPD_SYSUSERSDIR} RENAME mlpd.conf)
install(FILES ${MLPD_DEPLOY_DIR}/mlpd.tmpfiles
        DESTINATION ${MLPD_TMPFILESDIR} RENAME mlpd.conf)
# Absolute, whatever the prefix: the unit reads /etc/default/mlpd.
set(MLPD_DEFAULTS_DIR "/etc/default" CACHE PATH
    "Where the EnvironmentFile mlpd.service reads is installed")
install(FILES ${MLPD_DEPLOY_DIR}/mlpd.default
        DESTINATION ${MLPD_DEFAULTS_DIR} RENAME mlpd)
install(FILES ${PROJECT_SOURCE_DIR}/models/digits.safetensors
              ${PROJECT_SOURCE_DIR}/models/digits-heldout.safetensors
        DESTINATION ${CMAKE_INSTALL_DATADIR}/mlpd)
# The unit's Documentation= points here.
install(FILES ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)
install(FILES ${MLPD_DEPLOY_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME deploy.md)
install(DIRECTORY ${MLPD_DEPLOY_DIR}/examples/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# ---- CPack: one binary .deb ----------------------------------------------
set(CPACK_PACKAGE_NAME mlpd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "mlpd")
set(CPACK_PACKAGE_CONTACT "mlpd maintainers <maintainers@example.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "GPU inference daemon for MLP models (cuBLASLt, CPU fallback)")
set(CPACK_PACKAGE_DESCRIPTION
    "mlpd serves multilayer perceptrons from .safetensors files over a Unix\n\
socket with protobuf frames, batching concurrent requests dynamically.\n\
It runs on NVIDIA GPUs through cuBLASLt when built with CUDA and on the\n\
CPU through OpenBLAS otherwise. Includes the systemd unit, the mlpctl\n\
client and a C client library.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_PACKAGE_SECTION "misc")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# The Debian 12 runtime libraries behind the -dev packages the build uses.
set(MLPD_DEB_DEPENDS "libuv1 (>= 1.44), libopenblas0, libjansson4")
string(APPEND MLPD_DEB_DEPENDS ", libhttp-parser2.9, libsystemd0, libc6")
if(MLPD_HAVE_CUDA)
  # CUDA's shared runtime and cuBLASLt come from NVIDIA's apt repository,
  # named by toolkit version; override for other sources.
  set(_cuda_v "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(MLPD_DEB_CUDA_DEPENDS "cuda-cudart-${_cuda_v}, libcublas-${_cuda_v}"
      CACHE STRING "Debian dependencies for the CUDA runtime libraries")
  if(MLPD_DEB_CUDA_DEPENDS)
    string(APPEND MLPD_DEB_DEPENDS ", ${MLPD_DEB_CUDA_DEPENDS}")
  endif()
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${MLPD_DEB_DEPENDS}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
# /etc/default/mlpd is the operator's: dpkg keeps their edits on upgrade.
set(MLPD_DEB_CONFFILES ${PROJECT_BINARY_DIR}/deploy-deb/conffiles)
file(WRITE ${MLPD_DEB_CONFFILES} "${MLPD_DEFAULTS_DIR}/mlpd\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${MLPD_DEPLOY_DIR}/debian/postinst
    ${MLPD_DEPLOY_DIR}/debian/prerm
    ${MLPD_DEPLOY_DIR}/debian/postrm
    ${MLPD_DEB_CONFFILES})
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
