/* See constraint.h. */
#include "api/constraint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/sy_grammar.h"

/* JSON text of a schema, compiled (or found) in the cache. schema NULL: any JSON object. */
static int use_schema(sy_api_context *c, const cJSON *schema, const char *field, sy_gen_params *p,
                      sy_api_error *e) {
    sy_grammar_cache *cache = sy_api_grammar_cache(c);
    if (cache == NULL) return sy_api_fail(e, 500, "internal_error", field, "the grammar cache is unavailable");
    char *text = NULL;
    if (schema != NULL) {
        text = cJSON_PrintUnformatted(schema);
        if (text == NULL) return sy_api_fail(e, 500, "internal_error", field, "%s: cannot serialise it", field);
    }
    sy_schema_options o = sy_schema_defaults();
    char err[512] = "";
    sy_grammar *g = sy_grammar_cache_schema(cache, text, text ? strlen(text) : 0, &o, err, sizeof err);
    free(text);
    if (g == NULL) return sy_api_fail(e, 400, "invalid_value", field, "%s: %s", field, err);
    p->constraint.grammar = g;
    return 0;
}

static int use_gbnf(sy_api_context *c, const char *gbnf, const char *field, sy_gen_params *p, sy_api_error *e) {
    sy_grammar_cache *cache = sy_api_grammar_cache(c);
    if (cache == NULL) return sy_api_fail(e, 500, "internal_error", field, "the grammar cache is unavailable");
    char err[512] = "";
    sy_grammar *g = sy_grammar_cache_gbnf(cache, gbnf, strlen(gbnf), err, sizeof err);
    if (g == NULL) return sy_api_fail(e, 400, "invalid_value", field, "%s: %s", field, err);
    p->constraint.grammar = g;
    return 0;
}

/* A schema field must be a JSON object (a boolean schema `true` means anything, which is no constraint for a
 * document that must still be JSON: refused rather than guessed at). */
static int check_schema_value(const cJSON *v, const char *field, sy_api_error *e) {
    if (!cJSON_IsObject(v)) return sy_api_fail(e, 400, "invalid_type", field, "%s must be a JSON Schema object", field);
    return 0;
}

int sy_api_constraint_openai(sy_api_context *c, const cJSON *body, sy_gen_params *p, sy_api_error *e) {
    p->constraint.grammar = NULL;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
    const cJSON *grammar = cJSON_GetObjectItemCaseSensitive(body, "grammar");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(body, "json_schema");
    if (cJSON_IsNull(rf)) rf = NULL;
    if (cJSON_IsNull(grammar) || (cJSON_IsString(grammar) && grammar->valuestring[0] == '\0')) grammar = NULL;
    if (cJSON_IsNull(schema)) schema = NULL;

    const char *type = NULL;
    if (rf != NULL) {
        if (!cJSON_IsObject(rf))
            return sy_api_fail(e, 400, "invalid_type", "response_format", "response_format must be an object");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsString(t))
            return sy_api_fail(e, 400, "invalid_type", "response_format.type",
                               "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
        type = t->valuestring;
        if (strcmp(type, "text") == 0) rf = NULL, type = NULL;
        else if (strcmp(type, "json_object") != 0 && strcmp(type, "json_schema") != 0)
            return sy_api_fail(e, 400, "invalid_value", "response_format.type",
                               "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
    }
    int given = (rf != NULL) + (grammar != NULL) + (schema != NULL);
    if (given > 1)
        return sy_api_fail(e, 400, "invalid_value", rf != NULL ? "response_format" : "grammar",
                           "give only one of response_format, grammar and json_schema");
    if (grammar != NULL) {
        if (!cJSON_IsString(grammar))
            return sy_api_fail(e, 400, "invalid_type", "grammar", "grammar must be a string of GBNF");
        return use_gbnf(c, grammar->valuestring, "grammar", p, e);
    }
    if (schema != NULL) {
        if (check_schema_value(schema, "json_schema", e) != 0) return -1;
        return use_schema(c, schema, "json_schema", p, e);
    }
    if (rf == NULL) return 0;
    if (strcmp(type, "json_object") == 0) return use_schema(c, NULL, "response_format", p, e);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return sy_api_fail(e, 400, "invalid_type", "response_format.json_schema",
                           "response_format.json_schema must be an object with name and schema");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (name != NULL && !cJSON_IsNull(name) && !cJSON_IsString(name))
        return sy_api_fail(e, 400, "invalid_type", "response_format.json_schema.name",
                           "response_format.json_schema.name must be a string");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict != NULL && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
        return sy_api_fail(e, 400, "invalid_type", "response_format.json_schema.strict",
                           "response_format.json_schema.strict must be a boolean");
    /* strict or not, the output follows the schema: a grammar cannot follow it loosely. */
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (s == NULL || cJSON_IsNull(s)) return use_schema(c, NULL, "response_format.json_schema", p, e);
    if (check_schema_value(s, "response_format.json_schema.schema", e) != 0) return -1;
    return use_schema(c, s, "response_format.json_schema.schema", p, e);
}

int sy_api_constraint_ollama(sy_api_context *c, const cJSON *body, sy_gen_params *p, sy_api_error *e) {
    p->constraint.grammar = NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "format");
    if (v == NULL || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0')) return 0;
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "json") != 0)
            return sy_api_fail(e, 400, "invalid_value", "format",
                               "format must be \"json\" or a JSON Schema object");
        return use_schema(c, NULL, "format", p, e);
    }
    if (check_schema_value(v, "format", e) != 0) return -1;
    return use_schema(c, v, "format", p, e);
}

void sy_api_constraint_clear(sy_gen_params *p) {
    sy_grammar_free(p->constraint.grammar);
    p->constraint.grammar = NULL;
}
