# Session 42's third device call (about 520 s), on the package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session42/call_3.sh > $OUT/call_3.log 2>&1
# Both switches on, NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 and NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1, the
# latter narrowed after call 2 (only views that dtype casts alone read leave their regions;
# only upcasts swap with their views, downcasts of views become views of downcasts):
# 1. GPT-2's loss graph alone (the logits as they come): does the forward's 786 MB go?
# 2. Beside it, every GPU test with both switches on (TESTS_S, default 250 s; 0: none).
# 3. Then GPT-2, Llama, ViT-S/16, BERT and ConvNeXt training steps (ARM_MODELS), three arms, each model in its own process,
#    compiling at once and timed one at a time under one lock: default (with inductor), both
#    switches, CAST_WITHOUT_SET alone (NO_CWS_ARM=1: not that one; DEFAULT_BACKENDS: the
#    default arm's backends). Call 2's arm (the wide rule) cost ViT 2x its kernel time.
start=$SECONDS
nvidia-smi -L
BOTH="NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1"
env $BOTH timeout 200 python3 -u scripts/gpu_loss_memory.py --backends nvfuser_dtensor > $OUT/loss_both.log 2>&1 &
loss=$!
if [ "${TESTS_S:-250}" != 0 ]; then  # TESTS_S=0: no GPU tests
  env $BOTH TESTS_S=${TESTS_S:-250} bash scripts/gpu_tests.sh > $OUT/gpu_tests_summary.txt
  echo "== GPU tests with $BOTH ($((SECONDS - start)) s)"; tail -4 $OUT/gpu_tests_summary.txt
fi
lock=$OUT/timing.lock; M=${ARM_MODELS:-gpt2,llama,vit_s16,bert,convnext}; Z=${ARM_S:-240}
arm() {  # name, backends, env...
  local name=$1 backends=$2; shift 2
  env "$@" timeout $Z python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs ${ARM_JOBS:-3} --models $M --modes train \
    --timeout-s $((Z - 10)) --warmup 3 --iters 10 --backends $backends --timing-lock $lock --out $OUT/arm_$name > $OUT/arm_$name.log 2>&1
}
arm default ${DEFAULT_BACKENDS:-inductor,nvfuser_dtensor} NVFUSER_DTENSOR_CAST_WITHOUT_SET=0 &
arm both nvfuser_dtensor $BOTH &
[ -n "${NO_CWS_ARM:-}" ] || arm cws nvfuser_dtensor NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 &
wait
echo "#### loss, both switches"; grep -vi warn $OUT/loss_both.log | tail -12
arms="default both"; [ -n "${NO_CWS_ARM:-}" ] || arms="$arms cws"
for a in $arms; do echo "== arm $a"; python3 scripts/zoo_table.py $OUT/arm_$a/results.json | grep -E "^\| " | head -12; done
echo "== done ($((SECONDS - start)) s)"
