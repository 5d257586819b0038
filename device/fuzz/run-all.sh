#!/usr/bin/env bash
# `make fuzz`: runs every fuzz target with libFuzzer (cargo-fuzz) for FUZZ_SECONDS each
# (default 120), starting from the kept corpus device/fuzz/corpus/<target>/ (read only:
# new inputs go to build/fuzz/corpus/<target>/). Prints execs per target and lists any
# crash input (device/fuzz/artifacts/<target>/); exits non-zero if a target crashed.
# cargo-fuzz passes sanitizer flags that need a nightly compiler: a nightly toolchain is
# used when rustup has one, else the stable one with RUSTC_BOOTSTRAP=1.
# vfio_stream: the vfio-user library allocates a REGION_READ/WRITE's byte count (up to
# 4 GiB) before the server's backend can refuse it; the backend refuses anything above
# 1 MiB without touching that memory, so the allocation stays virtual. That target runs
# with a malloc limit above 4 GiB; real memory growth is still caught by -rss_limit_mb.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds=${FUZZ_SECONDS:-120}
targets=${FUZZ_TARGETS:-"engine bar0 packet frame vfio_stream verbs_ops verbs_pair dbpage control udp_rx"}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked || exit 1
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi
log_dir=../../build/fuzz
mkdir -p "$log_dir"
failed=0
summary=""
for t in $targets; do
    scratch="$log_dir/corpus/$t"
    mkdir -p "$scratch" "artifacts/$t"
    extra=()
    [ "$t" = vfio_stream ] && extra=(-malloc_limit_mb=4200)
    "${fuzz[@]}" run -O "$t" "$scratch" "corpus/$t" -- -max_total_time="$seconds" -print_final_stats=1 \
        "${extra[@]}" >"$log_dir/$t.log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log_dir/$t.log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log_dir/$t.log" | tail -1)
    crashes=$(find "artifacts/$t" -type f | wc -l)
    summary+=$(printf '%-12s execs %-10s %-12s exit %s, crash inputs %s' "$t" "${execs:-?}" "${cov:-}" "$rc" "$crashes")$'\n'
    if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        failed=1
        tail -30 "$log_dir/$t.log"
    fi
done
printf '%s' "$summary"
exit $failed
