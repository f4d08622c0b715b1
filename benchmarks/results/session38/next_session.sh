# Prepared in session 38 for the next device session's first call (about 560 s), on the package of
# its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session38/next_session.sh > $OUT/next_session.log 2>&1
# 1. every GPU test, with a limit that lets all 478 finish (session 38's 225 s stopped at 446);
# 2. alone, one process each: ResNet-18 ours with and without CUDA graphs, reduce-overhead and
#    plain inductor (goal 5: ours reserved 1380 MB against reduce-overhead's 540), then GPT-2's
#    reduce-overhead (goal 4b: ours 6.85 ms alone in session 38, reduce-overhead not rerun).
TESTS_S=${TESTS_S:-300} DEADLINE_S=${DEADLINE_S:-560} ARMS=${ARMS:-"resnet18:nvfuser_dtensor:X=1 resnet18:nvfuser_dtensor:no_cuda_graphs:X=1 resnet18:inductor:reduce-overhead:X=1 resnet18:inductor:X=1 gpt2:inductor:reduce-overhead:X=1 gpt2:nvfuser_dtensor:X=1"} \
  bash "$(dirname "$0")/../session36/next_session.sh"
