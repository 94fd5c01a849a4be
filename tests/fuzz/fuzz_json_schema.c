/*
 * Fuzz target: JSON Schema to GBNF (host/grammar/json_schema.c) on arbitrary JSON, then the grammar it wrote.
 *
 * Beyond "no crash, no leak, no hang, no undefined behaviour": a refused schema says why; what the compiler
 * writes always compiles as GBNF (only a size limit may refuse it); documents generated through masks and
 * ended are JSON (cJSON parses them).
 */
#include <cjson/cJSON.h>

#include "fuzz_grammar_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *schema = cJSON_ParseWithLength((const char *)data, size);
    if (schema == NULL) return 0;
    char err[256] = "", *gbnf = NULL;
    sy_schema_options o = sy_schema_defaults();
    o.whitespace = size % 2 ? SY_SCHEMA_WS_FLEXIBLE : SY_SCHEMA_WS_COMPACT;
    o.additional_properties_default = size % 3 != 0;
    int rc = sy_json_schema_to_gbnf(schema, &o, &gbnf, err, sizeof err);
    cJSON_Delete(schema);
    if (rc != 0) {
        CHECK(gbnf == NULL && err[0] != '\0');
        return 0;
    }
    sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, sizeof err);
    if (g == NULL) {
        /* only the size limits may refuse the compiler's own output */
        if (strstr(err, "repetition") == NULL && strstr(err, "expands past") == NULL &&
            strstr(err, "more than") == NULL && strstr(err, "nested deeper") == NULL) {
            fprintf(stderr, "schema compiler wrote GBNF that does not compile: %s\n%s\n", err, gbnf);
            abort();
        }
        free(gbnf);
        return 0;
    }
    free(gbnf);
    char text[1024];
    int ended;
    int32_t toks[200];
    size_t n_toks;
    size_t n = fz_generate(g, size * 2654435761u, 200, text, sizeof text, &ended, toks, &n_toks);
    if (ended && n < sizeof text) {
        cJSON *doc = cJSON_ParseWithLength(text, n);
        if (doc == NULL) {
            fprintf(stderr, "generated text is not JSON: %.*s\n", (int)n, text);
            abort();
        }
        cJSON_Delete(doc);
    }
    sy_grammar_free(g);
    return 0;
}
