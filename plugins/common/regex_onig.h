/* Regexes written for Oniguruma, run on PCRE2.
 *
 * Why: Hugging Face `tokenizers` runs its pre-tokenizer regexes (the Split patterns of tokenizer.json, the
 * GPT-2 / Qwen2 / Llama 3 splits) on Oniguruma with Unicode 16 tables, and the split a text gets decides its
 * tokens. PCRE2 (what we link) reads the same syntax but disagrees on a few classes: its \s also matches U+180E,
 * and its Unicode tables may be older (Debian 12's PCRE2 has Unicode 14). A pattern is therefore rewritten
 * before it is compiled: \s, \S, \p{L}, \P{L}, \p{N} and \P{N} become explicit classes of what Oniguruma's
 * tables hold. Everything else is passed through as PCRE2 reads it.
 */
#ifndef SY_REGEX_ONIG_H
#define SY_REGEX_ONIG_H

#include <stdbool.h>
#include <stddef.h>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "strbuf.h"

/* Appends the rewritten pattern[0..len) to out; false when memory runs out. */
bool sy_onig_translate(const char *pattern, size_t len, strbuf *out);

/* Compiles a pre-tokenizer pattern (UTF-8): with is_regex, an Oniguruma regex, rewritten as above and compiled
 * with PCRE2_UTF | PCRE2_UCP (and JIT where available); else a literal string. NULL with one line in err when
 * the pattern is empty, not UTF-8, or does not compile. Free with pcre2_code_free. */
pcre2_code *sy_onig_compile(const char *pattern, size_t len, bool is_regex, char *err, size_t err_size);

#endif
