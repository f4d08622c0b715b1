# Every GPU test (scripts/gpu_tests.txt, the local CUDA-graph tests and packaging), or TESTS,
# under pytest-xdist, into $OUT/gpu_tests.log; interrupted with SIGINT after TESTS_S seconds
# (default 330) so that pytest still prints what ran. Then a summary: failures, counts, the
# number collected and whether the limit interrupted the run.
#   source .device/setup.sh && bash scripts/gpu_tests.sh   # TESTS_S, WORKERS (12), TESTS
timeout -s INT -k 20 ${TESTS_S:-330} python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n ${WORKERS:-12} ${TESTS:-$(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py} > $OUT/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|no tests|workers \[|KeyboardInterrupt !" $OUT/gpu_tests.log | tail -12
