#!/usr/bin/env bash
# CLI checks on the test engine: reproducible sampling, stable greedy output, and one clear message and a
# non-zero exit for every kind of bad input.
set -u
sy=$1
root=$2
model=$root/tests/plugins/fixtures/test-model.txt
failures=0 passes=0

check() { # name, then a command that must succeed
  local name=$1
  shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; failures=$((failures + 1)); fi
}

expect_error() { # name, expected exit status, message substring, command...
  local name=$1 want_status=$2 want_text=$3
  shift 3
  local out status
  out=$("$@" 2>&1 >/dev/null)
  status=$?
  if [[ $status -ne $want_status ]]; then
    echo "FAIL: $name: exit $status, wanted $want_status ($out)"
    failures=$((failures + 1))
  elif [[ "$out" != *"$want_text"* ]]; then
    echo "FAIL: $name: message '$out' lacks '$want_text'"
    failures=$((failures + 1))
  elif [[ $(printf '%s\n' "$out" | wc -l) -ne 1 ]]; then
    echo "FAIL: $name: wanted one line, got: $out"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

gen() { "$sy" generate --plugin test-engine --model "$model" "$@"; }

a=$(gen --seed 7 -n 64 "Once upon a time")
b=$(gen --seed 7 -n 64 "Once upon a time")
c=$(gen --seed 8 -n 64 "Once upon a time")
check "same seed, same output" test "$a" == "$b"
check "other seed, other output" test "$a" != "$c"
check "sampled output is not empty" test -n "$a"

g1=$(gen --temp 0 -n 64 "Once upon a time")
g2=$(gen --temp 0 -n 64 --seed 99 "Once upon a time")
check "greedy ignores the seed" test "$g1" == "$g2"
expected=$(cat "$root/tests/cli/expected-greedy.txt")
check "greedy output is the pinned one" test "$g1" == "$expected"
# Without --plugin the first engine whose probe accepts the file is used.
g3=$("$sy" generate --model "$model" --temp 0 -n 64 "Once upon a time")
check "probing picks the test engine" test "$g1" == "$g3"

n=$(printf 'Hello' | "$sy" tokenize --plugin test-engine --model "$model" --ids)
check "tokenize --ids" test "$n" == "72 101 108 108 111"

check "--version" "$sy" --version
check "generate --help" "$sy" generate --help
check "plugins lists the test engine" bash -c "'$sy' plugins | grep -q '^loaded   test-engine'"

expect_error "missing model file" 1 "does not exist" "$sy" generate --plugin test-engine --model /nonexistent/model
expect_error "no --model" 2 "--model PATH is required" "$sy" generate "hi"
expect_error "bad --temp" 1 "--temp" "$sy" generate --model "$model" --temp hot "hi"
expect_error "bad --max-new" 1 "--max-new" "$sy" generate --model "$model" -n -3 "hi"
expect_error "unknown plugin" 1 "no plugin named 'nope'" "$sy" generate --plugin nope --model "$model" "hi"
expect_error "plugin refuses the model" 1 "test-engine refuses" "$sy" generate --plugin test-engine --model "$root/README.md" "hi"
expect_error "bad engine option" 1 "n_ctx" "$sy" generate --model "$model" -o n_ctx=zero "hi"
expect_error "bad engine option names the flag" 1 "-o n_ctx: 'zero' is not a whole number" \
  "$sy" generate --plugin test-engine --model "$model" -o n_ctx=zero "hi"
expect_error "a documented flag the plugin does not declare" 1 \
  "--threads: plugin test-engine has no option 'threads' (its options: n_ctx, ctx_size," \
  "$sy" generate --plugin test-engine --model "$model" --threads 2 "hi"
expect_error "a misspelt -o key" 1 "-o n_cxt: plugin test-engine has no option 'n_cxt'" \
  "$sy" tokenize --plugin test-engine --model "$model" -o n_cxt=8
expect_error "the probed plugin's schema applies too" 1 "--kv-buffer-mb: plugin test-engine has no option" \
  "$sy" generate --model "$model" --kv-buffer-mb 8 "hi"
expect_error "a value out of the declared range" 1 "--ctx-size: '0' is out of range (1..1048576)" \
  "$sy" bench --plugin test-engine --model "$model" --ctx-size 0
check "a declared key passes" bash -c "'$sy' generate --plugin test-engine --model '$model' --temp 0 -n 4 -o eos_one_in=0 --ctx-size 64 hi >/dev/null"
check "a drafter's key passes with --draft" bash -c "'$sy' generate --plugin test-engine --model '$model' --temp 0 -n 4 --draft ngram -o draft_ngram_max=2 hi >/dev/null"

# plugins --options: the schema as a table; a plugin without one says so.
opts=$("$sy" plugins --options test-engine)
check "plugins --options prints a header" bash -c "printf '%s\n' \"\$1\" | grep -q '^key  *type  *default  *range  *help$'" _ "$opts"
check "plugins --options prints a row per key" bash -c "printf '%s\n' \"\$1\" | grep -q '^n_ctx  *uint  *-  *1..1048576  *context length'" _ "$opts"
check "plugins --options counts the keys" bash -c "printf '%s\n' \"\$1\" | grep -q '^plugin test-engine: 9 options'" _ "$opts"
check "plugins lists the option count" bash -c "'$sy' plugins | grep -q 'sy.plugin.options/1 (9 options)'"
fixtures=$(dirname "$sy")/../tests/plugin-fixtures
if [[ -f $fixtures/old-minor-1.so ]]; then
  old=$("$sy" plugins --plugin-dir "$fixtures" --options fixture-old-minor-1)
  check "plugins --options on a 1.1 plugin says it declares none" \
    bash -c "printf '%s\n' \"\$1\" | grep -q 'does not declare its options'" _ "$old"
fi
# plugins: each CPU engine names its kernel tier and why AMX is not used (forced tiers included)
check "plugins names the CPU kernel tier" bash -c "'$sy' plugins | grep -Eq '^ +cpu kernels: (scalar|avx2|avx512|amx) \\(bf16: '"
check "plugins names a forced tier and why AMX is not used" \
  bash -c "SY_CPU_TIER=scalar '$sy' plugins | grep -Eq '^ +cpu kernels: scalar \\(bf16: f32; q8_0: scalar; amx (unavailable: |not used: SY_CPU_TIER forced a lower tier)'"
check "plugins lists sy.plugin.runtime/1" bash -c "'$sy' plugins | grep -q 'sy.plugin.runtime/1'"
expect_error "plugins --options on no such plugin" 1 "no plugin named 'nope'" "$sy" plugins --options nope

# serve: a config key the plugin does not declare stops the start, naming the file and line.
cfgdir=$(mktemp -d)
printf '[model.t]\nplugin = test-engine\npath = %s\nn_cxt = 5\n' "$model" >"$cfgdir/typo.ini"
expect_error "serve refuses an undeclared config key" 1 "typo.ini:4: [model.t] n_cxt: not a model key, nor an option of plugin test-engine" \
  bash -c "'$sy' serve --config '$cfgdir/typo.ini' --listen 127.0.0.1:0 2>&1 | grep -v '^switchyard serve:' >&2; exit \${PIPESTATUS[0]}"
rm -rf "$cfgdir"
expect_error "unknown verb" 2 "unknown verb" "$sy" frobnicate
expect_error "unreadable plugin dir" 1 "cannot read plugin directory" "$sy" plugins --plugin-dir /nonexistent/plugins

# quantize is the switchyard-quantize program, run from beside the executable (or SY_QUANTIZE_BIN) with the verb's
# arguments: same output, same exit status, and one line naming where it looked when it is missing.
qbin=$(dirname "$sy")/switchyard-quantize
ckpt=$root/tests/fixtures/hf/qwen3-f32
status_of() { "$@" >/dev/null 2>&1; echo $?; }
check "quantize --help is the program's" test "$("$sy" quantize --help)" == "$("$qbin" --help)"
check "quantize --help names the verb" bash -c "'$sy' quantize --help | head -n 1 | grep -q '^usage: switchyard quantize '"
check "quantize --help exits 0" test "$(status_of "$sy" quantize --help)" -eq 0
check "quantize without arguments exits 2" test "$(status_of "$sy" quantize)" -eq 2
check "quantize --dry-run is the program's" \
  test "$("$sy" quantize --dry-run "$ckpt" /nonexistent/out.gguf Q4_K_M)" == "$("$qbin" --dry-run "$ckpt" /nonexistent/out.gguf Q4_K_M)"
check "quantize --dry-run lists the tensors" bash -c "'$sy' quantize --dry-run '$ckpt' /nonexistent/out.gguf Q8_0 | grep -q '^blk.0.attn_q.weight '"
check "quantize: unknown option exits 2" test "$(status_of "$sy" quantize --frob a b Q8_0)" -eq 2
check "quantize: unknown option named as getopt names it for the verb" \
  test "$("$sy" quantize --frob a b Q8_0 2>&1 | head -n 1)" == "quantize: unrecognized option '--frob'"
expect_error "quantize: unknown type" 2 "switchyard quantize: unknown type 'Q9_9'" "$sy" quantize a b Q9_9
expect_error "quantize: missing input" 1 "switchyard quantize: /nonexistent/in: No such file" \
  "$sy" quantize /nonexistent/in /nonexistent/out.gguf Q8_0
check "SY_QUANTIZE_BIN names the program" test "$(SY_QUANTIZE_BIN=$qbin "$sy" quantize --help)" == "$("$qbin" --help)"
expect_error "SY_QUANTIZE_BIN missing" 1 "looked for /nonexistent/switchyard-quantize (SY_QUANTIZE_BIN)" \
  env SY_QUANTIZE_BIN=/nonexistent/switchyard-quantize "$sy" quantize --help
lonely=$(mktemp -d "${TMPDIR:-/tmp}/sy-cli.XXXXXX")
cp "$sy" "$lonely/switchyard"
expect_error "quantizer missing beside the executable" 1 \
  "switchyard-quantize is missing: looked for $lonely/switchyard-quantize and $lonely/../libexec/switchyard/switchyard-quantize" \
  env -u SY_QUANTIZE_BIN "$lonely/switchyard" quantize --help
rm -rf "$lonely"

# Constrained output: a GBNF file and a JSON Schema file, sampled at temperature 1 over several seeds.
gdir=$(mktemp -d "${TMPDIR:-/tmp}/sy-cli-grammar.XXXXXX")
printf 'root ::= ("yes" | "no") "." [0-9]\n' > "$gdir/yn.gbnf"
printf '{"type":"object","properties":{"s":{"enum":["open","closed"]},"n":{"type":"integer","minimum":10,"maximum":99}},"required":["s","n"],"additionalProperties":false}' > "$gdir/t.json"
printf 'root ::= foo\n' > "$gdir/bad.gbnf"
printf '{"not":{}}' > "$gdir/bad.json"
for seed in 1 2 3 4 5; do
  out=$(gen --seed $seed --temp 1 -n 50 --grammar-file "$gdir/yn.gbnf" "Answer")
  check "--grammar-file seed $seed: '$out'" grep -Eqx '(yes|no)\.[0-9]' <<<"$out"
  out=$(gen --seed $seed --temp 1 -n 80 --json-schema "$gdir/t.json" "Ticket")
  check "--json-schema seed $seed: '$out'" grep -Eqx '\{"s":"(open|closed)","n":[1-9][0-9]\}' <<<"$out"
done
# Speculative drafts under a grammar: greedy output unchanged, sampled output still follows it.
printf 'root ::= ("yard " | "switch " | "model ")+ "."\n' > "$gdir/words.gbnf"
rep="switch yard switch yard switch yard switch yard model switch yard switch yard"
plain=$(gen --temp 0 -n 40 --grammar-file "$gdir/words.gbnf" "$rep")
drafted=$(gen --temp 0 -n 40 --grammar-file "$gdir/words.gbnf" --draft ngram "$rep")
check "--draft ngram with a grammar: greedy output unchanged ('$plain' vs '$drafted')" test "$plain" == "$drafted"
check "--grammar-file words: '$plain'" grep -Eqx '((yard|switch|model) )*(y|ya|yar|yard|s|sw|swi|swit|switc|switch|m|mo|mod|mode|model)?\.?' <<<"$plain"
for seed in 1 2 3; do
  out=$(gen --seed $seed --temp 1 -n 80 --json-schema "$gdir/t.json" --draft ngram "{\"s\":\"open\",\"n\":42} {\"s\":")
  check "--json-schema --draft seed $seed: '$out'" grep -Eqx '\{"s":"(open|closed)","n":[1-9][0-9]\}' <<<"$out"
done
expect_error "--grammar-file: bad GBNF" 1 "undefined rule 'foo'" gen --grammar-file "$gdir/bad.gbnf" x
expect_error "--json-schema: unsupported keyword" 1 "not" gen --json-schema "$gdir/bad.json" x
expect_error "--grammar-file: missing file" 1 "cannot open it" gen --grammar-file "$gdir/none.gbnf" x
expect_error "--grammar-file with --json-schema" 2 "give one of" gen --grammar-file "$gdir/yn.gbnf" \
  --json-schema "$gdir/t.json" x
rm -rf "$gdir"

echo "cli: $passes passed, $failures failed"
[[ $failures -eq 0 ]]
