# SPDX-License-Identifier: Apache-2.0
# The option parser (daemon/opts.c) in-process, and the command lines of
# mlpd, mlpctl and mlpd-bench that are built on it (run as programs).
mlpd_test(test_opts ENGINE_ONLY TIMEOUT 120)
add_dependencies(test_opts mlpd mlpctl mlpd-bench)
