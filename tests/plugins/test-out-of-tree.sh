#!/bin/sh
# Third-party plugin workflow, end to end: install switchyard into a temporary prefix (whose quantize verb must find
# the quantizer there), build docs/examples/minimal-plugin against it with nothing but pkg-config
# (switchyard-plugin.pc), and check that the host loads the result and generates with it.
#
# Environment (set by CTest): SY_SOURCE_DIR, SY_BUILD_DIR, SY_CMAKE (the cmake that configured the build).
set -eu

: "${SY_SOURCE_DIR:?SY_SOURCE_DIR is not set}"
: "${SY_BUILD_DIR:?SY_BUILD_DIR is not set}"
CMAKE=${SY_CMAKE:-cmake}
SWITCHYARD=$SY_BUILD_DIR/bin/switchyard
EXAMPLE=$SY_SOURCE_DIR/docs/examples/minimal-plugin

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

[ -x "$SWITCHYARD" ] || fail "$SWITCHYARD is not built"
work=$(mktemp -d "${TMPDIR:-/tmp}/sy-out-of-tree.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# 1. Install the build into a fresh prefix.
"$CMAKE" --install "$SY_BUILD_DIR" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; fail "cmake --install failed"; }
pc=$(find "$work/prefix" -name switchyard-plugin.pc | head -n 1)
[ -n "$pc" ] || fail "switchyard-plugin.pc was not installed"
[ -f "$work/prefix/include/switchyard/switchyard.h" ] || fail "the ABI headers were not installed"
# The installed quantize verb runs the quantizer from <prefix>/libexec/switchyard, off PATH.
[ -x "$work/prefix/libexec/switchyard/switchyard-quantize" ] || fail "switchyard-quantize is not in libexec/switchyard"
env -u SY_QUANTIZE_BIN "$work/prefix/bin/switchyard" quantize --help >"$work/quantize.txt" 2>&1 ||
    { cat "$work/quantize.txt" >&2; fail "the installed switchyard quantize --help failed"; }
grep -q '^usage: switchyard quantize ' "$work/quantize.txt" || fail "the installed quantize verb printed no usage"

# 2. Configure and build the example against the prefix only: pkg-config finds nothing but the installed .pc.
PKG_CONFIG_PATH=$(dirname "$pc")
PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
export PKG_CONFIG_PATH PKG_CONFIG_LIBDIR
# The .pc must describe the prefix it was installed to (cmake --install --prefix relocates), which it may spell
# relative to itself (${pcfiledir}).
incdir=$("${PKG_CONFIG:-pkg-config}" --variable=includedir switchyard-plugin) ||
    fail "pkg-config does not know switchyard-plugin"
[ -d "$incdir" ] && [ "$(cd "$incdir" && pwd -P)" = "$(cd "$work/prefix/include" && pwd -P)" ] ||
    fail "switchyard-plugin.pc points at $incdir, not at the prefix it was installed to ($work/prefix/include)"
"$CMAKE" -S "$EXAMPLE" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_INSTALL_PREFIX="$work/prefix" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log" >&2; fail "configuring the example failed"; }
"$CMAKE" --build "$work/build" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log" >&2; fail "building the example failed"; }
plugin=$work/build/example-counter.so
[ -f "$plugin" ] || fail "the example did not produce example-counter.so"
# Nothing of the source tree was seen.
if grep -q -- "$SY_SOURCE_DIR/abi" "$work/build/compile_commands.json"; then
    fail "the example saw the source tree's headers"
fi

# 3. The host lists it as loaded, and refuses nothing in that folder.
"$SWITCHYARD" plugins --plugin-dir "$work/build" >"$work/plugins.txt" 2>&1 ||
    { cat "$work/plugins.txt" >&2; fail "switchyard plugins failed"; }
cat "$work/plugins.txt"
grep -Eq '^loaded +example-counter( |$)' "$work/plugins.txt" || fail "example-counter is not listed as loaded"
if grep -q '^refused' "$work/plugins.txt"; then
    fail "switchyard refused a file of the example's build folder"
fi

# 4. It works through the host: after "1" the counter says 23456789 and stops.
"$SWITCHYARD" generate --plugin-dir "$work/build" --plugin example-counter --model "$EXAMPLE/counter.model" \
    --temp 0 -n 20 "1" >"$work/generate.txt" 2>"$work/generate.err" ||
    { cat "$work/generate.err" >&2; fail "switchyard generate with the example failed"; }
grep -q '23456789' "$work/generate.txt" || { cat "$work/generate.txt" >&2; fail "unexpected generation"; }

# 4b. Its option schema: listed, and a key it does not declare is refused before the load, naming the flag.
"$SWITCHYARD" plugins --plugin-dir "$work/build" --options example-counter >"$work/options.txt" 2>&1 ||
    { cat "$work/options.txt" >&2; fail "switchyard plugins --options failed"; }
grep -Eq '^ctx_size +uint +256 +1\.\.65536 ' "$work/options.txt" || { cat "$work/options.txt" >&2; fail "schema not listed"; }
if "$SWITCHYARD" generate --plugin-dir "$work/build" --plugin example-counter --model "$EXAMPLE/counter.model" \
    --threads 2 "1" >/dev/null 2>"$work/threads.err"; then
    fail "--threads was accepted by a plugin that does not declare it"
fi
grep -q "plugin example-counter has no option 'threads'" "$work/threads.err" || { cat "$work/threads.err" >&2; fail "no clear error for --threads"; }

# 5. Installed beside the host (the .pc's plugindir), the installed host finds it without --plugin-dir.
"$CMAKE" --install "$work/build" >"$work/install-example.log" 2>&1 ||
    { cat "$work/install-example.log" >&2; fail "installing the example failed"; }
"$work/prefix/bin/switchyard" plugins >"$work/installed.txt" 2>&1 ||
    { cat "$work/installed.txt" >&2; fail "the installed switchyard plugins failed"; }
grep -Eq '^loaded +example-counter( |$)' "$work/installed.txt" ||
    { cat "$work/installed.txt" >&2; fail "the installed host does not find the installed example"; }
grep -Eq '^loaded +test-engine( |$)' "$work/installed.txt" ||
    { cat "$work/installed.txt" >&2; fail "the installed host does not find its bundled test-engine"; }
echo "PASS: example-counter built out of tree and loaded"
