// llama.cpp's grammar sampler timed the way tools/bench/grammar_bench.c times switchyard's: per step, the
// grammar's apply on a candidate array of the whole vocabulary (llama.cpp sets -inf on what the grammar rejects:
// its mask and its masked row in one), then accept of a token picked uniformly among the allowed ones; seeded
// random generations, ended at random where an end token is allowed (always after 150 steps), 400 steps at most.
// Built against the peer build of tools/bench/build_llama_cpp.sh (see docs/benchmarks.md for the command); the
// vocabulary is a GGUF's, loaded with vocab_only.
//   llama_cpp_grammar_bench MODEL.gguf (--gbnf FILE | --schema FILE) [generations, default 40]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "json-schema-to-grammar.h"
#include "json.h"
#include "llama.h"

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static uint64_t next_rand(uint64_t & s) {  // xorshift64*
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
}

static void report(const char * what, std::vector<double> v) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    printf("  %-22s n=%-6zu median %8.1f us  p99 %8.1f us  max %8.1f us  mean %8.1f us\n", what, v.size(),
           v[v.size() / 2], v[(size_t)(v.size() * 0.99)], v.back(), sum / v.size());
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf (--gbnf FILE | --schema FILE) [generations]\n", argv[0]);
        return 2;
    }
    std::ifstream in(argv[3]);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string grammar = ss.str();
    if (std::string(argv[2]) == "--schema") {
        double t0 = now_us();
        grammar = json_schema_to_grammar(common_json::parse(grammar), true);
        printf("schema to GBNF (llama.cpp): %.1f us, %zu bytes\n", now_us() - t0, grammar.size());
    }
    int gens = argc > 4 ? atoi(argv[4]) : 40;
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    printf("vocabulary: %d tokens\n", n_vocab);
    std::vector<llama_token_data> cand(n_vocab);
    std::vector<double> apply_us, first_us, accept_us, init_us;
    uint64_t rng = 12345;
    long steps = 0;
    for (int k = 0; k < gens; k++) {
        double t0 = now_us();
        llama_sampler * g = llama_sampler_init_grammar(vocab, grammar.c_str(), "root");
        init_us.push_back(now_us() - t0);
        if (g == nullptr) {
            fprintf(stderr, "llama.cpp refused the grammar\n");
            return 1;
        }
        for (int step = 0; step < 400; step++) {
            for (int i = 0; i < n_vocab; i++) cand[i] = {i, 0.0f, 0.0f};
            llama_token_data_array arr = {cand.data(), (size_t)n_vocab, -1, false};
            double a = now_us();
            llama_sampler_apply(g, &arr);
            double b = now_us();
            (k == 0 && step == 0 ? first_us : apply_us).push_back(b - a);
            std::vector<llama_token> allowed;
            bool can_end = false;
            for (size_t i = 0; i < arr.size; i++)
                if (arr.data[i].logit != -INFINITY) {
                    allowed.push_back(arr.data[i].id);
                    if (llama_vocab_is_eog(vocab, arr.data[i].id)) can_end = true;
                }
            if (allowed.empty()) break;
            if (can_end && (step > 150 || next_rand(rng) % 4 == 0)) break;
            llama_token tok = allowed[next_rand(rng) % allowed.size()];
            if (llama_vocab_is_eog(vocab, tok)) break;
            a = now_us();
            llama_sampler_accept(g, tok);
            accept_us.push_back(now_us() - a);
            steps++;
        }
        llama_sampler_free(g);
    }
    printf("%s (%d generations, %ld tokens)\n", argv[3], gens, steps);
    report("grammar init", init_us);
    report("first apply (cold)", first_us);
    report("apply (mask + row)", apply_us);
    report("accept", accept_us);
    llama_model_free(model);
    return 0;
}
