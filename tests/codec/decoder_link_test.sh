#!/usr/bin/env bash
# The decoder-only link set: libplexus_codec.so and every library of the
# build tree it needs, followed through their NEEDED entries (readelf -d),
# must hold no training code and no image file I/O:
#   - no NEEDED entry, anywhere in the loader's closure (ldd), names NCCL,
#     MPI, libjpeg, libpng, libplexus_train or libplexus_data, nor cuBLAS,
#     which a CUDA build opens on its first CUDA context only (loading it
#     costs about 150 MB resident);
#   - no symbol of those libraries, or of the optimisers, gradient clipping,
#     the step graph, the trainer and the image readers and writers, is
#     defined or needed (nm -D) by any library of the set.
# Positive controls keep the test from passing on an empty reading: the set
# must be libplexus_codec.so and libplexus.so, and the symbols read must
# include Net::forward (defined) and the codec's C API.
#
# usage: decoder_link_test.sh <libplexus_codec.so>
set -euo pipefail

codec=$1
fail() { echo "FAIL: $*"; exit 1; }
[[ -f $codec ]] || fail "no library at '$codec'"
build_lib_dir=$(cd "$(dirname "$codec")" && pwd)

# The libraries of the build tree in the codec's closure.
set_files=("$build_lib_dir/$(basename "$codec")")
queue=("${set_files[0]}")
while ((${#queue[@]})); do
  library=${queue[0]}
  queue=("${queue[@]:1}")
  while read -r needed; do
    [[ -f $build_lib_dir/$needed ]] || continue
    case " ${set_files[*]} " in *" $build_lib_dir/$needed "*) continue ;; esac
    set_files+=("$build_lib_dir/$needed")
    queue+=("$build_lib_dir/$needed")
  done < <(readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
names=$(for file in "${set_files[@]}"; do basename "$file"; done | sort | tr '\n' ' ')
echo "decoder-only set in $build_lib_dir: $names"
[[ $names == "libplexus.so libplexus_codec.so " ]] ||
  fail "the decoder-only set is '$names', not libplexus.so and libplexus_codec.so"

forbidden_libraries='lib(nccl|mpi|mpich|open-pal|open-rte|jpeg|turbojpeg|png|plexus_train|plexus_data|cublas)[^/ ]*\.so'
for file in "${set_files[@]}"; do
  echo "== $(basename "$file") NEEDED:"
  readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/  \1/p'
  bad=$(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -E "^$forbidden_libraries" || true)
  [[ -z $bad ]] || fail "$(basename "$file") needs $(echo "$bad" | tr '\n' ' ')"
done
closure=$(ldd "$codec") || fail "ldd cannot read $codec"
bad=$(echo "$closure" | awk '{print $1}' | grep -E "^$forbidden_libraries" || true)
[[ -z $bad ]] || fail "loading $(basename "$codec") loads $(echo "$bad" | tr '\n' ' ')"

# Symbols: T/W/V/B/D/R are defined, U undefined (needed); C++ names demangled.
# A symbol is forbidden by its own name, not its arguments (load_checkpoint takes an Optimizer*):
# the pattern is anchored at the name's start, after "vtable for " and the like.
forbidden_symbols='^((vtable|typeinfo|typeinfo name|VTT) for )?(plexus::(Optimizer|Sgd|Adam|GradientClipper|'
forbidden_symbols+='StepGraph|StepMetrics|train::|distributed::|data::(read_image|try_read_image|decode_image|'
forbidden_symbols+='read_image_size|write_png|ImageFolder|BatchLoader|PatchSampler|DeviceInput|mix_seed))|'
forbidden_symbols+='plexus::cuda::(adam_|sgd_update|clip_gradients|record_step_metrics)|jpeg_|png_|nccl|MPI_|ompi_)'
all_defined="" all_needed=""
for file in "${set_files[@]}"; do
  defined=$(nm -D -C --defined-only "$file" | sed 's/^[0-9a-f]* [A-Za-z] //')
  needed=$(nm -D -C --undefined-only "$file" | sed 's/^ *U //')
  all_defined+=$defined$'\n'
  all_needed+=$needed$'\n'
  bad=$(echo "$defined" | grep -E "$forbidden_symbols" | head -5 || true)
  [[ -z $bad ]] || fail "$(basename "$file") defines training or image I/O symbols: $bad"
  bad=$(echo "$needed" | grep -E "$forbidden_symbols" | head -5 || true)
  [[ -z $bad ]] || fail "$(basename "$file") needs training or image I/O symbols: $bad"
done
grep -q '^plexus::Net::forward(plexus::Context&)$' <<<"$all_defined" ||
  fail "plexus::Net::forward is not among the set's defined symbols: the symbols were not read"
grep -q '^plexus_codec_decode' <<<"$all_defined" ||
  fail "the C API (plexus_codec_decode*) is not among the set's defined symbols: the symbols were not read"
echo "$(wc -l <<<"$all_defined") symbols defined and $(wc -l <<<"$all_needed") needed in the set;" \
  "none of the optimisers, the trainer, NCCL, MPI, libjpeg, libpng or cuBLAS"
echo "PASS"
