#!/bin/sh
# `switchyard generate --draft`: greedy output with n-gram drafting and with a draft model (itself, and another
# model of the same tokenizer) is byte for byte the output without; --stats reports the drafting; bad drafter
# specs are refused with one clear line.
# Usage: test_spec_cli.sh SWITCHYARD SOURCE_DIR BUILD_DIR
set -u
sy=$1
src=$2
build=$3
tmp=$(mktemp -d /tmp/sy-spec-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/plugins"
ln -s "$build/plugins/test-engine.so" "$tmp/plugins/test-engine.so"
ln -s "$build/plugins/spec-drafter.so" "$tmp/plugins/spec-drafter.so"
model="$src/tests/plugins/fixtures/test-model.txt"
other="$src/tests/fixtures/test-engine/beta.model"
failures=0

gen() { "$sy" generate --plugin-dir "$tmp/plugins" --plugin test-engine --model "$model" --temp 0 "$@"; }

for prompt in "the cat sat on the mat. the cat sat on the mat. the cat sat on the" \
              "switchyard speculative decoding test, with words that do not repeat" \
              "abcabcabcabcabcabcabcabcabcabc"; do
    gen -n 150 "$prompt" > "$tmp/plain.txt" 2>/dev/null || { echo "FAIL: plain generate"; failures=$((failures + 1)); }
    for draft in ngram "model:$model" "model:$other"; do
        if ! gen -n 150 --draft "$draft" --draft-max 6 --stats "$prompt" > "$tmp/spec.txt" 2> "$tmp/stats.txt"; then
            echo "FAIL: generate --draft $draft: $(cat "$tmp/stats.txt")"
            failures=$((failures + 1))
        elif ! cmp -s "$tmp/plain.txt" "$tmp/spec.txt"; then
            echo "FAIL: --draft $draft changed the greedy output of '$prompt'"
            failures=$((failures + 1))
        elif ! grep -q "speculative (.*): drafted [0-9]* tokens, accepted [0-9]*" "$tmp/stats.txt"; then
            echo "FAIL: --stats does not report the drafting: $(cat "$tmp/stats.txt")"
            failures=$((failures + 1))
        fi
    done
done

expect_error() { # NAME EXPECTED_TEXT ARGS...
    name=$1 text=$2
    shift 2
    if gen -n 5 "$@" "hi" > /dev/null 2> "$tmp/err.txt"; then
        echo "FAIL: $name: succeeded"
        failures=$((failures + 1))
    elif ! grep -q -- "$text" "$tmp/err.txt" || [ "$(wc -l < "$tmp/err.txt")" -ne 1 ]; then
        echo "FAIL: $name: expected one line with '$text', got: $(cat "$tmp/err.txt")"
        failures=$((failures + 1))
    fi
}
expect_error "unknown drafter" "no loaded drafter plugin makes drafters of 'eagle'" --draft eagle
expect_error "missing draft model" "does not exist" --draft model:/nonexistent/model.txt
expect_error "draft-max 0" "--draft-max" --draft ngram --draft-max 0
expect_error "draft-max too large" "--draft-max" --draft ngram --draft-max 257
expect_error "empty draft" "--draft" --draft ""
printf 'switchyard-test-model\nseed=3\nn_vocab=300\n' > "$tmp/wide.txt"
expect_error "other vocabulary" "vocabulary of 300 tokens" --draft "model:$tmp/wide.txt"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "generate --draft: all checks passed"
