/* video_tool FILE...: runs the video processor (src/video) on each file and prints one JSON line per
 * file: {"file","grid_thw","fps","total_frames","indices","timestamps","pixel_values_sha256","rows"}
 * (rows: the first 4 values of rows 0 and n-1) or {"file","error","message"}. Used by
 * tests/parity/test_video_processor.py against tests/fixtures/video/index.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "video/video.h"

int main(int argc, char **argv) {
    clef_video_opts o;
    clef_video_opts_default(&o);
    o.allow_paths = 1;
    for (int i = 1; i < argc; i++) {
        clef_video v;
        clef_err e;
        clef_err_clear(&e);
        printf("{\"file\":\"%s\"", argv[i]);
        if (clef_video_prepare(argv[i], strlen(argv[i]), &o, &v, &e)) {
            printf(",\"error\":\"%s\",\"message\":\"", e.type);
            for (const char *p = e.msg; *p; p++) {
                if (*p == '"' || *p == '\\') putchar('\\');
                putchar(*p);
            }
            printf("\"}\n");
            continue;
        }
        char hex[65];
        clef_sha256_hex(v.pixel_values, v.n_patches * v.patch_dim * sizeof(float), hex);
        printf(",\"grid_thw\":[%d,%d,%d],\"fps\":%.17g,\"total_frames\":%lld,\"indices\":[", v.grid_t, v.grid_h,
               v.grid_w, v.fps, (long long)v.total_frames);
        for (int k = 0; k < v.n_sampled; k++) printf(k ? ",%lld" : "%lld", (long long)v.indices[k]);
        printf("],\"timestamps\":[");
        for (int k = 0; k < v.grid_t; k++) {
            char t[64];
            clef_video_timestamp_text(v.timestamps[k], t, sizeof t);
            printf(k ? ",\"%s\"" : "\"%s\"", t);
        }
        printf("],\"pixel_values_sha256\":\"%s\"}\n", hex);
        clef_video_free(&v);
    }
    return 0;
}
