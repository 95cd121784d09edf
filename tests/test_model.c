/* SPDX-License-Identifier: Apache-2.0 */
/* test_model.c - the safetensors loader and the MLP model built on it:
 * a file assembled byte by byte is accepted with the right layers, and each
 * kind of malformed file is rejected with the expected code and a message
 * naming the problem; random corruption never crashes (run under ASan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model.h"
#include "safetensors.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *path_for(const char *name) {
  static char p[512];
  snprintf(p, sizeof(p), "%s/%s", tu_dir, name);
  return p;
}

/* Two layers 3 -> 2 -> 1 in F32, written byte by byte: 8 + 2 + 2 + 1 floats. */
static const char good_header[] =
    "{\"__metadata__\":{\"mlpd.activations\":\"gelu_tanh,none\"},"
    "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
    "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[32,40]},"
    "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]}}";
static const float good_data[11] = {1, 2, 3, 4, 5, 6, -1, 0.5f, 7, 8, 9};

static void test_byte_by_byte_file_is_accepted(void **state) {
  (void)state;
  /* Assemble the file by hand: little-endian u64 length, JSON, data. */
  size_t hl = strlen(good_header);
  unsigned char buf[1024];
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(hl >> (8 * i));
  memcpy(buf + 8, good_header, hl);
  memcpy(buf + 8 + hl, good_data, sizeof(good_data));
  tu_write_file(path_for("good.safetensors"), buf, 8 + hl + sizeof(good_data));

  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  int rc = mlpd_model_load(&m, path_for("good.safetensors"), NULL, &err);
  if (rc != 0)
    print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(m->nlayers, 2);
  assert_int_equal(m->in_features, 3);
  assert_int_equal(m->out_features, 1);
  assert_int_equal(m->layers[0].in, 3);
  assert_int_equal(m->layers[0].out, 2);
  assert_int_equal(m->layers[0].act, MLPD_ACT_GELU_TANH);
  assert_int_equal(m->layers[1].act, MLPD_ACT_NONE);
  assert_true(m->layers[0].w[5] == 6.0f);
  assert_true(m->layers[0].b[1] == 0.5f);
  assert_true(m->layers[1].w[1] == 8.0f);
  assert_true(m->layers[1].b[0] == 9.0f);
  assert_int_equal(m->nparams, 11);
  mlpd_model_free(m);
}

static void test_naming_schemes_and_order(void **state) {
  (void)state;
  /* layers.N naming, 12 layers so that "10" must sort after "9". */
  int widths[13] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  tu_mlp_t ref;
  tu_make_mlp(&ref, path_for("layers.safetensors"), 12, widths,
              MLPD_DTYPE_BF16, 3, 1, NULL);
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(
      mlpd_model_load(&m, path_for("layers.safetensors"), NULL, &err), 0);
  assert_int_equal(m->nlayers, 12);
  for (int l = 0; l < 12; l++) {
    assert_int_equal(m->layers[l].in, widths[l]);
    assert_int_equal(m->layers[l].out, widths[l + 1]);
    /* The default: GELU on hidden layers, none on the last. */
    assert_int_equal(m->layers[l].act,
                     l < 11 ? MLPD_ACT_GELU_TANH : MLPD_ACT_NONE);
    /* BF16 -> F32 is exact. */
    assert_true(m->layers[l].w[3] == (float)ref.w[l][3]);
  }
  assert_int_equal(m->file_dtype, MLPD_DTYPE_BF16);
  mlpd_model_free(m);

  /* The override beats the default. */
  assert_int_equal(mlpd_model_load(&m, path_for("layers.safetensors"),
                                   "none,gelu,none,none,none,none,none,none,"
                                   "none,none,none,gelu_tanh",
                                   &err),
                   0);
  assert_int_equal(m->layers[0].act, MLPD_ACT_NONE);
  assert_int_equal(m->layers[1].act, MLPD_ACT_GELU_TANH);
  assert_int_equal(m->layers[11].act, MLPD_ACT_GELU_TANH);
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

/* "relu" per layer, from the metadata and from an override, and back out
 * through the activation string. */
static void test_relu_activation(void **state) {
  (void)state;
  static const char relu_header[] =
      "{\"__metadata__\":{\"mlpd.activations\":\"relu, none\"},"
      "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":"
      "[0,24]},"
      "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
      "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":"
      "[32,40]},"
      "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]}}";
  size_t hl = strlen(relu_header);
  unsigned char buf[1024];
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(hl >> (8 * i));
  memcpy(buf + 8, relu_header, hl);
  memcpy(buf + 8 + hl, good_data, sizeof(good_data));
  tu_write_file(path_for("relu.safetensors"), buf, 8 + hl + sizeof(good_data));

  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(
      mlpd_model_load(&m, path_for("relu.safetensors"), NULL, &err), 0);
  assert_int_equal(m->layers[0].act, MLPD_ACT_RELU);
  assert_int_equal(m->layers[1].act, MLPD_ACT_NONE);
  char acts[64];
  mlpd_model_act_string(m, acts, sizeof(acts));
  assert_string_equal(acts, "relu,none");
  assert_string_equal(mlpd_act_name(MLPD_ACT_RELU), "relu");
  mlpd_model_free(m);

  assert_int_equal(mlpd_model_load(&m, path_for("relu.safetensors"),
                                   "gelu,relu", &err),
                   0);
  assert_int_equal(m->layers[0].act, MLPD_ACT_GELU_TANH);
  assert_int_equal(m->layers[1].act, MLPD_ACT_RELU);
  mlpd_model_act_string(m, acts, sizeof(acts));
  assert_string_equal(acts, "gelu_tanh,relu");
  mlpd_model_free(m);

  /* Spelled only one way: "ReLU" is not an activation mlpd knows. */
  assert_int_equal(mlpd_model_load(&m, path_for("relu.safetensors"),
                                   "ReLU,none", &err),
                   MLPD_EBADMODEL);
  assert_non_null(strstr(err.msg, "unknown activation 'ReLU' for layer 0 "
                                  "(known: gelu_tanh, gelu, relu, none)"));
}

typedef struct {
  const char *name;
  const char *header;  /* NULL: raw bytes below */
  const unsigned char *raw;
  size_t raw_len;
  size_t data_len;     /* bytes of data after the header */
  int code;
  const char *needle;  /* must appear in the message */
  const char *override;
} bad_case_t;

static const unsigned char truncated[] = {0x10, 0, 0, 0, 0};
static const unsigned char len_past_end[] = {0xff, 0x00, 0, 0, 0, 0, 0, 0,
                                             '{',  '}'};
static const unsigned char len_huge[] = {0, 0, 0, 0, 0, 0, 0, 0x10, '{', '}'};
/* /etc/hostname given as a model, short and long. */
static const unsigned char text_short[] = "myhost\n";
static const unsigned char text_long[] = "build-server-07.example.org\n";

#define W(name, dt, shape, b, e)                                               \
  "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape                        \
  ",\"data_offsets\":[" #b "," #e "]}"

static const bad_case_t bad_cases[] = {
    {"truncated header length", NULL, truncated, sizeof(truncated), 0,
     MLPD_EBADMODEL, "shorter than the 8-byte header length", NULL},
    {"header length past the end", NULL, len_past_end, sizeof(len_past_end),
     0, MLPD_EBADMODEL, "runs past the end of the file", NULL},
    {"header length over the limit", NULL, len_huge, sizeof(len_huge), 0,
     MLPD_EBADMODEL, "exceeds", NULL},
    {"a short text file", NULL, text_short, sizeof(text_short) - 1, 0,
     MLPD_EBADMODEL, "not a safetensors file: it is 7 bytes", NULL},
    {"a text file", NULL, text_long, sizeof(text_long) - 1, 0,
     MLPD_EBADMODEL, "not a safetensors file: the header length", NULL},
    {"bad JSON", "{\"0.weight\": {\"dtype\": \"F32\",", NULL, 0, 0,
     MLPD_EBADMODEL, "not valid JSON", NULL},
    {"header not an object", "[1, 2, 3]", NULL, 0, 0, MLPD_EBADMODEL,
     "does not start with a JSON object", NULL},
    {"duplicate key",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("0.weight", "F32", "[1,1]",
                                                   0, 4) "}",
     NULL, 0, 4, MLPD_EBADMODEL, "duplicate", NULL},
    {"unknown dtype",
     "{" W("0.weight", "Q7", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                  8) "}",
     NULL, 0, 8, MLPD_EDTYPE, "unknown dtype 'Q7'", NULL},
    {"unsupported dtype",
     "{" W("0.weight", "F64", "[1,1]", 0, 8) "," W("0.bias", "F32", "[1]", 8,
                                                   12) "}",
     NULL, 0, 12, MLPD_EDTYPE, "dtype F64 is not supported", NULL},
    {"shape/offset mismatch",
     "{" W("0.weight", "F32", "[2,2]", 0, 12) "," W("0.bias", "F32", "[2]",
                                                    12, 20) "}",
     NULL, 0, 20, MLPD_EBADMODEL, "but data_offsets span 12 bytes", NULL},
    {"overlapping offsets",
     "{" W("0.weight", "F32", "[2,2]", 0, 16) "," W("0.bias", "F32", "[2]", 8,
                                                    16) "}",
     NULL, 0, 16, MLPD_EBADMODEL, "overlap", NULL},
    {"offsets past the end",
     "{" W("0.weight", "F32", "[2,2]", 0, 16) "," W("0.bias", "F32", "[2]",
                                                    16, 24) "}",
     NULL, 0, 20, MLPD_EBADMODEL, "past the end of the data area", NULL},
    {"hole in the data",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 8,
                                                   12) "}",
     NULL, 0, 12, MLPD_EBADMODEL, "hole", NULL},
    {"trailing bytes",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                   8) "}",
     NULL, 0, 12, MLPD_EBADMODEL, "4 trailing bytes", NULL},
    {"end before begin",
     "{" W("0.weight", "F32", "[0,1]", 4, 0) "," W("0.bias", "F32", "[1]", 4,
                                                   8) "}",
     NULL, 0, 8, MLPD_EBADMODEL, "end before begin", NULL},
    {"negative dimension",
     "{" W("0.weight", "F32", "[-1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                    8) "}",
     NULL, 0, 8, MLPD_EBADMODEL, "shape[0] is not a non-negative", NULL},
    {"empty model", "{}", NULL, 0, 0, MLPD_EBADMODEL, "empty model", NULL},
    {"missing bias",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("2.weight", "F32", "[1,1]",
                                                   4, 8) "," W("2.bias", "F32",
                                                               "[1]", 8,
                                                               12) "}",
     NULL, 0, 12, MLPD_EBADMODEL, "'0.bias': missing", NULL},
    {"bias without weight",
     "{" W("0.bias", "F32", "[1]", 0, 4) "}", NULL, 0, 4, MLPD_EBADMODEL,
     "'0.weight': missing", NULL},
    {"non-chaining layers",
     "{" W("0.weight", "F32", "[2,1]", 0, 8) "," W("0.bias", "F32", "[2]", 8,
                                                   16) "," W("2.weight", "F32",
                                                             "[1,3]", 16,
                                                             28) "," W("2.bias",
                                                                       "F32",
                                                                       "[1]",
                                                                       28,
                                                                       32) "}",
     NULL, 0, 32, MLPD_EBADMODEL,
     "'2.weight': in_features 3 does not match the previous layer's "
     "out_features 2",
     NULL},
    {"weight not 2-D",
     "{" W("0.weight", "F32", "[4]", 0, 16) "," W("0.bias", "F32", "[4]", 16,
                                                  32) "}",
     NULL, 0, 32, MLPD_EBADMODEL, "weight must be 2-D", NULL},
    {"bias of the wrong length",
     "{" W("0.weight", "F32", "[2,1]", 0, 8) "," W("0.bias", "F32", "[3]", 8,
                                                   20) "}",
     NULL, 0, 20, MLPD_EBADMODEL, "bias must be 1-D [2]", NULL},
    {"stray tensor",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                   8) "," W("embed", "F32",
                                                            "[1]", 8, 12) "}",
     NULL, 0, 12, MLPD_EBADMODEL, "'embed': not a layer tensor", NULL},
    {"mixed naming",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                   8) "," W("layers.1.weight",
                                                            "F32", "[1,1]", 8,
                                                            12) "}",
     NULL, 0, 12, MLPD_EBADMODEL, "mixes", NULL},
    {"activation count mismatch",
     "{\"__metadata__\":{\"mlpd.activations\":\"gelu,none\"}," W(
         "0.weight", "F32", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                 8) "}",
     NULL, 0, 8, MLPD_EBADMODEL, "more activations than the 1 layers", NULL},
    {"unknown activation in override",
     "{" W("0.weight", "F32", "[1,1]", 0, 4) "," W("0.bias", "F32", "[1]", 4,
                                                   8) "}",
     NULL, 0, 8, MLPD_EBADMODEL, "unknown activation 'swish'", "swish"},
    {"metadata not strings",
     "{\"__metadata__\":{\"a\":1}," W("0.weight", "F32", "[1,1]", 0,
                                      4) "," W("0.bias", "F32", "[1]", 4,
                                               8) "}",
     NULL, 0, 8, MLPD_EBADMODEL, "is not a string", NULL},
};

static void test_malformed_files_are_rejected(void **state) {
  (void)state;
  unsigned char zeros[64] = {0};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(bad_cases); i++) {
    const bad_case_t *c = &bad_cases[i];
    const char *p = path_for("bad.safetensors");
    if (c->header != NULL)
      tu_write_safetensors(p, c->header, zeros, c->data_len);
    else
      tu_write_file(p, c->raw, c->raw_len);
    mlpd_err_t err = {0};
    mlpd_model_t *m = (mlpd_model_t *)&err; /* must be reset to NULL */
    int rc = mlpd_model_load(&m, p, c->override, &err);
    if (rc != c->code || strstr(err.msg, c->needle) == NULL ||
        strstr(err.msg, p) == NULL)
      fail_msg("case '%s': rc %d (want %d), message \"%s\" (want the path "
               "and \"%s\")",
               c->name, rc, c->code, err.msg, c->needle);
    assert_null(m);
  }
  print_message("%zu malformed files rejected\n", MLPD_ARRAY_SIZE(bad_cases));
}

static void test_missing_file(void **state) {
  (void)state;
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  int rc = mlpd_model_load(&m, path_for("does-not-exist"), NULL, &err);
  assert_int_equal(rc, -ENOENT);
  assert_non_null(strstr(err.msg, "does-not-exist"));
  assert_null(m);
}

/* Truncations and byte flips of a valid file must fail cleanly or load a
 * model; ASan turns any out-of-bounds read into a failure. */
static void test_random_corruption_never_crashes(void **state) {
  (void)state;
  size_t hl = strlen(good_header);
  size_t len = 8 + hl + sizeof(good_data);
  unsigned char *orig = malloc(len), *buf = malloc(len);
  assert_non_null(orig);
  assert_non_null(buf);
  for (int i = 0; i < 8; i++)
    orig[i] = (unsigned char)(hl >> (8 * i));
  memcpy(orig + 8, good_header, hl);
  memcpy(orig + 8 + hl, good_data, sizeof(good_data));
  tu_rng_t rng;
  tu_rng_seed(&rng, 42);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 20000; iter++) {
    memcpy(buf, orig, len);
    size_t n = len;
    int flips = 1 + (int)(tu_rng_u64(&rng) % 4);
    for (int f = 0; f < flips; f++)
      buf[tu_rng_u64(&rng) % len] = (unsigned char)tu_rng_u64(&rng);
    if (tu_rng_u64(&rng) % 4 == 0)
      n = tu_rng_u64(&rng) % len;
    /* A copy of exactly n bytes, so ASan sees the true end. */
    unsigned char *exact = malloc(n ? n : 1);
    assert_non_null(exact);
    memcpy(exact, buf, n);
    mlpd_safetensors_t st;
    mlpd_err_t err = {0};
    if (mlpd_safetensors_open_buffer(&st, exact, n, "fuzz", &err) == 0) {
      mlpd_model_t *m = NULL;
      if (mlpd_model_from_safetensors(&m, &st, NULL, &err) == 0) {
        accepted++;
        mlpd_model_free(m);
      } else {
        rejected++;
      }
      mlpd_safetensors_close(&st);
    } else {
      assert_true(err.code < 0);
      assert_true(err.msg[0] != '\0');
      rejected++;
    }
    free(exact);
  }
  print_message("corruption: %d loaded, %d rejected\n", accepted, rejected);
  assert_true(rejected > 10000);
  free(orig);
  free(buf);
}

/* Error messages are one line (error.h) even when the file puts line
 * breaks or other control bytes in what they quote: a tensor name, a dtype
 * string, the activation list. A crafted file cannot add log lines. */
static void test_messages_are_one_line(void **state) {
  (void)state;
  static const char *const headers[] = {
      "{\"0.weight\\n1970-01-01T00:00:00Z mlpd[1] info: ready\":"
      "{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]}}",
      "{\"0.weight\":{\"dtype\":\"F\\r32\",\"shape\":[1,1],"
      "\"data_offsets\":[0,4]}}",
      "{\"__metadata__\":{\"mlpd.activations\":\"gelu\\u001b[2J\"},"
      "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[1,1],"
      "\"data_offsets\":[0,4]},\"0.bias\":{\"dtype\":\"F32\","
      "\"shape\":[1],\"data_offsets\":[4,8]}}",
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(headers); i++) {
    tu_write_safetensors(path_for("ctl.safetensors"), headers[i],
                         good_data, i == 2 ? 8 : 4);
    mlpd_err_t err = {0};
    mlpd_model_t *m = NULL;
    assert_int_not_equal(
        mlpd_model_load(&m, path_for("ctl.safetensors"), NULL, &err), 0);
    for (const char *p = err.msg; *p != '\0'; p++) {
      if ((unsigned char)*p < 0x20 || *p == 0x7f)
        fail_msg("case %zu: control byte 0x%02x in \"%s\"", i,
                 (unsigned char)*p, err.msg);
    }
    assert_non_null(strchr(err.msg, '?'));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_byte_by_byte_file_is_accepted),
      cmocka_unit_test(test_naming_schemes_and_order),
      cmocka_unit_test(test_relu_activation),
      cmocka_unit_test(test_malformed_files_are_rejected),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_random_corruption_never_crashes),
      cmocka_unit_test(test_messages_are_one_line),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
