// The C++ side of tests/parity/test_install.sh: clef.h used from C++ (extern "C"), the same answer.
#include <clef.h>

#include <cstdio>
#include <memory>
#include <string>

// A C symbol named like a libclef internal (json-c has one): links only when libclef hides its own.
extern "C" int json_object_set(void);
extern "C" int json_object_set(void) { return 0; }

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    clef_options o;
    clef_options_default(&o);
    o.model_dir = argv[1];
    char err[1024];
    std::unique_ptr<clef_engine, void (*)(clef_engine *)> e(clef_open(&o, err, sizeof err), clef_close);
    if (!e) {
        std::fprintf(stderr, "open: %s\n", err);
        return 3;
    }
    const std::string req = argv[2];
    clef_result r;
    int rc = clef_decide(e.get(), req.data(), req.size(), &r);
    if (r.body) std::printf("%.*s\n", static_cast<int>(r.body_len), r.body);
    clef_result_free(&r);
    return rc ? 1 : json_object_set();
}
