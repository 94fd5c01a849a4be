/* Oniguruma regexes on PCRE2; see regex_onig.h. */
#include "regex_onig.h"

#include <stdio.h>

#include "errmsg.h"
#include "utf8_util.h"

/* Oniguruma's \s (Unicode White_Space, without U+180E), and the code points that Unicode 15.0 and 16.0 added to
 * L and N (harmless where PCRE2 already knows them): see regex_onig.h. */
#define ONIG_WHITE_SPACE \
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define UNICODE16_EXTRA_L \
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}" \
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}" \
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}" \
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}" \
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}" \
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define UNICODE16_EXTRA_N \
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}" \
    "\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}"


/* Rewrites \s, \S, \p{L}, \P{L}, \p{N}, \P{N} as regex_onig.h describes; everything else is copied. Inside a
 * character class only the positive forms can be widened (a negated item cannot be unioned), so \S and \P{..}
 * stay as PCRE2 reads them there. */
bool sy_onig_translate(const char *pat, size_t len, strbuf *out) {
    bool in_class = false;
    size_t class_start = 0;
    size_t i = 0;
    while (i < len) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char n = pat[i + 1];
            if (n == 's') {
                if (!sb_append_str(out, in_class ? ONIG_WHITE_SPACE : "[" ONIG_WHITE_SPACE "]"))
                    return false;
                i += 2;
                continue;
            }
            if (n == 'S' && !in_class) {
                if (!sb_append_str(out, "[^" ONIG_WHITE_SPACE "]"))
                    return false;
                i += 2;
                continue;
            }
            if ((n == 'p' || n == 'P') && i + 2 < len) {
                /* \pL, \p{L}, \p{^L} */
                char prop = 0;
                bool negated = (n == 'P');
                size_t used = 0;
                if (pat[i + 2] == 'L' || pat[i + 2] == 'N') {
                    prop = pat[i + 2];
                    used = 3;
                } else if (pat[i + 2] == '{') {
                    size_t j = i + 3;
                    bool caret = false;
                    if (j < len && pat[j] == '^') {
                        caret = true;
                        j++;
                    }
                    if (j + 1 < len && (pat[j] == 'L' || pat[j] == 'N') && pat[j + 1] == '}') {
                        prop = pat[j];
                        negated = negated != caret;
                        used = j + 2 - i;
                    }
                }
                if (prop != 0 && !(negated && in_class)) {
                    const char *extra = prop == 'L' ? UNICODE16_EXTRA_L : UNICODE16_EXTRA_N;
                    const char *base = prop == 'L' ? "\\p{L}" : "\\p{N}";
                    bool ok = true;
                    if (!in_class)
                        ok = sb_append_str(out, negated ? "[^" : "[");
                    ok = ok && sb_append_str(out, base) && sb_append_str(out, extra);
                    if (!in_class)
                        ok = ok && sb_append_str(out, "]");
                    if (!ok)
                        return false;
                    i += used;
                    continue;
                }
            }
            if (n == 'Q') { /* \Q...\E is literal text: copy it through untouched */
                const char *e = NULL;
                for (size_t j = i + 2; j + 1 < len; j++) {
                    if (pat[j] == '\\' && pat[j + 1] == 'E') {
                        e = pat + j;
                        break;
                    }
                }
                size_t upto = e ? (size_t)(e - pat) + 2 : len;
                if (!sb_append(out, pat + i, upto - i))
                    return false;
                i = upto;
                continue;
            }
            if (!sb_append(out, pat + i, 2))
                return false;
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            if (!sb_append(out, pat + i, 1))
                return false;
            i++;
            if (i < len && pat[i] == '^') {
                if (!sb_append(out, pat + i, 1))
                    return false;
                i++;
            }
            class_start = i;
            if (i < len && pat[i] == ']') { /* a ']' first in a class is literal */
                if (!sb_append(out, pat + i, 1))
                    return false;
                i++;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') { /* [:alpha:] */
            const char *e = NULL;
            for (size_t j = i + 2; j + 1 < len; j++) {
                if (pat[j] == ':' && pat[j + 1] == ']') {
                    e = pat + j;
                    break;
                }
            }
            size_t upto = e ? (size_t)(e - pat) + 2 : i + 1;
            if (!sb_append(out, pat + i, upto - i))
                return false;
            i = upto;
            continue;
        }
        if (in_class && c == ']' && i > class_start)
            in_class = false;
        if (!sb_append(out, pat + i, 1))
            return false;
        i++;
    }
    return true;
}

pcre2_code *sy_onig_compile(const char *pattern, size_t len, bool is_regex, char *err, size_t err_size) {
    char shown[128];
    if (len == 0) {
        sy_errmsg(err, err_size, "empty split pattern");
        return NULL;
    }
    if (utf8_invalid_offset(pattern, len) != len) {
        sy_errmsg(err, err_size, "split pattern %s is not valid UTF-8",
                sy_errmsg_quote(shown, sizeof shown, pattern, len));
        return NULL;
    }
    strbuf tr = {0};
    const char *src = pattern;
    size_t src_len = len;
    uint32_t options = PCRE2_UTF;
    if (is_regex) {
        if (!sy_onig_translate(pattern, len, &tr)) {
            sb_free(&tr);
            sy_errmsg(err, err_size, "out of memory");
            return NULL;
        }
        src = tr.data;
        src_len = tr.len;
        options |= PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    } else {
        options |= PCRE2_LITERAL;
    }
    int code = 0;
    PCRE2_SIZE where = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, src_len, options, &code, &where, NULL);
    sb_free(&tr);
    if (re == NULL) {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", code);
        sy_errmsg(err, err_size, "split regex %s does not compile: %s",
                sy_errmsg_quote(shown, sizeof shown, pattern, len), (const char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter runs it */
    return re;
}
