# Sourced by ci/main.sh and ci/test.sh once meshtrain is built. OpenBLAS chooses its kernels by
# the CPU's model, and Debian 12's OpenBLAS (0.3.21) does not know the models that came after it
# (an Emerald Rapids Xeon, model 207, for one): it falls back to its Prescott kernels, SSE3 only,
# on a CPU with AVX-512. There they were 45 % of a 100-step single-rank run's CPU time, which took
# 3.5 CPU-seconds, and 2.4-2.8 with Haswell's kernels (docs/ci.md). When OpenBLAS fell
# back and the CPU has AVX2 and FMA, this names Haswell's kernels, the ones OpenBLAS chooses on
# AMD Zen. A value already set is kept, and a CPU that OpenBLAS knows keeps its own choice.
openblas_chose=$(OPENBLAS_VERBOSE=2 build/cpu/meshtrain describe --json 2>&1 >/dev/null | sed -n 's/^Core: //p' || true)
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$openblas_chose" = Prescott ] &&
   grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=Haswell
  echo "openblas: this CPU's model is unknown to OpenBLAS, which chose Prescott's kernels; OPENBLAS_CORETYPE=Haswell (ci/openblas.sh)"
fi
unset openblas_chose
