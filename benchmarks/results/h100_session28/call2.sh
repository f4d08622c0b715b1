# Session 28, call 2 (run from the project root on the device machine):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/h100_session28/call2.sh
# 1: ResNet-18's training kernels with channels-last convolutions (NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1),
#    next to NCHW and inductor; 2: session 27's channels-last inference default in the zoo, with the error.
nvidia-smi -L
echo "== 1 ResNet-18 training kernels: inductor, NCHW, channels-last"
NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1 timeout 200 python3 scripts/gpu_top_kernels.py resnet18 \
  --backends inductor,nvfuser_dtensor,nvfuser_dtensor:channels_last --top 12 > $OUT/top_resnet18_train.log 2>&1
grep -v "^\s*$" $OUT/top_resnet18_train.log | grep -v Warning | tail -50
echo "== 2 zoo inference with the channels-last default (session 27's patch)"
patch -p1 < benchmarks/results/h100_session27/channels_last_inference_not_landed.patch > /dev/null
timeout 300 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 3 --models resnet18,vit_s16,convnext \
  --modes infer --backends inductor,nvfuser_dtensor --out $OUT/zoo_cl > $OUT/zoo_cl.log 2>&1
python3 - <<'PY'
import json, os
r = json.load(open(os.environ["OUT"] + "/zoo_cl/results.json"))
for row in r["rows"]:
    print(row["case"], row["backend"], row["status"], row.get("step_ms"), row.get("kernels"), row.get("kernel_ms"), (row.get("error") or "")[:2500])
PY
