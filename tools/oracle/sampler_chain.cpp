// Dev-time oracle: llama.cpp's sampler chain (logit bias, top-k, typical, top-p, min-p, XTC, temperature) on given
// logits; prints the surviving candidates and their probabilities. Input on stdin, one case per line:
// n_vocab top_k typical_p top_p min_p xtc_p xtc_t temp n_bias [id bias]... logits...
#include <cmath>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "llama.h"
int main() {
    int n;
    while (scanf("%d", &n) == 1) {
        int top_k, n_bias; float typ, top_p, min_p, xp, xt, temp;
        if (scanf("%d %f %f %f %f %f %f %d", &top_k, &typ, &top_p, &min_p, &xp, &xt, &temp, &n_bias) != 8) return 1;
        std::vector<llama_logit_bias> bias(n_bias);
        for (auto &b : bias) if (scanf("%d %f", &b.token, &b.bias) != 2) return 1;
        std::vector<llama_token_data> d(n);
        for (int i = 0; i < n; i++) { float l; if (scanf("%f", &l) != 1) return 1; d[i] = {i, l, 0.0f}; }
        llama_sampler *c = llama_sampler_chain_init(llama_sampler_chain_default_params());
        if (n_bias) llama_sampler_chain_add(c, llama_sampler_init_logit_bias(n, n_bias, bias.data()));
        llama_sampler_chain_add(c, llama_sampler_init_top_k(top_k));
        llama_sampler_chain_add(c, llama_sampler_init_typical(typ, 0));
        llama_sampler_chain_add(c, llama_sampler_init_top_p(top_p, 0));
        llama_sampler_chain_add(c, llama_sampler_init_min_p(min_p, 0));
        llama_sampler_chain_add(c, llama_sampler_init_xtc(xp, xt, 0, 1234));
        llama_sampler_chain_add(c, llama_sampler_init_temp(temp));
        llama_token_data_array a = {d.data(), d.size(), -1, false};
        llama_sampler_apply(c, &a);
        std::vector<llama_token_data> out(a.data, a.data + a.size);
        double mx = -INFINITY; for (auto &t : out) mx = std::max(mx, (double)t.logit);
        double z = 0; for (auto &t : out) z += std::exp(t.logit - mx);
        std::sort(out.begin(), out.end(), [](auto &x, auto &y){ return x.logit > y.logit || (x.logit == y.logit && x.id < y.id); });
        printf("%zu", out.size());
        for (auto &t : out) printf(" %d %.9g", t.id, std::exp(t.logit - mx) / z);
        printf("\n");
        llama_sampler_free(c);
    }
    return 0;
}
