# SPDX-License-Identifier: Apache-2.0
# Metrics (Prometheus text) and the HTTP listener's address rules (http.c;
# httpconn.c serves it). Included by daemon/CMakeLists.txt.
target_sources(mlpd_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/http.c)
target_link_libraries(mlpd_core PUBLIC PkgConfig::UV mlpd_http_parser)
