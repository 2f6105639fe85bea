# Sourced by the scripts/bench-*.sh scripts; not run on its own.

# wait_quiet waits (up to QUIET_TIMEOUT seconds, default 600) until the whole
# machine has used less than a tenth of a core for 3 s, so that a benchmark
# does not start while something else is computing. It warns and goes on
# when the machine stays busy: the benchmarks themselves also warn
# ("WARNING: other processes used ...") about any run that was disturbed.
wait_quiet() {
  local deadline=$((SECONDS + ${QUIET_TIMEOUT:-600}))
  while :; do
    local a b
    a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    sleep 3
    b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    # /proc/stat counts in 1/100 s: 30 ticks in 3 s is 0.1 core.
    if [ $((b - a)) -lt 30 ]; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "WARNING: the machine is still busy ($(((b - a) / 3))% of a core); measuring anyway" >&2
      return 0
    fi
    echo "waiting for the machine to go quiet ($(((b - a) / 3))% of a core busy)..." >&2
    sleep 10
  done
}

# machine prints what the figures were measured on.
machine() {
  echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(go version | cut -d' ' -f3-)"
}

benchstat_bin() {
  command -v benchstat || echo "$(go env GOPATH)/bin/benchstat"
}

# drop_disturbed filters go test -bench output on stdin: it drops every
# result line whose benchmark logged "WARNING: other processes used ..."
# (see bench/main_test.go), and the log lines themselves.
drop_disturbed() {
  awk '
    /^Benchmark/               { if (held != "") print held; held = $0; next }
    /^--- BENCH:/              { next }
    /WARNING: other processes/ { held = ""; next }
    /^    [a-z_]+_test\.go:/   { next }
                               { if (held != "") { print held; held = "" }; print }
    END                        { if (held != "") print held }
  '
}

# bench_round OUT ARGS... waits for quiet, runs `go test ARGS -count 1`
# once, appends its raw output to OUT.raw and its undisturbed results to
# OUT. Every round adds exactly one header segment (starting at the "heap:"
# line) to OUT, empty when everything was disturbed, so the k-th segments of
# two files filled in the same rounds were measured side by side.
bench_round() {
  local out=$1; shift
  wait_quiet
  go test "$@" -count 1 | tee "$out.round"
  cat "$out.round" >>"$out.raw"
  drop_disturbed <"$out.round" >>"$out"
  rm -f "$out.round"
}

# short_of OUT COUNT succeeds when some benchmark that ran (per OUT.raw) has
# fewer than COUNT undisturbed results in OUT.
short_of() {
  local out=$1 count=$2 n
  for n in $(sed -n 's/^\(Benchmark[^ \t]*\).*/\1/p' "$out.raw" | sort -u); do
    if [ "$(grep -c "^$n[[:space:]]" "$out")" -lt "$count" ]; then return 0; fi
  done
  return 1
}

# bench_heaps PREFIX COUNT ARGS... measures under both heap modes
# (LEVEE_BENCH_HEAP=default, then resident, alternating round by round so
# that drift of a shared machine hits both alike) until every benchmark has
# COUNT undisturbed results in PREFIX-default.txt and PREFIX-resident.txt;
# at most MAX_ROUNDS rounds (default 4 × COUNT). Short rounds fit between
# the bursts of work of other users of the machine.
bench_heaps() {
  local prefix=$1 count=$2; shift 2
  local round heap
  for heap in default resident; do : >"$prefix-$heap.txt"; : >"$prefix-$heap.txt.raw"; done
  for round in $(seq "${MAX_ROUNDS:-$((4 * count))}"); do
    for heap in default resident; do
      LEVEE_BENCH_HEAP=$heap bench_round "$prefix-$heap.txt" "$@"
    done
    if ! short_of "$prefix-default.txt" "$count" && ! short_of "$prefix-resident.txt" "$count"; then
      return 0
    fi
  done
  echo "WARNING: after $round rounds some benchmarks have fewer than $count undisturbed results" >&2
}

# paired_ratios FILE UNIT prints, for each p=, the median over rounds of the
# via=grpc / via=inprocess ratio of UNIT, pairing the two results of the
# same round (the lines after one "heap:" header). Pairing cancels most of
# the drift of a shared machine between rounds, which the unpaired
# benchstat comparison cannot.
paired_ratios() {
  awk -v unit="$2" '
    function metric(line,   i, n, f) {
      n = split(line, f, /[ \t]+/)
      for (i = 2; i <= n; i++) if (f[i] == unit) return f[i - 1]
      return ""
    }
    function flush(   p) {
      for (p in inproc) if (p in grpc) ratios[p] = ratios[p] " " grpc[p] / inproc[p]
      delete inproc
      delete grpc
    }
    /^heap:/ { flush(); next }
    /^BenchmarkSaturation\// {
      split($1, parts, "/")
      v = metric($0)
      if (v == "") next
      if ($1 ~ /via=inprocess/) inproc[parts[2]] = v
      else if ($1 ~ /via=grpc/) grpc[parts[2]] = v
    }
    END {
      flush()
      for (p in ratios) {
        n = split(substr(ratios[p], 2), r, " ")
        for (i = 2; i <= n; i++) { x = r[i]; j = i - 1; while (j >= 1 && r[j] > x) { r[j + 1] = r[j]; j-- }; r[j + 1] = x }
        med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
        printf "%s  %-12s grpc/inprocess  median %.3f  min %.3f  max %.3f  (%d paired rounds)\n", p, unit, med, r[1], r[n], n
      }
    }
  ' "$1" | sort
}

# paired_refusal_diff FILE prints, for each clients=, the median over rounds
# of cpu-ns/op of the refused Verify minus that of the health Check measured
# in the same round (the lines after one "heap:" header).
paired_refusal_diff() {
  awk '
    function metric(line,   i, n, f) {
      n = split(line, f, /[ \t]+/)
      for (i = 2; i <= n; i++) if (f[i] == "cpu-ns/op") return f[i - 1]
      return ""
    }
    function flush(   c) {
      for (c in verify) if (c in health) diffs[c] = diffs[c] " " (verify[c] - health[c])
      delete verify
      delete health
    }
    /^heap:/ { flush(); next }
    /^BenchmarkRefusal\/op=(verify|health)\// {
      split($1, parts, "/")
      sub(/-[0-9]+$/, "", parts[3])
      v = metric($0)
      if (v == "") next
      if (parts[2] == "op=verify") verify[parts[3]] = v
      else health[parts[3]] = v
    }
    END {
      flush()
      for (c in diffs) {
        n = split(substr(diffs[c], 2), r, " ")
        for (i = 2; i <= n; i++) { x = r[i]; j = i - 1; while (j >= 1 && r[j] > x) { r[j + 1] = r[j]; j-- }; r[j + 1] = x }
        med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
        printf "%-10s refused Verify - health Check, cpu per op: median %+.1fµs  min %+.1fµs  max %+.1fµs  (%d paired rounds)\n", c, med / 1000, r[1] / 1000, r[n] / 1000, n
      }
    }
  ' "$1" | sort
}

# paired_heap_ratios DEFAULT RESIDENT UNIT prints, per benchmark, the median
# over rounds of the resident / default ratio of UNIT, pairing the k-th
# round segments of the two files (see bench_round).
paired_heap_ratios() {
  awk -v unit="$3" '
    function metric(line,   i, n, f) {
      n = split(line, f, /[ \t]+/)
      for (i = 2; i <= n; i++) if (f[i] == unit) return f[i - 1]
      return ""
    }
    FNR == 1 { file++; seg = 0 }
    /^heap:/ { seg++; next }
    /^Benchmark/ {
      v = metric($0)
      if (v != "") val[file, seg, $1] = v
      names[$1] = 1
      if (seg > maxseg) maxseg = seg
    }
    END {
      for (name in names) {
        list = ""
        for (k = 1; k <= maxseg; k++)
          if ((1, k, name) in val && (2, k, name) in val && val[1, k, name] > 0)
            list = list " " val[2, k, name] / val[1, k, name]
        if (list == "") continue
        n = split(substr(list, 2), r, " ")
        for (i = 2; i <= n; i++) { x = r[i]; j = i - 1; while (j >= 1 && r[j] > x) { r[j + 1] = r[j]; j-- }; r[j + 1] = x }
        med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
        printf "%-44s %-12s resident/default  median %.3f  min %.3f  max %.3f  (%d paired rounds)\n", name, unit, med, r[1], r[n], n
      }
    }
  ' "$1" "$2" | sort
}
