/* The clef command's verbs. Each lives in its own file (cmd_<verb>.c) and returns the process exit
 * status. */
#ifndef CLEF_CLI_CMDS_H
#define CLEF_CLI_CMDS_H

int cmd_tokenize(int argc, char **argv);
int cmd_encode(int argc, char **argv);
int cmd_state_key(int argc, char **argv);
int cmd_respond(int argc, char **argv);
int cmd_decide(int argc, char **argv);
int cmd_preprocess(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_gate(int argc, char **argv);

#endif
