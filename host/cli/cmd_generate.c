/* switchyard generate: load one model, prefill the prompt, sample until an end token or --max-new, streaming
 * text to stdout as it comes. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "plugins/engine_options.h"
#include "plugins/loaded_model.h"
#include "engine/constrain.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "engine/text_stream.h"
#include "base/buf.h"
#include "base/util.h"
#include "grammar/sy_grammar.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: switchyard generate --plugin P --model PATH [options] [PROMPT]\n\n"
            "Generates a continuation of PROMPT (empty: from the beginning-of-sequence token alone) and streams it\n"
            "to stdout. Sampling happens in the host and is reproducible for a given --seed.\n\n"
            "model:\n"
            "  --plugin P            engine plugin (default: the first whose probe accepts the model)\n"
            "  --model PATH          model file or directory\n"
            "  --gguf FILE           same as --model FILE (with --plugin gguf-quant unless --plugin is given)\n"
            "  --plugin-dir DIR      where plugins are (default: beside the executable)\n"
            "generation:\n"
            "  -n, --max-new N       most tokens to generate (default 256)\n"
            "  --temp T              temperature; 0 = greedy (default 0.8)\n"
            "  --top-k K             (default 40; 0 = off)\n"
            "  --top-p P             (default 0.95; 1 = off)\n"
            "  --min-p P             (default 0.05; 0 = off)\n"
            "  --repeat-penalty R    (default 1 = off)\n"
            "  --seed S              (default 0)\n"
            "  --no-bos              do not add the model's beginning-of-sequence token\n"
            "  --special             print control tokens as text\n"
            "  --stats               print token counts and speeds to stderr at the end\n"
            "constrained output (docs/grammar.md):\n"
            "  --grammar-file F      the output follows the GBNF grammar in F (root rule \"root\")\n"
            "  --json-schema F       the output is JSON valid against the JSON Schema in F\n"
            "speculative decoding (the output is what it would be without):\n"
            "  --draft SPEC          ngram (prompt lookup), model:PATH (a small model with the same tokenizer),\n"
            "                        replay:FILE:PCT (benchmarks: a known continuation, PCT%% corrupted)\n"
            "  --draft-max N         most tokens drafted per step (default 16)\n"
            "engine options (passed to the plugin):\n");
    sy_engine_options_usage(out);
    fprintf(out, "  -h, --help            this text\n");
}

enum {
    OPT_PLUGIN = 1000, OPT_MODEL, OPT_GGUF, OPT_PLUGIN_DIR, OPT_CONFIG, OPT_TEMP, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P,
    OPT_REPEAT, OPT_SEED, OPT_NO_BOS, OPT_SPECIAL, OPT_STATS, OPT_LOG_LEVEL, OPT_DRAFT, OPT_DRAFT_MAX,
    OPT_GRAMMAR_FILE, OPT_JSON_SCHEMA
};

/* Names under which `generate` lends its models to a model drafter (host->acquire_engine). */
#define GENERATE_TARGET_NAME "generate:target"
#define GENERATE_DRAFT_NAME "generate:draft"

static int generate_loop(const sy_loaded_model *lm, const char *prompt, int add_bos, uint32_t max_new,
                         const sy_sampler_params *sp, int show_special, int stats, double load_seconds,
                         sy_speculator *spec, sy_grammar *grammar);

/* A whole file of at most `max` bytes (malloc'd, NUL-terminated), or NULL with err. */
static char *read_text_file(const char *path, size_t max, size_t *len, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_size, "cannot open it: %s", strerror(errno));
        return NULL;
    }
    sy_buf b;
    sy_buf_init(&b);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > max) {
            snprintf(err, err_size, "larger than %zu bytes", max);
            fclose(f);
            sy_buf_free(&b);
            return NULL;
        }
        sy_buf_append(&b, chunk, n);
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        snprintf(err, err_size, "read error");
        sy_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    sy_buf_append(&b, "", 1); /* a NUL for the JSON parser; not counted */
    return sy_buf_take(&b);
}

/* The grammar of --grammar-file (GBNF) or --json-schema (a JSON Schema file). NULL after an error message. */
static sy_grammar *load_grammar(const char *path, bool schema) {
    size_t len = 0;
    char err[512];
    char *text = read_text_file(path, SY_GRAMMAR_MAX_TEXT, &len, err, sizeof err);
    const char *opt = schema ? "--json-schema" : "--grammar-file";
    if (text == NULL) {
        sy_cli_error("generate", "%s %s: %s", opt, path, err);
        return NULL;
    }
    sy_grammar *g = NULL;
    if (schema) {
        sy_grammar_cache *c = sy_grammar_cache_create(1);
        sy_schema_options o = sy_schema_defaults();
        g = c != NULL ? sy_grammar_cache_schema(c, text, len, &o, err, sizeof err) : NULL;
        if (c == NULL) snprintf(err, sizeof err, "out of memory");
        sy_grammar_cache_free(c); /* g holds its own reference */
    } else {
        g = sy_grammar_compile(text, len, NULL, err, sizeof err);
    }
    if (g == NULL) sy_cli_error("generate", "%s %s: %s", opt, path, err);
    free(text);
    return g;
}

int sy_cmd_generate(int argc, char **argv) {
    struct option options[64];
    static const struct option own[] = {
        {"plugin", required_argument, NULL, OPT_PLUGIN},
        {"model", required_argument, NULL, OPT_MODEL},
        {"gguf", required_argument, NULL, OPT_GGUF},
        {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"max-new", required_argument, NULL, 'n'},
        {"temp", required_argument, NULL, OPT_TEMP},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"min-p", required_argument, NULL, OPT_MIN_P},
        {"repeat-penalty", required_argument, NULL, OPT_REPEAT},
        {"seed", required_argument, NULL, OPT_SEED},
        {"no-bos", no_argument, NULL, OPT_NO_BOS},
        {"special", no_argument, NULL, OPT_SPECIAL},
        {"stats", no_argument, NULL, OPT_STATS},
        {"draft", required_argument, NULL, OPT_DRAFT},
        {"draft-max", required_argument, NULL, OPT_DRAFT_MAX},
        {"grammar-file", required_argument, NULL, OPT_GRAMMAR_FILE},
        {"json-schema", required_argument, NULL, OPT_JSON_SCHEMA},
        {"help", no_argument, NULL, 'h'},
    };
    size_t n_own = sizeof own / sizeof *own;
    memcpy(options, own, sizeof own);
    size_t n_all = n_own + sy_engine_options_getopt(options + n_own, sizeof options / sizeof *options - n_own - 1);
    memset(&options[n_all], 0, sizeof options[n_all]);

    const char *plugin = NULL, *model_path = NULL, *plugin_dir = NULL, *draft = NULL;
    const char *grammar_path = NULL;
    bool grammar_is_schema = false;
    sy_grammar *grammar = NULL;
    sy_speculator_options spec_opts = sy_speculator_defaults();
    int gguf_spelling = 0, add_bos = 1, show_special = 0, stats = 0;
    int64_t max_new = 256;
    sy_sampler_params sp = sy_sampler_defaults();
    sy_engine_options eo;
    sy_engine_options_init(&eo);
    double d;
    uint64_t u;
    int c, status = 1;
    optind = 1;
    sy_engine_options_rewrite_aliases(argc, argv);
    while ((c = getopt_long(argc, argv, "n:o:h", options, NULL)) != -1) {
        switch (c) {
        case OPT_PLUGIN: plugin = optarg; break;
        case OPT_MODEL: model_path = optarg; break;
        case OPT_GGUF: model_path = optarg; gguf_spelling = 1; break;
        case OPT_PLUGIN_DIR: plugin_dir = optarg; break;
        case OPT_CONFIG: break;
        case 'n':
            if (sy_parse_i64(optarg, 0, 1 << 24, &max_new) != 0) {
                sy_cli_error("generate", "--max-new: '%s' is not a count from 0 to 16777216", optarg);
                goto done;
            }
            break;
        case OPT_TEMP:
            if (sy_parse_double(optarg, 0, 100, &d) != 0) {
                sy_cli_error("generate", "--temp: '%s' is not a number from 0 to 100", optarg);
                goto done;
            }
            sp.temperature = (float)d;
            break;
        case OPT_TOP_K:
            if (sy_parse_u64(optarg, UINT32_MAX, &u) != 0) {
                sy_cli_error("generate", "--top-k: '%s' is not a count", optarg);
                goto done;
            }
            sp.top_k = (uint32_t)u;
            break;
        case OPT_TOP_P:
            if (sy_parse_double(optarg, 0, 1, &d) != 0) {
                sy_cli_error("generate", "--top-p: '%s' is not a number from 0 to 1", optarg);
                goto done;
            }
            sp.top_p = (float)d;
            break;
        case OPT_MIN_P:
            if (sy_parse_double(optarg, 0, 1, &d) != 0) {
                sy_cli_error("generate", "--min-p: '%s' is not a number from 0 to 1", optarg);
                goto done;
            }
            sp.min_p = (float)d;
            break;
        case OPT_REPEAT:
            if (sy_parse_double(optarg, 0.01, 100, &d) != 0) {
                sy_cli_error("generate", "--repeat-penalty: '%s' is not a number from 0.01 to 100", optarg);
                goto done;
            }
            sp.repeat_penalty = (float)d;
            break;
        case OPT_SEED:
            if (sy_parse_u64(optarg, UINT64_MAX, &u) != 0) {
                sy_cli_error("generate", "--seed: '%s' is not a non-negative integer", optarg);
                goto done;
            }
            sp.seed = u;
            break;
        case OPT_NO_BOS: add_bos = 0; break;
        case OPT_SPECIAL: show_special = 1; break;
        case OPT_STATS: stats = 1; break;
        case OPT_DRAFT:
            if (optarg[0] == '\0') {
                sy_cli_error("generate", "--draft: give ngram, model:PATH or replay:FILE:PCT");
                goto done;
            }
            draft = optarg;
            break;
        case OPT_DRAFT_MAX:
            if (sy_parse_u64(optarg, SY_SPEC_MAX_DRAFT, &u) != 0 || u == 0) {
                sy_cli_error("generate", "--draft-max: '%s' is not a count from 1 to %u", optarg,
                             (unsigned)SY_SPEC_MAX_DRAFT);
                goto done;
            }
            spec_opts.draft_max = (uint32_t)u;
            break;
        case OPT_GRAMMAR_FILE:
        case OPT_JSON_SCHEMA:
            if (grammar_path != NULL) {
                sy_cli_error("generate", "give one of --grammar-file and --json-schema, once");
                status = 2;
                goto done;
            }
            grammar_path = optarg;
            grammar_is_schema = c == OPT_JSON_SCHEMA;
            break;
        case 'h': usage(stdout); status = 0; goto done;
        default: {
            int st = sy_cli_engine_option("generate", &eo, c, optarg, usage);
            if (st != 0) {
                status = st;
                goto done;
            }
        }
        }
    }
    if (model_path == NULL) {
        sy_cli_error("generate", "--model PATH is required (see --help)");
        status = 2;
        goto done;
    }
    if (gguf_spelling && plugin == NULL) plugin = "gguf-quant";
    if (argc - optind > 1) {
        sy_cli_error("generate", "give the prompt as one argument (quote it); unexpected '%s'", argv[optind + 1]);
        status = 2;
        goto done;
    }
    const char *prompt = optind < argc ? argv[optind] : "";
    if (grammar_path != NULL && (grammar = load_grammar(grammar_path, grammar_is_schema)) == NULL) goto done;

    sy_plugin_registry reg = {0};
    char dir[4096], err[1024];
    /* a drafter may live in another plugin: then the whole folder */
    if (sy_cli_load_plugin_named(plugin_dir, plugin, &reg, dir, sizeof dir) != 0) goto done;

    sy_loaded_model lm;
    double t_load = sy_now_seconds();
    if (sy_cli_open_model("generate", &reg, plugin, model_path, draft, &eo, &lm) != 0) {
        sy_plugin_registry_close(&reg);
        goto done;
    }
    t_load = sy_now_seconds() - t_load;
    sy_loaded_model draft_lm;
    memset(&draft_lm, 0, sizeof draft_lm);
    sy_speculator *spec = NULL;
    bool published = false, draft_published = false;
    if (draft != NULL) {
        char spec_text[64];
        const char *spec_name = draft;
        published = sy_loaded_model_publish(GENERATE_TARGET_NAME, &lm) == 0;
        if (strncmp(draft, "model:", 6) == 0) {
            /* The draft model loads like the target: the same plugin when one was named, the same options. */
            if (sy_loaded_model_open(&reg, plugin, draft + 6, eo.items, eo.n_items, &draft_lm, err, sizeof err) != 0) {
                sy_cli_error("generate", "--draft: %s", err);
                goto close;
            }
            draft_published = sy_loaded_model_publish(GENERATE_DRAFT_NAME, &draft_lm) == 0;
            snprintf(spec_text, sizeof spec_text, "model:%s", GENERATE_DRAFT_NAME);
            spec_name = spec_text;
        }
        spec = sy_speculator_open(&reg, spec_name, GENERATE_TARGET_NAME, lm.info.n_vocab, eo.items, eo.n_items,
                                  &spec_opts, err, sizeof err);
        if (spec == NULL) {
            sy_cli_error("generate", "--draft %s: %s", draft, err);
            goto close;
        }
        sy_speculator_limit_rollback(spec, lm.info.max_rollback);
    }
    status = generate_loop(&lm, prompt, add_bos, (uint32_t)max_new, &sp, show_special, stats, t_load, spec, grammar);
close:
    sy_speculator_free(spec);
    if (draft_published) sy_loaded_model_unpublish(GENERATE_DRAFT_NAME, &draft_lm);
    if (published) sy_loaded_model_unpublish(GENERATE_TARGET_NAME, &lm);
    sy_loaded_model_close(&draft_lm);
    sy_loaded_model_close(&lm);
    sy_plugin_registry_close(&reg);
done:
    sy_grammar_free(grammar);
    sy_engine_options_free(&eo);
    return status;
}

int sy_generate_run(const sy_loaded_model *lm, const char *prompt, int add_bos, uint32_t max_new,
                    const sy_sampler_params *sp, int show_special, int stats, double load_seconds) {
    return generate_loop(lm, prompt, add_bos, max_new, sp, show_special, stats, load_seconds, NULL, NULL);
}

/* The output side of the loop: prints tokens as they are taken and counts them. */
typedef struct gen_out {
    const sy_loaded_model *lm;
    sy_text_stream text;
    char *piece;
    size_t piece_cap;
    int show_special;
    uint32_t generated;
} gen_out;

/* Takes one token. 1: go on; 0: an end-of-generation token (not counted); -1: a token without text. */
static int take_token(gen_out *o, int32_t token) {
    uint32_t tflags = o->lm->engine->token_flags(o->lm->model, token);
    if (tflags & SY_TOKEN_END_OF_GENERATION) return 0;
    if (!(tflags & SY_TOKEN_CONTROL) || o->show_special) {
        long n = sy_loaded_model_token_bytes(o->lm, token, &o->piece, &o->piece_cap);
        if (n < 0) {
            sy_cli_error("generate", "token %d has no text: %s", token, o->lm->engine->error_message());
            return -1;
        }
        sy_text_stream_write(&o->text, o->piece, (size_t)n, stdout);
        fflush(stdout);
    }
    o->generated++;
    return 1;
}

/* Decodes history[first..first+n) into seq, logits of the last `n_logits` into `logits`. */
static sy_status decode_run(const sy_loaded_model *lm, sy_seq *seq, const int32_t *tokens, uint32_t n,
                            uint32_t n_logits, float *logits, const sy_host_call *call) {
    sy_decode_item item = {sizeof item, seq, tokens, n, n_logits, logits, NULL};
    sy_decode_batch batch = {sizeof batch, 1, sizeof item, &item, call, NULL};
    return lm->engine->decode(lm->model, &batch);
}

/* The next token from logits, masked by the grammar state when there is one (which then takes the token). */
static int sample_constrained(sy_sampler *sampler, sy_grammar_state *st, uint32_t *mask, float *logits,
                              uint32_t n_vocab, const int32_t *eog, uint32_t n_eog, const int32_t *history,
                              uint32_t n_history, int32_t *token) {
    char msg[600];
    if (st != NULL && sy_constrain_row(st, mask, logits, n_vocab, eog, n_eog, false, msg, sizeof msg) != 0) {
        sy_cli_error("generate", "%s", msg);
        return -1;
    }
    int32_t t = sy_sampler_sample(sampler, logits, history, n_history);
    if (t == SY_SAMPLER_NO_TOKEN) {
        sy_cli_error("generate", "%s", SY_SAMPLER_NO_TOKEN_MESSAGE);
        return -1;
    }
    if (st == NULL) {
        *token = t;
        return 0;
    }
    if (!sy_constrain_allows(mask, t)) t = sy_argmax(logits, n_vocab); /* the sampler's last-resort pick */
    if (sy_grammar_state_accept_token(st, t) < 0) {
        sy_cli_error("generate", "grammar: %s", sy_grammar_state_error(st));
        return -1;
    }
    *token = t;
    return 0;
}

/* Verification of a constrained draft: row j masked with the state after proposals 0..j-1 (as the scheduler). */
typedef struct row_masker {
    sy_grammar_state *st; /* a clone walking the proposals */
    const int32_t *proposals;
    uint32_t *mask;
    uint32_t n_vocab;
    const int32_t *eog;
    uint32_t n_eog;
    bool failed;
    char msg[600];
} row_masker;

static void mask_row(void *user, uint32_t j, float *row) {
    row_masker *m = user;
    if (m->failed) return;
    if (m->st == NULL || (j > 0 && sy_grammar_state_accept_token(m->st, m->proposals[j - 1]) != 0)) {
        m->failed = true;
        snprintf(m->msg, sizeof m->msg, "grammar: %s", m->st ? sy_grammar_state_error(m->st) : "out of memory");
        return;
    }
    if (sy_constrain_row(m->st, m->mask, row, m->n_vocab, m->eog, m->n_eog, false, m->msg, sizeof m->msg) != 0)
        m->failed = true;
}

static int generate_loop(const sy_loaded_model *lm, const char *prompt, int add_bos, uint32_t max_new,
                         const sy_sampler_params *sp, int show_special, int stats, double load_seconds,
                         sy_speculator *spec, sy_grammar *grammar) {
    char err[512];
    size_t n_prompt = 0;
    uint32_t flags = SY_TOKENIZE_PARSE_SPECIAL | (add_bos ? SY_TOKENIZE_ADD_SPECIAL : 0);
    int32_t *prompt_ids = sy_loaded_model_tokenize(lm, prompt, strlen(prompt), flags, &n_prompt, err, sizeof err);
    if (prompt_ids == NULL) {
        sy_cli_error("generate", "%s", err);
        return 1;
    }
    if (n_prompt == 0) {
        /* Nothing to condition on: start from BOS, as llama2.c's `run` does for an empty prompt. */
        if (lm->info.bos_token < 0) {
            sy_cli_error("generate", "the prompt is empty and the model has no beginning-of-sequence token");
            free(prompt_ids);
            return 1;
        }
        prompt_ids = sy_xrealloc(prompt_ids, sizeof *prompt_ids);
        prompt_ids[0] = lm->info.bos_token;
        n_prompt = 1;
    }
    if (n_prompt + max_new > lm->info.n_ctx) {
        if (n_prompt >= lm->info.n_ctx) {
            sy_cli_error("generate", "the prompt has %zu tokens; the model's context holds %u", n_prompt,
                         lm->info.n_ctx);
            free(prompt_ids);
            return 1;
        }
        max_new = lm->info.n_ctx - (uint32_t)n_prompt;
    }

    int status = 1;
    uint32_t n_vocab = lm->info.n_vocab;
    uint32_t draft_room = spec != NULL ? sy_speculator_get_options(spec)->draft_max : 0;
    float *logits = sy_xmalloc((size_t)n_vocab * sizeof *logits);
    /* The prompt, the output, and room for the proposals of one step after them. */
    int32_t *history = sy_xmalloc((n_prompt + max_new + 1 + draft_room) * sizeof *history);
    memcpy(history, prompt_ids, n_prompt * sizeof *history);
    uint32_t n_history = (uint32_t)n_prompt;
    sy_sampler *sampler = sy_sampler_create(sp, n_vocab);
    sy_spec_seq *q = spec != NULL ? sy_spec_seq_create(spec, n_vocab) : NULL;
    sy_spec_seq_begin(q, sp);
    gen_out o;
    memset(&o, 0, sizeof o);
    o.lm = lm;
    o.show_special = show_special;
    sy_text_stream_init(&o.text);
    uint64_t drafted = 0, accepted = 0;
    sy_seq *seq = NULL;
    sy_host_call call;
    sy_host_call_init(&call);
    /* Constrained output: the vocabulary as the grammar sees it, the state, the mask scratch. */
    sy_grammar_vocab *gvocab = NULL;
    sy_grammar_state *gstate = NULL;
    uint32_t *gmask = NULL;
    int32_t *eog = NULL;
    uint32_t n_eog = 0;
    if (grammar != NULL) {
        gvocab = sy_constrain_vocab_create(lm, &eog, &n_eog, err, sizeof err);
        gstate = gvocab != NULL ? sy_grammar_state_create(grammar, gvocab, NULL, err, sizeof err) : NULL;
        if (gstate == NULL) {
            sy_cli_error("generate", "grammar: %s", err);
            goto out;
        }
        gmask = sy_xmalloc(sy_grammar_vocab_mask_words(gvocab) * sizeof *gmask);
    }
    if (lm->engine->seq_create(lm->model, &seq) != SY_OK) {
        sy_cli_error("generate", "cannot create a sequence: %s", lm->engine->error_message());
        goto out;
    }

    double t0 = sy_now_seconds();
    sy_status st = decode_run(lm, seq, prompt_ids, (uint32_t)n_prompt, 1, logits, &call);
    double t_prefill = sy_now_seconds() - t0;
    if (st != SY_OK) {
        sy_cli_error("generate", "prefill failed: %s", lm->engine->error_message());
        goto out;
    }
    double t1 = sy_now_seconds();
    int32_t token = -1;
    if (max_new > 0 && sample_constrained(sampler, gstate, gmask, logits, n_vocab, eog, n_eog, history, n_history,
                                          &token) != 0)
        goto out;
    while (o.generated < max_new) {
        /* The token just chosen joins the history and the output. */
        history[n_history++] = token;
        int taken = take_token(&o, token);
        if (taken < 0) goto out;
        if (taken == 0 || o.generated == max_new) break;
        if (gstate != NULL && sy_grammar_state_is_final(gstate)) break; /* nothing more can follow */

        /* Decode it, with proposals after it when the drafter has some. */
        uint32_t room = lm->info.n_ctx - n_history; /* n_history <= n_prompt + max_new <= n_ctx */
        uint32_t left = max_new - o.generated - 1;   /* k proposals yield up to k + 1 tokens */
        uint32_t limit = room < left ? room : left;
        if (limit > draft_room) limit = draft_room;
        uint32_t k = q != NULL && limit > 0 ? sy_spec_seq_propose(q, history, n_history, limit) : 0;
        if (k > 0 && gstate != NULL) {
            /* The draft ends before the first proposal the grammar rejects (the state holds `token` already). */
            sy_grammar_state *probe = sy_grammar_state_clone(gstate);
            uint32_t ok = 0;
            while (probe != NULL && ok < k && sy_grammar_state_accept_token(probe, history[n_history + ok]) == 0) ok++;
            sy_grammar_state_free(probe);
            k = ok;
        }
        double td = sy_now_seconds();
        st = decode_run(lm, seq, &history[n_history - 1], 1 + k, 1 + k, k ? sy_spec_seq_rows(q) : logits, &call);
        if (st != SY_OK) {
            sy_cli_error("generate", "decode failed: %s", lm->engine->error_message());
            goto out;
        }
        if (spec != NULL) sy_speculator_note_decode(spec, 1 + k, 1, false, sy_now_seconds() - td);
        if (k == 0) {
            if (sample_constrained(sampler, gstate, gmask, logits, n_vocab, eog, n_eog, history, n_history, &token) != 0)
                goto out;
            continue;
        }
        sy_spec_verdict v;
        if (gstate != NULL) {
            row_masker m = {sy_grammar_state_clone(gstate), history + n_history, gmask, n_vocab, eog, n_eog, false, ""};
            sy_spec_seq_verify_masked(q, sampler, history, n_history, k, mask_row, &m, &v);
            sy_grammar_state_free(m.st);
            if (m.failed) {
                sy_cli_error("generate", "%s", m.msg);
                goto out;
            }
        } else {
            sy_spec_seq_verify(q, sampler, history, n_history, k, &v);
        }
        drafted += v.n_drafted;
        accepted += v.n_accepted;
        uint32_t keep = n_history + v.n_accepted;
        if (v.n_accepted < k && lm->engine->seq_truncate(lm->model, seq, keep) != SY_OK) {
            /* The engine cannot roll back that far: stop speculating, and rebuild the sequence from the history. */
            sy_spec_seq_rollback_failed(q, k - v.n_accepted);
            lm->engine->seq_free(lm->model, seq);
            seq = NULL;
            if (lm->engine->seq_create(lm->model, &seq) != SY_OK ||
                decode_run(lm, seq, history, keep, 0, NULL, &call) != SY_OK) {
                sy_cli_error("generate", "rebuilding the sequence after a failed rollback: %s",
                             lm->engine->error_message());
                goto out;
            }
        }
        /* The accepted proposals are in the history already: take them, then the target's own next token. */
        bool ended = false;
        for (uint32_t j = 0; j < v.n_accepted && !ended; j++) {
            if (gstate != NULL && sy_grammar_state_accept_token(gstate, history[n_history]) < 0) {
                sy_cli_error("generate", "grammar: %s", sy_grammar_state_error(gstate));
                goto out;
            }
            int t = take_token(&o, history[n_history]);
            if (t < 0) goto out;
            n_history++;
            ended = t == 0 || o.generated == max_new || (gstate != NULL && sy_grammar_state_is_final(gstate));
        }
        if (ended) break;
        token = v.next;
        if (gstate != NULL && sy_grammar_state_accept_token(gstate, token) < 0) {
            sy_cli_error("generate", "grammar: %s", sy_grammar_state_error(gstate));
            goto out;
        }
    }
    double t_decode = sy_now_seconds() - t1;
    sy_text_stream_finish(&o.text, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (stats) {
        fprintf(stderr,
                "load %.3f s | prompt %zu tokens in %.3f s (%.1f tok/s) | generated %u tokens in %.3f s "
                "(%.1f tok/s)\n",
                load_seconds, n_prompt, t_prefill, t_prefill > 0 ? (double)n_prompt / t_prefill : 0.0, o.generated,
                t_decode, t_decode > 0 ? o.generated / t_decode : 0.0);
        if (spec != NULL)
            fprintf(stderr, "speculative (%s): drafted %llu tokens, accepted %llu (%.1f%%)\n",
                    sy_speculator_label(spec), (unsigned long long)drafted, (unsigned long long)accepted,
                    drafted ? 100.0 * (double)accepted / (double)drafted : 0.0);
    }
    status = 0;
out:
    if (seq != NULL) lm->engine->seq_free(lm->model, seq);
    sy_grammar_state_free(gstate);
    sy_grammar_vocab_free(gvocab);
    free(gmask);
    free(eog);
    sy_spec_seq_free(q);
    sy_sampler_free(sampler);
    free(o.piece);
    free(history);
    free(logits);
    free(prompt_ids);
    return status;
}
