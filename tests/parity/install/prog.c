/* Built by tests/parity/test_install.sh against an installed clef with pkg-config only: answers the
 * request in argv[2] on the model in argv[1] and prints the body as `clef decide` does.
 * It also defines globals named like libclef's internals (json_object_get, utf8_valid_prefix): a
 * static link against an archive that exported its internals would fail with "multiple
 * definition"; against the installed libclef.a (only clef_* global) it links. */
#include <clef.h>
#include <stdio.h>
#include <string.h>

int json_object_get(void);
int utf8_valid_prefix(void);
int json_object_get(void) { return 1; }
int utf8_valid_prefix(void) { return 2; }

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    clef_options o;
    clef_options_default(&o);
    o.model_dir = argv[1];
    char err[1024];
    clef_engine *e = clef_open(&o, err, sizeof err);
    if (!e) {
        fprintf(stderr, "open: %s\n", err);
        return 3;
    }
    clef_result r;
    int rc = clef_decide(e, argv[2], strlen(argv[2]), &r);
    if (r.body) {
        fwrite(r.body, 1, r.body_len, stdout);
        fputc('\n', stdout);
    }
    clef_result_free(&r);
    clef_close(e);
    return rc ? 1 : json_object_get() + utf8_valid_prefix() == 3 ? 0 : 4;
}
