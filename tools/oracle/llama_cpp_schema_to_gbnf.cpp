// llama.cpp's own JSON Schema to GBNF conversion (common/json-schema-to-grammar.cpp, what llama-server runs for
// `json_schema` and `response_format`), as a filter for tools/oracle/llama_cpp_grammar_fixtures.py, which builds
// it against the peer build of tools/bench/build_llama_cpp.sh. Dev time only; not part of switchyard.
//
// Input: JSON lines {"id": ..., "schema": {...}} on stdin. Output: one JSON line per input,
// {"id": ..., "gbnf": "..."} or {"id": ..., "error": "..."} (llama.cpp refused the schema).
#include <iostream>
#include <string>

#include "json-schema-to-grammar.h"
#include "json.h"

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        common_json in = common_json::parse(line);
        common_json out = common_json::object();
        out["id"] = in["id"];
        try {
            out["gbnf"] = json_schema_to_grammar(in["schema"], true);
        } catch (const std::exception & e) {
            out["error"] = std::string(e.what());
        }
        std::cout << out.dump() << "\n";
    }
    return 0;
}
