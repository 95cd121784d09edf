# SPDX-License-Identifier: Apache-2.0
# deploy.cmake - install rules for the systemd units, sysusers/tmpfiles
# snippets, /etc/default/mlpd, man pages, the digits model and the docs, and
# the CPack configuration that turns the install components into Debian
# packages:
#
#   package             component  contents
#   mlpd                daemon     mlpd, mlpctl, mlpd-bench, CPU engine, the
#                                  units (service + socket), sysusers,
#                                  tmpfiles, /etc/default/mlpd, man pages,
#                                  the digits model, mlpd.proto, docs,
#                                  NOTICE
#   mlpd-cuda           cuda       the CUDA engine plugin, ${libdir}/mlpd/
#                                  mlpd-cuda.so (only with the CUDA toolkit)
#   libmlpd-client1     libclient  libmlpd-client.so.1 (shlibs, ldconfig
#                                  trigger)
#   libmlpd-client-dev  dev        headers, .so link, .a, pkg-config file,
#                                  CMake package
#   python3-mlpd        python     the Python client in dist-packages
#
#   cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DCMAKE_INSTALL_PREFIX=/usr -DMLPD_BUILD_TESTS=OFF
#   cmake --build build-deb && (cd build-deb && cpack -G DEB)
#
# mlpd installs without any CUDA package: it links no CUDA library and only
# Suggests mlpd-cuda, which alone depends on NVIDIA's CUDA runtime and
# cuBLASLt packages. Every package carries /usr/share/doc/<package>/
# copyright (DEP-5: Apache-2.0 for the project, CC-BY-4.0 for the digits
# data) and changelog.Debian.gz, mlpd the NOTICE too; binaries are stripped; Depends come
# from dpkg-shlibdeps. tests/test_deploy.sh checks the result and runs
# lintian on it. Included from the top-level CMakeLists.txt (OPTIONAL),
# after the targets whose install() rules it packages. Not here: signing, a
# source package, or enabling the service (it needs a model first; see
# deploy/README.md).

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
    "Where the units are installed (relative to the prefix or absolute)")
set(MLPD_SYSUSERSDIR "lib/sysusers.d" CACHE STRING
    "Where the sysusers.d snippet is installed")
set(MLPD_TMPFILESDIR "lib/tmpfiles.d" CACHE STRING
    "Where the tmpfiles.d snippet is installed")

install(FILES ${MLPD_DEPLOY_DIR}/mlpd.service ${MLPD_DEPLOY_DIR}/mlpd.socket
        DESTINATION ${MLPD_SYSTEMD_UNITDIR} COMPONENT daemon)
install(FILES ${MLPD_DEPLOY_DIR}/mlpd.sysusers
        DESTINATION ${MLPD_SYSUSERSDIR} RENAME mlpd.conf COMPONENT daemon)
install(FILES ${MLPD_DEPLOY_DIR}/mlpd.tmpfiles
        DESTINATION ${MLPD_TMPFILESDIR} RENAME mlpd.conf COMPONENT daemon)
# /etc/default/mlpd, which the unit reads. Where it goes is decided when
# installing, from the prefix then in force, so that `cmake --install
# --prefix DIR` stays inside DIR: PREFIX/etc/default, except that a prefix
# ending in /usr puts it in the etc/ beside that usr/ (/usr -> /etc, as
# GNUInstallDirs does; cpack's staging .../usr -> .../etc). An existing
# copy that differs is the operator's: it is kept, and the new one is
# written beside it as mlpd.new. In the .deb it is a conffile (below), so
# dpkg asks before replacing an edited one.
install(CODE "
  set(_pfx \"\${CMAKE_INSTALL_PREFIX}\")
  string(REGEX REPLACE \"/+$\" \"\" _pfx \"\${_pfx}\")
  if(_pfx MATCHES \"^(.*)/usr$\")
    set(_dir \"\${CMAKE_MATCH_1}/etc/default\")
  else()
    set(_dir \"\${_pfx}/etc/default\")
  endif()
  set(_dst \"\$ENV{DESTDIR}\${_dir}/mlpd\")
  set(_src \"${MLPD_DEPLOY_DIR}/mlpd.default\")
  set(_keep OFF)
  if(EXISTS \"\${_dst}\")
    file(READ \"\${_dst}\" _old)
    file(READ \"\${_src}\" _new)
    if(NOT _old STREQUAL _new)
      set(_keep ON)
    endif()
  endif()
  if(_keep)
    message(STATUS \"Keeping edited: \${_dst} (new one: \${_dst}.new)\")
    configure_file(\"\${_src}\" \"\${_dst}.new\" COPYONLY)
  else()
    # file(INSTALL) puts DESTDIR in front by itself.
    file(INSTALL DESTINATION \"\${_dir}\" TYPE FILE
         RENAME mlpd FILES \"\${_src}\")
  endif()
" COMPONENT daemon)
install(FILES ${PROJECT_SOURCE_DIR}/models/digits.safetensors
              ${PROJECT_SOURCE_DIR}/models/digits-heldout.safetensors
        DESTINATION ${CMAKE_INSTALL_DATADIR}/mlpd COMPONENT daemon)
# The unit's Documentation= points here.
install(FILES ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL COMPONENT daemon)
install(FILES ${MLPD_DEPLOY_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME deploy.md
        COMPONENT daemon)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT daemon
        FILES_MATCHING PATTERN "*.md")
# Apache-2.0, section 4(d): the NOTICE goes with the binaries. The licence
# text itself is in every package's copyright file (Debian points at
# /usr/share/common-licenses/Apache-2.0 rather than shipping another copy,
# which lintian flags); a plain `cmake --install` gets LICENSE too, from a
# component no package holds.
install(FILES ${PROJECT_SOURCE_DIR}/NOTICE
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT daemon)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT license)
install(DIRECTORY ${MLPD_DEPLOY_DIR}/examples/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT daemon)

# The Python client: pure Python, straight into Debian's dist-packages.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/clients/python/mlpd_client
        DESTINATION lib/python3/dist-packages COMPONENT python
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

# Man pages and the changelog, compressed as Debian wants them (gzip -9n:
# no name or time stamp, so the packages are reproducible).
set(MLPD_DEB_GEN ${PROJECT_BINARY_DIR}/deploy-deb)
file(MAKE_DIRECTORY ${MLPD_DEB_GEN})
find_program(MLPD_GZIP gzip)
function(mlpd_gzip src dst)
  if(MLPD_GZIP)
    execute_process(COMMAND ${MLPD_GZIP} -9nc ${src} OUTPUT_FILE ${dst}
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "gzip ${src} failed")
    endif()
  else()
    file(ARCHIVE_CREATE OUTPUT ${dst} PATHS ${src} FORMAT raw
         COMPRESSION GZip)
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
endfunction()
foreach(page mlpd.8 mlpctl.1 mlpd-bench.1)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" sec ${page})
  mlpd_gzip(${MLPD_DEPLOY_DIR}/man/${page} ${MLPD_DEB_GEN}/${page}.gz)
  install(FILES ${MLPD_DEB_GEN}/${page}.gz
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man${sec} COMPONENT daemon)
endforeach()
mlpd_gzip(${MLPD_DEPLOY_DIR}/debian/changelog
          ${MLPD_DEB_GEN}/changelog.Debian.gz)

# ---- CPack: one .deb per component ---------------------------------------
set(MLPD_DEB_COMPONENTS daemon libclient dev python)
set(MLPD_DEB_PKG_daemon mlpd)
set(MLPD_DEB_PKG_libclient libmlpd-client1)
set(MLPD_DEB_PKG_dev libmlpd-client-dev)
set(MLPD_DEB_PKG_python python3-mlpd)
if(TARGET mlpd_cuda)
  list(APPEND MLPD_DEB_COMPONENTS cuda)
  set(MLPD_DEB_PKG_cuda mlpd-cuda)
endif()
foreach(c ${MLPD_DEB_COMPONENTS})
  install(FILES ${MLPD_DEPLOY_DIR}/debian/copyright
                ${MLPD_DEB_GEN}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${MLPD_DEB_PKG_${c}}
          COMPONENT ${c})
endforeach()

set(CPACK_PACKAGE_NAME mlpd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "mlpd")
set(CPACK_PACKAGE_CONTACT "mlpd maintainers <maintainers@mlpd.example.org>")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
# Debian revision: 0.1.0-1, matching debian/changelog's first entry.
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(MLPD_DEB_VERSION "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")
file(STRINGS ${MLPD_DEPLOY_DIR}/debian/changelog _cl LIMIT_COUNT 1)
if(NOT _cl MATCHES "^mlpd \\(${MLPD_DEB_VERSION}\\) ")
  message(FATAL_ERROR "deploy/debian/changelog's first entry is not "
                      "${MLPD_DEB_VERSION}: add one for this version")
endif()
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${MLPD_DEB_COMPONENTS})
set(CPACK_COMPONENTS_GROUPING IGNORE)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
foreach(c ${MLPD_DEB_COMPONENTS})
  string(TOUPPER ${c} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${MLPD_DEB_PKG_${c}})
endforeach()

# mlpd: daemon, tools, CPU engine, units.
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION "misc")
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
"inference daemon for MLP models (CPU engine, GPU through mlpd-cuda)
mlpd serves multilayer perceptrons from .safetensors files over a Unix
socket with protobuf frames, batching concurrent requests dynamically.
This package holds the daemon with its CPU engine (OpenBLAS), the mlpctl
and mlpd-bench tools, the systemd service and socket units and an example
model. The NVIDIA GPU engine (cuBLASLt) is in mlpd-cuda; without it the
daemon serves on the CPU.")
set(CPACK_DEBIAN_DAEMON_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_DAEMON_PACKAGE_SUGGESTS "mlpd-cuda")
# /etc/default/mlpd is the operator's: dpkg keeps their edits on upgrade.
file(WRITE ${MLPD_DEB_GEN}/conffiles "/etc/default/mlpd\n")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
    ${MLPD_DEPLOY_DIR}/debian/mlpd/postinst
    ${MLPD_DEPLOY_DIR}/debian/mlpd/prerm
    ${MLPD_DEPLOY_DIR}/debian/mlpd/postrm
    ${MLPD_DEB_GEN}/conffiles)

# mlpd-cuda: the plugin. Its CUDA libraries come from NVIDIA's apt
# repository (not Debian's), named by toolkit version: dpkg-shlibdeps cannot
# name them, so the Depends are written here. The plugin works only with
# the mlpd of the same build.
if(TARGET mlpd_cuda)
  set(_cuda_v "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(MLPD_DEB_CUDA_DEPENDS "cuda-cudart-${_cuda_v}, libcublas-${_cuda_v}"
      CACHE STRING "Debian dependencies for the CUDA runtime libraries")
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION "contrib/misc")
  set(CPACK_COMPONENT_CUDA_DESCRIPTION
"NVIDIA GPU engine for the mlpd inference daemon
The engine mlpd loads for --device auto and --device cuda: every layer one
fused cuBLASLt GEMM + bias (+GELU) kernel, planned and autotuned at
startup, batches run as CUDA graphs, on one or all GPUs of the host. It
needs NVIDIA's CUDA runtime and cuBLASLt and the NVIDIA driver.")
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS
      "mlpd (= ${MLPD_DEB_VERSION}), ${MLPD_DEB_CUDA_DEPENDS}, libc6 (>= 2.34), libgcc-s1, libstdc++6")
  set(CPACK_DEBIAN_CUDA_PACKAGE_ENHANCES "mlpd")
endif()

# libmlpd-client1: the shared library; shlibs and the ldconfig trigger.
install(FILES ${MLPD_DEPLOY_DIR}/debian/libmlpd-client1/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME libmlpd-client1 COMPONENT libclient)
set(CPACK_DEBIAN_LIBCLIENT_PACKAGE_SECTION "libs")
set(CPACK_COMPONENT_LIBCLIENT_DESCRIPTION
"C client library for the mlpd inference daemon
libmlpd-client talks to mlpd over its Unix socket: blocking and pipelined
inference requests, health, metrics and model information, in f32, f16
and bf16.")
set(CPACK_DEBIAN_LIBCLIENT_PACKAGE_CONTROL_EXTRA
    ${MLPD_DEPLOY_DIR}/debian/libmlpd-client1/triggers
    ${MLPD_DEPLOY_DIR}/debian/libmlpd-client1/postinst
    ${MLPD_DEPLOY_DIR}/debian/libmlpd-client1/postrm)

# libmlpd-client-dev.
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION "libdevel")
set(CPACK_COMPONENT_DEV_DESCRIPTION
"C client library for the mlpd inference daemon (development files)
Headers (mlpd/mlpd_client.h), the static library, the pkg-config file
(mlpd-client) and the CMake package (find_package(mlpd-client)) for
libmlpd-client.")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libmlpd-client1 (= ${MLPD_DEB_VERSION}), libnanopb-dev")

# python3-mlpd.
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION "python")
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
"Python client for the mlpd inference daemon
The mlpd_client module talks to mlpd over its Unix socket with protobuf:
blocking and pipelined inference (numpy arrays when numpy is installed),
health, metrics and model information.")
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3:any, python3-protobuf")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-numpy")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA
    ${MLPD_DEPLOY_DIR}/debian/python3-mlpd/postinst
    ${MLPD_DEPLOY_DIR}/debian/python3-mlpd/prerm)
include(CPack)
