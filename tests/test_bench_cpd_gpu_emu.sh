#!/bin/sh
# perf/bench_cpd_gpu on the SIMT emulation (the emulated build only): it refuses to time the
# emulation unless told (--emulation 1), then runs its logic end to end on a small NELL-2
# shaped tensor: cpu, cuda and hybrid, with the tensor streamed to the device (--gpu-mem-limit
# below what it needs to keep it) and its batches decoded by the CPU threads (--codec zstd),
# the case where hybrid is to beat both. The fits agree; the summaries say the codec, the
# limit and hybrid's time over the better of the other two. The times are the emulation's.
# usage: test_bench_cpd_gpu_emu.sh BENCH_CPD_GPU
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
B=$1
expect_run 77 "SIMT emulation" any -- "$B" --nnz 1000 --shape nell2
expect_run 2 "--codec: 'lz4' is not gpu or zstd" any -- "$B" --codec lz4
expect_run 0 '"emulated":true' any -- "$B" --emulation 1 --shape nell2 --nnz 20000 --rank 8 \
    --iters 3 --backends cpu,cuda,hybrid --gpu-mem-limit 12M --codec zstd --dir "$T"
n=$(grep -c '"what":"summary"' "$T/out")
[ "$n" -eq 3 ] && ok || bad "$n summaries, expected 3: $(cat "$T/out" "$T/err")"
grep '"backend":"cuda"' "$T/out" | grep '"what":"summary"' |
    grep -q '"codec":"zstd","gpu_mem_limit":12582912,' && ok || bad "cuda's summary: $(cat "$T/out")"
grep '"what":"summary"' "$T/out" | grep '"backend":"cuda"' | grep -q '"host_decoded_batches":0,' &&
    bad "zstd batches decoded on the device?" || ok
grep '"what":"summary"' "$T/out" | grep '"backend":"hybrid"' |
    grep -Eq '"this_over_best":[0-9]+\.[0-9]+,' && ok || bad "no this_over_best: $(cat "$T/out")"
fits=$(grep '"what":"summary"' "$T/out" | sed -n 's/.*"fit":\([^,]*\),.*/\1/p' | sort -u | wc -l)
[ "$fits" -eq 1 ] && ok || bad "the fits differ: $(grep -o '"fit":[^,]*' "$T/out")"
# Too little device memory for a backend: a skipped record, and the run goes on.
expect_run 0 '"what":"skipped"' any -- "$B" --emulation 1 --shape nell2 --nnz 20000 --rank 8 \
    --iters 2 --backends hybrid,cpu --gpu-mem-limit 1M --dir "$T"
grep '"what":"summary"' "$T/out" | grep -q '"backend":"cpu"' && ok || bad "cpu did not run after the skip"
finish
