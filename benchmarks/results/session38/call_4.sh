# Session 38's fourth device call: the 36 GPU tests call 1's 225 s cut off (call_4_tests.txt,
# from comparing call 1's log with the collected list), on the same package.
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session38/call_4.sh > $OUT/call_4.log 2>&1
nvidia-smi -L
timeout -s INT -k 15 ${TESTS_S:-150} python3 -c "
import sys, pytest
ids = [l.strip() for l in open('benchmarks/results/session38/call_4_tests.txt') if l.strip()]
sys.exit(pytest.main(['-v', '-p', 'no:cacheprovider', '-rfEs', '--tb=short', '-n', '8', *ids]))" > $OUT/gpu_tests_rest.log 2>&1
echo "== rc $?"; grep -E "^(FAILED|ERROR)|passed|failed|Interrupted" $OUT/gpu_tests_rest.log | tail -12
