#!/usr/bin/env bash
# The XLA flags the gate's lanes compile with (make test, test-quick, coverage; docs/performance.md, "The test
# suite's time"), for the interpreter $1. Compiling is most of a JAX test's CPU time, and these flags cut it
# without changing what the programs compute:
#   --xla_backend_optimization_level=0   no LLVM optimisation passes
#   --xla_cpu_use_fusion_emitters=false  XLA:CPU's older elemental emitters: tw.run compiles in 0.6 s, not 2.1
# The second flag is gone from jaxlib 0.11 (it has the fusion emitters only), and XLA aborts on a flag it does
# not know, so it is kept only where that interpreter's jaxlib knows it: the library's own probe of the options
# its host program compiles with (tokenworth_jax.host_program.fast_compile_options) says so. What a user compiles
# is still tested: the library wheel's lane at the newest jax runs with XLA's defaults (the lane at the lower bound,
# there for the oldest APIs the wheel admits, runs with these flags), and a test about the programs a user
# compiles, bit for bit, compiles them with the default emitters (tests/controller_helpers.py, with_default_emitters).
set -euo pipefail
py=${1:?usage: xla-test-flags.sh PYTHON}
flags="--xla_backend_optimization_level=0"
if "$py" -c "from tokenworth_jax import host_program as h
raise SystemExit('xla_cpu_use_fusion_emitters' not in (h.fast_compile_options() or {}))" > /dev/null 2>&1; then
  flags="$flags --xla_cpu_use_fusion_emitters=false"
fi
echo "$flags"
