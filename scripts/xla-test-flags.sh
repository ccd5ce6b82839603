#!/usr/bin/env bash
# The XLA flags the gate's lanes compile with (make test, test-quick, coverage; docs/performance.md, "The test
# suite's time"), for the interpreter $1. Compiling is most of a JAX test's CPU time, and these flags cut it
# without changing what the programs compute:
#   --xla_backend_optimization_level=0   no LLVM optimisation passes
#   --xla_cpu_use_fusion_emitters=false  XLA:CPU's older elemental emitters: tw.run compiles in 0.6 s, not 2.1
# The second flag is gone from jaxlib 0.11 (it has the fusion emitters only), and XLA aborts on a flag it does
# not know, so it is kept only where a one-line probe in that interpreter compiles with it. What a user compiles
# is still tested: the library wheel's lane at the newest jax runs with XLA's defaults, the one at the lower bound
# with the fusion emitters (Makefile, LOWER_XLA), and a test about the programs a user compiles, bit for bit,
# compiles them with the default emitters (tests/controller_helpers.py, with_default_emitters).
set -euo pipefail
py=${1:?usage: xla-test-flags.sh PYTHON}
flags="--xla_backend_optimization_level=0"
legacy="--xla_cpu_use_fusion_emitters=false"
if XLA_FLAGS="$flags $legacy" "$py" -c "import jax.numpy as jnp; jnp.zeros(2).sum().block_until_ready()" \
    > /dev/null 2>&1; then
  flags="$flags $legacy"
fi
echo "$flags"
