/*
 * A main() for fuzz targets in builds without libFuzzer (gcc, sanitizer builds): feeds files to the target's
 * LLVMFuzzerTestOneInput, so every build runs the seed corpus and any input a fuzzer once found.
 *
 *   fuzz_NAME FILE_OR_FOLDER...
 *
 * A folder's files are replayed in name order (not recursively). Each input is copied into a buffer of exactly
 * its size, so the sanitizers see reads past its end. Exit status 0 when every input ran; a crash or a
 * sanitizer report ends the process as it would under the fuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a target, as with libFuzzer. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_INPUT_BYTES ((size_t)64 << 20)

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *data = malloc(cap);
    for (;;) {
        if (data == NULL) break;
        if (len == cap) {
            if (cap >= MAX_INPUT_BYTES) break;
            uint8_t *grown = realloc(data, cap * 2);
            if (grown == NULL) {
                free(data);
                data = NULL;
                break;
            }
            data = grown;
            cap *= 2;
        }
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int failed = ferror(f) || data == NULL || len >= MAX_INPUT_BYTES;
    fclose(f);
    if (failed) {
        fprintf(stderr, "replay: %s: cannot read it (or it is larger than %zu bytes)\n", path, MAX_INPUT_BYTES);
        free(data);
        return -1;
    }
    /* Exactly `len` bytes, so that a read past the input's end is out of bounds. */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact == NULL) {
        free(data);
        return -1;
    }
    memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int only_files(const struct dirent *e) { return e->d_name[0] != '.'; }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize != NULL) LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
        return 2;
    }
    size_t replayed = 0;
    int failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failures++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) == 0) replayed++; else failures++;
            continue;
        }
        struct dirent **entries = NULL;
        int n = scandir(argv[i], &entries, only_files, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failures++;
            continue;
        }
        for (int j = 0; j < n; j++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], entries[j]->d_name);
            struct stat est;
            if (stat(path, &est) == 0 && S_ISREG(est.st_mode)) {
                if (replay_file(path) == 0) replayed++; else failures++;
            }
            free(entries[j]);
        }
        free(entries);
    }
    printf("replay: %zu inputs replayed, %d could not be read\n", replayed, failures);
    /* An empty corpus means the test checks nothing: treat it as a failure. */
    return failures == 0 && replayed > 0 ? 0 : 1;
}
