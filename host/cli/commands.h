/* The verbs of the switchyard command line; each returns the process exit status. */
#ifndef SY_HOST_COMMANDS_H
#define SY_HOST_COMMANDS_H

int sy_cmd_plugins(int argc, char **argv);
int sy_cmd_generate(int argc, char **argv);
int sy_cmd_tokenize(int argc, char **argv);
int sy_cmd_bench(int argc, char **argv);
int sy_cmd_quantize(int argc, char **argv);
int sy_cmd_serve(int argc, char **argv);
int sy_cmd_chat_template(int argc, char **argv);

struct sy_loaded_model;
struct sy_sampler_params;
/* The generation loop behind `generate`, reusable by tests: prints to stdout; returns an exit status. */
int sy_generate_run(const struct sy_loaded_model *lm, const char *prompt, int add_bos, unsigned max_new,
                    const struct sy_sampler_params *sp, int show_special, int stats, double load_seconds);

#endif
