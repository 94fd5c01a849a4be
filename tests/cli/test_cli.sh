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
expect_error "unknown verb" 2 "unknown verb" "$sy" frobnicate
expect_error "unreadable plugin dir" 1 "cannot read plugin directory" "$sy" plugins --plugin-dir /nonexistent/plugins

echo "cli: $passes passed, $failures failed"
[[ $failures -eq 0 ]]
