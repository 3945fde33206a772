/* clef: the command-line driver. Dispatches to one verb per file (see cmds.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} verbs[] = {
    {"decide", cmd_decide, "decide --model DIR [--request F|-] [--threads N]   answer one request"},
    {"tokenize", cmd_tokenize, "tokenize --model DIR (--text S | --file F | --jsonl F|-)   token ids"},
    {"encode", cmd_encode, "encode --model DIR --request F|-   input ids, spans, option ids"},
    {"respond", cmd_respond, "respond --request F --logits F   the response from given logits"},
    {"preprocess", cmd_preprocess, "preprocess --model DIR --image F   image grid and pixel hash"},
    {"serve", cmd_serve, "serve --model DIR [--host H] [--port N] ...   HTTP server (docs/serving.md)"},
    {"state-key", cmd_state_key, "state-key --model DIR [--request F|-] [--jsonl]   the routing key of each request"},
    {"batch", cmd_batch, "batch --model DIR IN.jsonl OUT.jsonl   one answer per request line, resumable"},
    {"bench", cmd_bench, "bench --model DIR --tokens N[,N..] [--threads N] [--repeat R]   time the forward"},
    {"version", cmd_version, "version   version, git commit, backends, CPU features (also: clef --version)"},
    {"pull", cmd_pull, "pull [--dir DIR] [--revision REV]   download the release weights, verified (docs/pull.md)"},
    {"gate", cmd_gate, "gate --model DIR [--fixture F] [--images DIR]   check against the author's readout (docs/fidelity.md)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: clef VERB [options]     (clef VERB --help: the verb's options; docs/cli.md: all of them)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) fprintf(f, "  %s\n", verbs[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[1], verbs[i].name)) return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "clef: unknown verb '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
