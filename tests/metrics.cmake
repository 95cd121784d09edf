# SPDX-License-Identifier: Apache-2.0
# Metrics rendering, and the daemon's HTTP listener (probes, /metrics,
# connection rules, addresses) on the real daemon.
mlpd_test(test_metrics TIMEOUT 60)
# Count allocations made by mlpd's own code (see test_no_allocation).
target_link_options(test_metrics PRIVATE
  -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc)
mlpd_test(test_http LIBS mlpd_daemonutil TIMEOUT 300)
add_dependencies(test_http mlpd)
