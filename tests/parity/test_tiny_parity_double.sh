#!/usr/bin/env bash
# The parity path: every Linear accumulated in double (CLEF_LINEAR=double), where the tiny-checkpoint
# probabilities must also be within 1e-6 of the float64 oracle (tests/unit/test_tiny_parity.c).
set -u
b="${CLEF_BUILD:-build}"
CLEF_LINEAR=double exec "$b/tests/test_tiny_parity"
