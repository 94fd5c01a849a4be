// Dev-time oracle: llama.cpp's own DRY sampler on given candidates after given history; prints each candidate's
// logit after DRY. One case per line on stdin:
//   T mult base allowed_length last_n n_breakers [len tok...]... n_history tok... n_cands [id logit]...
//     breakers as token sequences (llama_sampler_init_dry_testing)
//   S mult base allowed_length last_n n_breakers [hex]... H hex
//     breakers as strings (hex of their bytes), tokenized over the vocabulary of the GGUF named by argv[1]
//     (llama_sampler_init_dry); the history is the text (hex) as llama.cpp tokenizes it, the candidates its
//     distinct tokens and their neighbours' ids, with logits a fixed function of the id. Prints
//     n_history tok... n_cands [id logit]... then the logits after DRY.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "llama.h"
#include "llama-sampler.h"

static std::string unhex(const char *h) {
    std::string s;
    for (size_t i = 0; h[i] && h[i + 1]; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        s.push_back((char)v);
    }
    return s;
}

int main(int argc, char **argv) {
    const llama_vocab *vocab = nullptr;
    if (argc > 1) {
        llama_model_params mp = llama_model_default_params();
        mp.vocab_only = true;
        llama_model *model = llama_model_load_from_file(argv[1], mp);
        if (!model) return 2;
        vocab = llama_model_get_vocab(model);
    }
    char mode[4];
    while (scanf("%3s", mode) == 1) {
        float mult, base;
        int allowed, last_n, n_breakers;
        if (scanf("%f %f %d %d %d", &mult, &base, &allowed, &last_n, &n_breakers) != 5) return 1;
        llama_sampler *s = nullptr;
        if (mode[0] == 'T') {
            std::vector<std::vector<llama_token>> breakers(n_breakers);
            for (auto &b : breakers) {
                int len;
                if (scanf("%d", &len) != 1) return 1;
                b.resize(len);
                for (auto &t : b) if (scanf("%d", &t) != 1) return 1;
            }
            s = llama_sampler_init_dry_testing(mult, base, allowed, last_n, breakers);
        } else {
            if (!vocab) return 3;
            std::vector<std::string> strs(n_breakers);
            std::vector<const char *> ptrs;
            for (auto &b : strs) {
                char hex[256];
                if (scanf("%255s", hex) != 1) return 1;
                b = unhex(hex);
            }
            for (auto &b : strs) ptrs.push_back(b.c_str());
            s = llama_sampler_init_dry(vocab, mult, base, allowed, last_n, ptrs.data(), ptrs.size());
        }
        std::vector<llama_token_data> d;
        if (mode[0] == 'T') {
            int n_hist;
            if (scanf("%d", &n_hist) != 1) return 1;
            for (int i = 0; i < n_hist; i++) {
                int t;
                if (scanf("%d", &t) != 1) return 1;
                llama_sampler_accept(s, t);
            }
            int n;
            if (scanf("%d", &n) != 1) return 1;
            d.resize(n);
            for (auto &x : d) if (scanf("%d %f", &x.id, &x.logit) != 2) return 1;
        } else {
            char tag[4], hex[8192];
            if (scanf("%3s %8191s", tag, hex) != 2) return 1;
            std::string text = unhex(hex);
            std::vector<llama_token> toks(text.size() + 8);
            int n = llama_tokenize(vocab, text.c_str(), (int)text.size(), toks.data(), (int)toks.size(), false, false);
            if (n < 0) return 4;
            toks.resize(n);
            printf("%d", n);
            for (auto t : toks) printf(" %d", t), llama_sampler_accept(s, t);
            std::vector<llama_token> ids;
            for (auto t : toks)
                for (int k = 0; k < 2; k++)
                    if (std::find(ids.begin(), ids.end(), t + k) == ids.end()) ids.push_back(t + k);
            std::sort(ids.begin(), ids.end());
            for (auto id : ids) d.push_back({id, (float)((id * 37) % 101) / 20.0f - 2.5f, 0.0f});
            printf(" %zu", d.size());
            for (auto &x : d) printf(" %d %.9g", x.id, x.logit);
        }
        llama_token_data_array a = {d.data(), d.size(), -1, false};
        llama_sampler_apply(s, &a);
        if (mode[0] == 'T') {
            printf("%zu", a.size);
            for (size_t i = 0; i < a.size; i++) printf(" %d %.9g", a.data[i].id, a.data[i].logit);
        } else {
            for (size_t i = 0; i < a.size; i++) printf(" %.9g", a.data[i].logit);
        }
        printf("\n");
        llama_sampler_free(s);
    }
    return 0;
}
