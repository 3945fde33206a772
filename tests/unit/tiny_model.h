/* The tiny checkpoint the model-level unit tests run on: $CLEF_TINY, else models/tiny (written by
 * `make tiny`). One opener, so every such test skips the same way when it is missing. */
#ifndef CLEF_TEST_TINY_MODEL_H
#define CLEF_TEST_TINY_MODEL_H
#include <stdio.h>
#include <stdlib.h>

#include "model/weights.h"

/* Opens the tiny checkpoint and stores its folder in *dir (when dir != NULL). Returns NULL after
 * printing the skip line; the test then exits 77. */
static clef_model_files *tiny_model_open(const char **dir) {
    const char *d = getenv("CLEF_TINY") ? getenv("CLEF_TINY") : "models/tiny";
    if (dir) *dir = d;
    clef_err err = {0};
    clef_model_files *m = clef_model_open(d, &err);
    if (!m) printf("skip: %s not loadable (%s: %s); run make tiny\n", d, err.type ? err.type : "?", err.msg);
    return m;
}

#endif
