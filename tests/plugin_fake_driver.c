/* SPDX-License-Identifier: Apache-2.0 */
/* plugin_fake_driver.c - an empty libcuda.so.1 for test_plugin's "fake"
 * case: the loader checks that the NVIDIA driver library loads before it
 * loads the CUDA plugin, and the fake plugin needs no more of it. */
void mlpd_test_fake_driver(void);
void mlpd_test_fake_driver(void) {}
