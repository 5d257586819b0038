#!/usr/bin/env bash
# `make fuzz-coverage`: line coverage of the fuzz corpus. Builds rnic-emu-testkit's
# unit-test binary with `-C instrument-coverage` on the stable toolchain
# (target/coverage/), runs only `fuzzing::corpus_tests::corpus_replay` (every file of
# device/fuzz/corpus/<target>/ once through its target's entry point,
# device/testkit/src/fuzzing.rs), and prints line coverage per source file of the device
# model (rnic-emu-core; rnic-emu-server's as server:...) with the llvm-cov and
# llvm-profdata of rustup's llvm-tools component (added on first use), then the total of
# the modules the fuzz targets aim at (rnic/verbs/*, rnic/fabric/*, platform/mem/router.rs,
# platform/mem/dma.rs, platform/mem/access.rs, rnic/doorbell.rs) and of rnic-emu-core.
# FUZZ_COVERAGE_EXTRA=dir adds the inputs of dir/<target>/ (for instance build/fuzz/corpus,
# where `make fuzz` writes what it finds). Unit tests do not run, so only the corpus
# counts. HTML: build/fuzz/coverage/html/index.html.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
host=$(rustc -vV | sed -n 's/^host: //p')
tools="$(rustc --print sysroot)/lib/rustlib/$host/bin"
[ -x "$tools/llvm-cov" ] || rustup component add llvm-tools >&2
out=build/fuzz/coverage
rm -rf "$out"
mkdir -p "$out"
export CARGO_TARGET_DIR=target/coverage RUSTFLAGS="-C instrument-coverage"
bin=$(cargo test -q -p rnic-emu-testkit --lib --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "fuzz-coverage: no test binary was built" >&2; exit 1; }
extra=${FUZZ_COVERAGE_EXTRA:+$(realpath "$FUZZ_COVERAGE_EXTRA")}
RNIC_EMU_FUZZ_EXTRA_CORPUS="$extra" LLVM_PROFILE_FILE="$PWD/$out/replay-%p-%m.profraw" \
    "$bin" --exact fuzzing::corpus_tests::corpus_replay --quiet >"$out/replay.log" 2>&1 ||
    { tail -30 "$out/replay.log"; exit 1; }
"$tools/llvm-profdata" merge -sparse "$out"/*.profraw -o "$out/replay.profdata"
"$tools/llvm-cov" report "$bin" -instr-profile="$out/replay.profdata" >"$out/report.txt"
{
    sed -n 's|^.*device/core/src/||p' "$out/report.txt"
    sed -n 's|^.*device/server/src/|server:|p' "$out/report.txt"
} >"$out/files.txt"
"$tools/llvm-cov" show "$bin" -instr-profile="$out/replay.profdata" -format=html -output-dir="$out/html" \
    --ignore-filename-regex='\.cargo|rustc' >/dev/null 2>&1 || true
# Columns of llvm-cov report: file, regions, missed, cover, functions, missed, executed,
# lines, missed lines, line cover, branches...
awk -v goal='^(rnic/verbs/|rnic/fabric/|platform/mem/(router|dma|access)\\.rs|rnic/doorbell\\.rs)' '
    { lines = $8; missed = $9; if (lines == 0) next
      printf "%-28s %6d lines %6d missed %7.1f%%\n", $1, lines, missed, 100 * (lines - missed) / lines
      if ($1 ~ goal) { gl += lines; gm += missed }
      if ($1 !~ /^server:/) { al += lines; am += missed } }
    END { printf "%-28s %6d lines %6d missed %7.1f%%\n", "fuzz-target modules", gl, gm, 100 * (gl - gm) / gl
          printf "%-28s %6d lines %6d missed %7.1f%%\n", "rnic-emu-core", al, am, 100 * (al - am) / al }' "$out/files.txt"
