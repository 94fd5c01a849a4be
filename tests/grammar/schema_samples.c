/* Writes the samples the grammar generates for every schema of the corpus as JSON lines, for the oracle
 * (tools/oracle/json_schema_fixtures.py), which validates them with Python jsonschema:
 *   SY_SOURCE_DIR=. build/tests/schema_samples > /tmp/samples.jsonl
 * Each line: {"file", "name", "samples": [{"text", "hash"}]} ({"error"} for a schema that must not compile). */
#include "schema_corpus.h"

int main(void) {
    char dir[1024];
    gt_source_path(dir, sizeof dir, "tests/fixtures/json-schemas");
    size_t n;
    char **files = sc_list(dir, &n);
    gt_vocab *v = gt_byte_vocab();
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[2048], err[256];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        char *text = gt_read_file(path, NULL);
        cJSON *fx = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (fx == NULL) {
            fprintf(stderr, "%s: cannot read\n", path);
            return 1;
        }
        const char *name = cJSON_GetObjectItemCaseSensitive(fx, "name")->valuestring;
        cJSON *line = cJSON_CreateObject();
        cJSON_AddStringToObject(line, "file", files[i]);
        cJSON_AddStringToObject(line, "name", name);
        char *gbnf = NULL;
        sy_schema_options o = sy_schema_defaults();
        if (sy_json_schema_to_gbnf(cJSON_GetObjectItemCaseSensitive(fx, "schema"), &o, &gbnf, err, sizeof err) != 0) {
            cJSON_AddStringToObject(line, "error", err);
        } else {
            sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, err, sizeof err);
            if (g == NULL) {
                cJSON_AddStringToObject(line, "error", err);
            } else {
                gt_sample s[SCHEMA_SAMPLES];
                int k = sc_samples(g, v, name, s, err, sizeof err);
                if (k < 0) {
                    fprintf(stderr, "%s: generation failed: %s\n", name, err);
                    rc = 1;
                }
                cJSON *arr = cJSON_AddArrayToObject(line, "samples");
                for (int j = 0; j < k; j++) {
                    cJSON *o2 = cJSON_CreateObject();
                    cJSON_AddStringToObject(o2, "text", s[j].text);
                    char h[20];
                    snprintf(h, sizeof h, "%016llx", (unsigned long long)sc_fnv(s[j].text, s[j].len));
                    cJSON_AddStringToObject(o2, "hash", h);
                    cJSON_AddItemToArray(arr, o2);
                    free(s[j].text);
                }
                sy_grammar_free(g);
            }
            free(gbnf);
        }
        char *out = cJSON_PrintUnformatted(line);
        puts(out);
        free(out);
        cJSON_Delete(line);
        cJSON_Delete(fx);
        free(files[i]);
    }
    free(files);
    gt_vocab_free(v);
    return rc;
}
