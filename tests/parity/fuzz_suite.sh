# Sourced by the test_fuzz_*_corpus.sh scripts (from the repository root). Their targets are built
# with their own sanitizers whatever the suite, so each corpus is replayed once: when the script runs
# alone, or in the suite tests/run.sh names in CLEF_FUZZ_SUITE; in any other suite it skips (77).
if [ -n "${CLEF_FUZZ_SUITE:-}" ] && [ "${CLEF_BUILD%/}" != "$(pwd)/${CLEF_FUZZ_SUITE%/}" ]; then
  echo "skip: replayed in the ${CLEF_FUZZ_SUITE%/}/ suite (the fuzz build is sanitized already)"; exit 77
fi
