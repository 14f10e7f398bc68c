#!/usr/bin/env bash
# Runs the libFuzzer targets one after the other and prints, per target, the executions, exec/s,
# corpus, coverage and findings. Usage (make fuzz calls it):
#   fuzz/run.sh BUILD_DIR SECONDS [TARGET...]      targets: zip pickle safetensors legacy json scan dist (default all)
# New corpus inputs go to BUILD_DIR/corpus/<target>/ (the committed seeds in fuzz/corpus/<target>/ are
# read, never written); findings (crash-*, timeout-*, oom-*, leak-*) to fuzz/crashes/<target>-*;
# each run's log to BUILD_DIR/fuzz-logs/<target>.log. Exits 1 when any target found something.
# FUZZ_FORK=1 keeps a target going after a finding (libFuzzer's -fork=1 -ignore_crashes …), for long
# runs; the default stops at the first one, as CI wants. FUZZ_SEED=N fixes libFuzzer's seed (make
# fuzz-quick uses 1, so a CI run explores the same way each time and fails only on a regression or a
# change of the code; long runs keep a random seed to explore further).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$1"
seconds="$2"
shift 2
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(zip pickle safetensors legacy json scan dist)

# -max_len per target: above its largest seed (a zip cut short loses its directory), small enough to
# keep the mutations where the parsing is.
declare -A max_len=([zip]=65536 [pickle]=32768 [safetensors]=16384 [legacy]=65536 [json]=32768 [scan]=32768 [dist]=65536)

symbolizer=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null | tail -1)
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-$symbolizer}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

mkdir -p "$here/crashes" "$build/fuzz-logs"
status=0
summary=()
for t in "${targets[@]}"; do
    bin="$build/fuzz_$t"
    [ -n "${max_len[$t]:-}" ] || { echo "unknown target $t"; exit 2; }
    [ -x "$bin" ] || { echo "$bin: not built (make fuzz builds it)"; exit 2; }
    mkdir -p "$build/corpus/$t"
    log="$build/fuzz-logs/$t.log"
    before=$(ls "$here/crashes" | grep "^$t-" | sort)
    extra=()
    [ "${FUZZ_FORK:-0}" = 1 ] && extra=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    [ -n "${FUZZ_SEED:-}" ] && extra+=(-seed="$FUZZ_SEED")
    # Every finding filed so far (fuzz/crashes/<target>-*) runs first: a regression fails at once.
    filed=("$here"/crashes/"$t"-*)
    if [ -e "${filed[0]}" ]; then
        if ! "$bin" "${filed[@]}" >"$build/fuzz-logs/$t.regressions.log" 2>&1; then
            echo "$t: a filed finding fails again (log: $build/fuzz-logs/$t.regressions.log)"
            grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$build/fuzz-logs/$t.regressions.log" | head -5 | sed 's/^/    /'
            status=1
            summary+=("$(printf '%-12s regression in fuzz/crashes/%s-*' "$t" "$t")")
            continue
        fi
        echo "== fuzz_$t: ${#filed[@]} filed findings pass"
    fi
    echo "== fuzz_$t: ${seconds}s, -max_len=${max_len[$t]} (log: $log)"
    "$bin" "$build/corpus/$t" "$here/corpus/$t" \
        -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$here/crashes/$t-" -print_final_stats=1 "${extra[@]}" >"$log" 2>&1
    rc=$?
    after=$(ls "$here/crashes" | grep "^$t-" | sort)
    new=$(comm -13 <(echo "$before") <(echo "$after") | sed '/^$/d')
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    if [ -n "$new" ] || [ $rc -ne 0 ]; then
        status=1
        findings="FINDINGS (exit $rc): $(echo $new)"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -5 | sed 's/^/    /'
    else
        findings="no findings"
    fi
    line=$(printf '%-12s %10s execs %7s exec/s  cov %-5s ft %-6s corpus %-12s %s' \
        "$t" "$execs" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$findings")
    echo "$line"
    summary+=("$line")
done
echo
echo "fuzz summary (${seconds}s per target):"
printf '  %s\n' "${summary[@]}"
exit $status
